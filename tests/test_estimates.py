"""A preset's time on one GPU (issue 33 item 3): experiments/presetlib/estimates.py turns XLA's
cost analysis of a model's compiled training step (FLOPs and bytes accessed per
sample-gradient) into hours on one A100 or H100 at an assumed efficiency, the roofline of
the two; `--show` and experiments/PRESETS.md print it beside the CPU figure."""
import os
import sys

import jax
import jax.numpy as jnp
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'experiments'))
from presetlib import documents, estimates  # noqa: E402  pylint: disable=wrong-import-position
from presetlib.plans import configs  # noqa: E402  pylint: disable=wrong-import-position

SMALL = ('cnn_emnist', 'emnist')  # a cheap entry of the table to measure again


def test_seconds_is_the_roofline_of_the_compiled_programs_cost():
  compiled = jax.jit(lambda a, b: jnp.tanh(a @ b)).lower(
      jnp.ones((64, 64)), jnp.ones((64, 64))).compile()
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  flops, accessed = estimates.program_cost(compiled)
  assert (flops, accessed) == (cost['flops'], cost['bytes accessed'])
  assert flops >= 2 * 64 ** 3 and accessed > 0
  eff = estimates.EFFICIENCY
  for name, rates in estimates.ACCELERATORS.items():
    for precision in ('float32', 'tf32'):
      assert estimates.seconds(flops, accessed, name, precision) == max(
          flops / (rates[precision] * eff), accessed / (rates['hbm'] * eff))
  # Compute-bound and memory-bound ends, with the datasheets' peaks.
  assert estimates.seconds(1e12, 0.0, 'A100', 'float32') == 1e12 / (19.5e12 * eff)
  assert estimates.seconds(1e12, 0.0, 'H100', 'tf32') == 1e12 / (494.5e12 * eff)
  assert estimates.seconds(0.0, 1e9, 'H100', 'float32') == 1e9 / (3.35e12 * eff)


def test_the_cost_table_is_the_models_compiled_training_step():
  """An entry of XLA_COST is a fresh cost analysis of the compiled step, over its batch."""
  flops, accessed = estimates.step_cost(*SMALL)
  assert estimates.XLA_COST[SMALL] == (round(flops / 1e6, 1), round(accessed / 1e6, 2))
  whole = estimates.program_cost(estimates.step_program(*SMALL, batch=8))
  assert (flops, accessed) == (whole[0] / 8, whole[1] / 8)


def _known_preset():
  """A preset and mode whose live runs all have a measured cost."""
  for name in documents.PRESETS:
    for mode in ('short', 'full'):
      runs = configs(name, mode)
      if runs and all((c.model, c.dataset) in estimates.XLA_COST for _, _, c in runs):
        return name, mode
  pytest.fail('no preset whose runs all have a measured cost')


def test_a_modes_gpu_hours_are_its_runs_through_the_roofline():
  name, mode = _known_preset()
  hours, unknown = estimates.accelerator_estimate(name, mode)
  assert not unknown
  for accelerator in estimates.ACCELERATORS:
    for precision in ('float32', 'tf32'):
      want = sum(estimates.sample_gradients(c) * estimates.seconds(
          estimates.XLA_COST[c.model, c.dataset][0] * 1e6,
          estimates.XLA_COST[c.model, c.dataset][1] * 1e6, accelerator, precision)
                 for _, _, c in configs(name, mode)) / 3600
      assert hours[accelerator][precision] == pytest.approx(want, rel=1e-12)
  assert hours['H100']['tf32'] < hours['A100']['float32']
  line = documents.work_line(name, mode)
  assert f'assumed {estimates.EFFICIENCY:.0%} of its peak' in line
  assert 'A100' in line and 'H100' in line and 'TF32' in line


def test_docs_state_the_assumed_efficiency():
  with open(os.path.join(ROOT, 'docs', 'running.md'), encoding='utf-8') as f:
    text = ' '.join(f.read().split())
  assert f'an assumed {estimates.EFFICIENCY:.0%} of peak' in text

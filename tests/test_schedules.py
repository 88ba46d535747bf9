"""Round-level learning-rate schedules (--lr_schedule, fedjax_drift/schedules.py): each
kind against its formula, inside real runs (rounds.csv's client_lr), swept with --grid,
resumed, and constant bit-identical to the unscheduled round."""
import csv
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import algorithms, engine, schedules, study
from fedjax_drift.errors import UserError
from helpers import tiny_config

LR = 0.1


def formula(kind, t, rounds, decay=0.0, step=0, floor=0.0):
  """The schedules' formulas as the module docstring writes them, in plain Python."""
  if kind == 'step':
    return LR * decay ** (t // step)
  if kind == 'exponential':
    return LR * decay ** t
  if kind == 'cosine':
    return LR * (floor + (1 - floor) * (1 + math.cos(math.pi * min(t, rounds) / rounds)) / 2)
  return LR


def _rows(path):
  with open(path) as f:
    return list(csv.DictReader(f))


def _run(tiny_npz, unequal_partition, out, **flags):
  config = tiny_config(tiny_npz, unequal_partition, out=str(out), lr=LR, **flags)
  return fedjax_drift.run(config, log=lambda *a: None)


@pytest.mark.parametrize('kind,flags', [
    ('cosine', dict(lr_min=0.2)),
    ('step', dict(lr_decay=0.5, lr_step_rounds=2)),
    ('exponential', dict(lr_decay=0.8)),
])
def test_schedule_value_matches_its_formula(kind, flags):
  config = fedjax_drift.Config(lr=LR, rounds=7, lr_schedule=kind, **flags).validate()
  schedule = jax.jit(schedules.client_lr(_flags(config)))
  want = [formula(kind, t, 7, flags.get('lr_decay', 0), flags.get('lr_step_rounds', 0),
                  flags.get('lr_min', 0)) for t in range(9)]
  got = [float(schedule(jnp.int32(t))) for t in range(9)]
  np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_traced_decay_gives_optax_values():
  """A swept --lr_decay is a tracer, for which schedules.py writes optax's formula out: the
  two agree for step and exponential."""
  for staircase, steps in ((True, 3), (False, 1)):
    static = schedules._exponential(LR, steps, 0.7, staircase)
    traced = jax.jit(lambda t, d, s=steps, c=staircase: schedules._exponential(LR, s, d, c)(t))
    for t in range(8):
      np.testing.assert_allclose(float(traced(jnp.int32(t), jnp.float32(0.7))),
                                 float(static(jnp.int32(t))), rtol=1e-6)


def test_cosine_run_trains_each_round_at_the_formulas_rate(tiny_npz, unequal_partition,
                                                            tmp_path):
  """rounds.csv's row for round r (1-based) holds eta_{r-1}: the schedule is read at the
  round index inside the compiled round."""
  _run(tiny_npz, unequal_partition, tmp_path / 'run', rounds=4, eval_every=2,
       lr_schedule='cosine', lr_min=0.1)
  rows = _rows(tmp_path / 'run' / 'rounds.csv')
  got = [float(r['client_lr']) for r in rows]
  np.testing.assert_allclose(got, [formula('cosine', t, 4, floor=0.1) for t in range(4)],
                             rtol=1e-6)


def test_constant_is_the_unscheduled_round_bit_for_bit(tiny_npz, unequal_partition):
  """The scheduled round with --lr_schedule=constant leaves the config as it is (no lr
  column) and gives exactly what the round built as before schedules existed gives."""
  config = tiny_config(tiny_npz, unequal_partition, algo='fedadc', clients_per_round=3,
                       rounds=3)
  assert schedules.client_lr(_flags(config)) is None
  assert schedules.lr_at(None, config.lr, jnp.int32(2)) is config.lr
  exp = study.prepare(config)
  algo = algorithms.get(config.algo, exp.config, exp.model, exp.server_data)
  before = engine.make_round(algo, exp.schedule, exp.max_local_steps, config.clients_per_round,
                             algorithms.weighting(config), exp.chunk, config.cohort_sampler,
                             config.devices, exp.scenario, exp.pipeline)
  states = []
  for fn in (before, exp.round_fn):
    state, step = exp.state, jax.jit(fn)
    for _ in range(3):
      state, metrics = step(state, exp.data)
    states.append(state)
    assert 'client_lr' not in metrics
  for a, b in zip(_leaves(states[0]), _leaves(states[1])):
    np.testing.assert_array_equal(a, b)


def _flags(config):
  """schedules.Flags of a Config (as study.scheduled_round unpacks them)."""
  return schedules.Flags(config.lr_schedule, config.lr, config.rounds, config.lr_decay,
                         config.lr_step_rounds, config.lr_min)


def _leaves(tree):
  """numpy leaves of a state, PRNG keys as their raw data."""
  return [np.asarray(jax.random.key_data(a) if jnp.issubdtype(a.dtype, jax.dtypes.prng_key)
                     else a) for a in jax.tree.leaves(tree)]


@pytest.mark.slow
def test_grid_sweeps_decay_and_floor_in_one_program(tiny_npz, unequal_partition, tmp_path):
  """--lr, --lr_decay and --lr_min are grid axes: traced, one compiled program, each run
  at its own values."""
  summary = _run(tiny_npz, unequal_partition, tmp_path / 'exp', rounds=3, eval_every=3,
                 lr_schedule='exponential', lr_decay=0.5, grid='lr_decay:0.5,0.9')
  rows = _rows(tmp_path / 'exp' / 'rounds.csv')
  for run in summary['runs']:
    got = [float(r['client_lr']) for r in rows if int(r['run']) == run['run']]
    np.testing.assert_allclose(got, [formula('exponential', t, 3, decay=run['lr_decay'])
                                      for t in range(3)], rtol=1e-6)
  summary = _run(tiny_npz, unequal_partition, tmp_path / 'cos', rounds=2, eval_every=2,
                 lr_schedule='cosine', grid='lr:0.1,0.2;lr_min:0,0.5')
  assert summary['runs'][0]['status'] == 'ok' and len(summary['runs']) == 4
  rows = _rows(tmp_path / 'cos' / 'rounds.csv')
  for run in summary['runs']:
    got = [float(r['client_lr']) for r in rows if int(r['run']) == run['run']]
    want = [run['lr'] / LR * formula('cosine', t, 2, floor=run['lr_min']) for t in range(2)]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_resume_continues_the_schedule_exactly(tiny_npz, unequal_partition, tmp_path):
  flags = dict(lr_schedule='step', lr_decay=0.5, lr_step_rounds=2, eval_every=2,
               clients_per_round=2)
  _run(tiny_npz, unequal_partition, tmp_path / 'whole', rounds=4, **flags)
  _run(tiny_npz, unequal_partition, tmp_path / 'split', rounds=2, **flags)
  fedjax_drift.simulation.resume(str(tmp_path / 'split'), log=lambda *a: None, rounds=4)
  for name in ('rounds.csv', 'metrics.csv'):
    whole, split = _rows(tmp_path / 'whole' / name), _rows(tmp_path / 'split' / name)
    drop = lambda rows: [{k: v for k, v in r.items() if k != 'elapsed_s'} for r in rows]
    assert drop(whole) == drop(split), name


def test_cosine_refuses_a_resume_with_other_rounds(tiny_npz, unequal_partition, tmp_path):
  _run(tiny_npz, unequal_partition, tmp_path / 'cos', rounds=2, eval_every=2,
       lr_schedule='cosine')
  with pytest.raises(UserError, match='--lr_schedule=cosine decays over'):
    fedjax_drift.simulation.resume(str(tmp_path / 'cos'), log=lambda *a: None, rounds=3)


@pytest.mark.parametrize('flags,message', [
    (dict(lr_schedule='step', lr_decay=0.5), '--lr_step_rounds'),
    (dict(lr_schedule='exponential'), '--lr_decay'),
    (dict(lr_schedule='exponential', lr_decay=1.5), '--lr_decay'),
    (dict(lr_schedule='cosine', lr_min=2.0), '--lr_min'),
])
def test_bad_schedule_flags_are_one_line_errors(flags, message):
  with pytest.raises(UserError, match=message):
    fedjax_drift.Config(**flags).validate()


def test_grid_axis_of_another_schedule_is_refused(tiny_npz, unequal_partition, tmp_path):
  with pytest.raises(UserError, match='lr_decay is not read with --lr_schedule=cosine'):
    _run(tiny_npz, unequal_partition, tmp_path / 'x', lr_schedule='cosine',
         grid='lr_decay:0.5,0.9')

"""Peak-memory choices (issue 23): what `import fedjax_drift` loads, and the XLA options a CNN's
round compiles with, which must leave every result as it was."""
import subprocess
import sys

import chex
import jax
import numpy as np
import pytest

from fedjax_drift import algorithms, config, engine, models
from fedjax_drift.data import federated

# Loaded only where they are used (seed tables, plots, data preparation): each costs tens of MB
# of resident memory that a training run would otherwise carry to its peak.
LAZY = ('scipy', 'matplotlib', 'tensorflow', 'tensorflow_datasets', 'torch', 'transformers')


def test_import_leaves_heavy_modules_unloaded():
  code = ('import sys, fedjax_drift, fedjax_drift.simulation, fedjax_drift.study; '
          f'print(",".join(m for m in {LAZY!r} if m in sys.modules))')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True)
  assert out.stdout.strip() == '', f'import fedjax_drift loaded {out.stdout.strip()}'


def test_compiler_options_only_for_convolutions_on_cpu():
  assert engine.compiler_options(False) == {}
  options = engine.compiler_options(True)
  if jax.default_backend() == 'cpu':
    assert options == {'xla_cpu_use_fusion_emitters': False}
  else:
    assert options == {}
  assert not engine._xla_accepts((('xla_cpu_no_such_option', False),))


def _round_params(model, k, compiler_options):
  """Parameters after two FedAvg rounds of `model` on fixed random images, the round compiled
  with `compiler_options`."""
  rng = np.random.default_rng(0)
  n = 8 * k
  x = rng.integers(0, 256, (n,) + model.input_shape, dtype=np.uint8)
  y = rng.integers(0, 10, n).astype(np.int32)
  parts = [np.arange(i * 8, (i + 1) * 8) for i in range(k)]
  algo = algorithms.get('fedavg', config.Config(lr=0.1, clients_per_round=k, num_clients=k),
                        model)
  data = federated.build(x, y, parts, 10)
  state = engine.init_state(algo, model.init(jax.random.key(0)), k, jax.random.key(1))
  round_fn = jax.jit(engine.make_round(algo, engine.Schedule(4, 2, 0), 2, k, 'examples', 1),
                     compiler_options=compiler_options or None)
  for _ in range(2):
    state, _ = round_fn(state, data)
  return state.params


@pytest.mark.slow  # two CNN compiles: ~15 s on a busy 2-core machine
def test_conv_round_is_bit_identical_with_the_compile_options():
  model = models.get('cnn_mnist', 10, (8, 8, 1), conv_impl='im2col')
  options = engine.compiler_options(True)
  chex.assert_trees_all_equal(_round_params(model, 2, options), _round_params(model, 2, {}))


def test_segment_takes_the_compile_options():
  """make_segment compiles with what it is given (a bad option fails, a good one runs)."""
  seg = engine.make_segment(lambda s, d, i: (s + d, {'s': s}), 2,
                            compiler_options={'xla_cpu_no_such_option': False})
  try:
    seg.lower(jax.numpy.float32(0), jax.numpy.float32(1), None, jax.numpy.int32(1)).compile()
  except getattr(jax.errors, 'JaxRuntimeError', RuntimeError) as e:
    assert 'xla_cpu_no_such_option' in str(e)
  else:
    raise AssertionError('make_segment ignored its compiler_options')
  ok = engine.make_segment(lambda s, d, i: (s + d, {'s': s}), 2,
                           compiler_options=engine.compiler_options(True))
  state, hist = ok(jax.numpy.float32(0), jax.numpy.float32(1), None, jax.numpy.int32(2))
  assert float(state) == 2.0 and hist['s'].tolist() == [0.0, 1.0]

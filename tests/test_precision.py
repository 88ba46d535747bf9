"""--matmul_precision: the setting reaches every traced program, and on CPU it changes nothing."""
import jax
import numpy as np
import pytest

from fedjax_drift import simulation
from fedjax_drift.config import Config


@pytest.mark.parametrize('precision', ['highest', 'default'])
def test_the_precision_is_in_force_while_the_run_traces(monkeypatch, precision):
  seen = []
  monkeypatch.setattr(simulation, '_run', lambda config, log: seen.append(
      jax.config.jax_default_matmul_precision))
  simulation.run(Config(matmul_precision=precision))
  assert seen == [precision]


def test_highest_puts_full_precision_on_every_dot():
  with jax.default_matmul_precision('highest'):
    text = jax.jit(lambda a: a @ a).lower(np.ones((2, 2), np.float32)).as_text()
  assert 'HIGHEST' in text


@pytest.mark.slow
def test_on_cpu_both_settings_train_bit_identically(tmp_path):
  params = {}
  for precision in ('highest', 'default'):
    out = tmp_path / precision
    simulation.run(Config(model='mlp', rounds=2, num_clients=6, clients_per_round=3,
                          matmul_precision=precision, out=str(out), progress=False,
                          save_params=str(tmp_path / f'{precision}.npz')), log=lambda *a: None)
    params[precision] = np.load(tmp_path / f'{precision}.npz')
  a, b = params['highest'], params['default']
  assert a.files and all(np.array_equal(a[k], b[k]) for k in a.files)

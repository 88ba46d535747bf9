"""--devices=N shards the cohort over a mesh; results equal a single device (run in a
subprocess with XLA_FLAGS=--xla_force_host_platform_device_count=2)."""
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent('''
    import sys
    sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
    import jax, chex
    import fedjax_drift
    from helpers import tiny_config
    assert jax.device_count() == 2, jax.devices()
    def run(algo, devices, par):
      exp = fedjax_drift.prepare(tiny_config({npz!r}, {parts!r}, algo=algo, model='mlp',
          clients_per_round=4, batch_size=4, local_steps=0, local_epochs=1,
          devices=devices, client_parallelism=par))
      state, step = exp.state, jax.jit(exp.round_fn)
      for _ in range(2):
        state = step(state, exp.data)[0]
      return state
    # SCAFFOLD has per-client state; IGFL's attention mixes the sharded cohort axis.
    for algo, par in (('fedavg', 'vmap'), ('scaffold', 'sequential'), ('igfl', 'vmap')):
      ref, sharded = run(algo, 1, par), run(algo, 2, par)
      chex.assert_trees_all_close(sharded.params, ref.params, atol=1e-5, rtol=1e-5)
      chex.assert_trees_all_close(sharded.clients, ref.clients, atol=1e-5, rtol=1e-5)
    print('OK')
''')


@pytest.mark.slow  # a subprocess with two forced host devices: minutes
def test_two_devices_equal_one(tiny_npz, unequal_partition):
  env = dict(os.environ, XLA_FLAGS='--xla_force_host_platform_device_count=2')
  code = SCRIPT.format(root=ROOT, tests=os.path.join(ROOT, 'tests'), npz=tiny_npz,
                       parts=unequal_partition)
  result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          env=env, timeout=600)
  assert result.returncode == 0 and 'OK' in result.stdout, result.stderr[-3000:]

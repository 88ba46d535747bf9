"""Optional packages stay optional at import time (issue 48 item 1).

A bare accelerator image has JAX, flax, optax, chex, orbax, h5py, tensorboard and torch, not
tensorflow-datasets, dp-accounting or submitit (nor, perhaps, Pillow, matplotlib or tqdm). In
a fresh process whose imports of those raise ImportError (a sys.meta_path finder, as if they
were not installed), the package and the preset and benchmark helpers import, one tiny round
runs from the working tree (PYTHONPATH, no install), and none of the blocked modules was
loaded."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPTIONAL = ('tensorflow_datasets', 'dp_accounting', 'submitit')
# Core dependencies a device image may lack: a run without them loses only the plots (and
# the progress bar, which --progress=false turns off).
MAYBE_ABSENT = ('PIL', 'matplotlib', 'tqdm')

CHILD = r'''
import importlib.abc, json, os, sys
BLOCKED = set(sys.argv[1].split(','))

class Blocker(importlib.abc.MetaPathFinder):
  def find_spec(self, name, path=None, target=None):
    if name.split('.')[0] in BLOCKED:
      raise ImportError(f'{name} is blocked (not installed on the device image)')
    return None

sys.meta_path.insert(0, Blocker())
root = sys.argv[2]
sys.path[:0] = [root, os.path.join(root, 'experiments'), os.path.join(root, 'benchmarks')]
import fedjax_drift
import fedjax_drift.cli, fedjax_drift.data.prepare, fedjax_drift.compare
from presetlib import estimates, plans, running  # what benchmarks/gpu_check.py reads
import gpu_check
out = os.path.join(sys.argv[3], 'run')
summary = fedjax_drift.run(fedjax_drift.Config(
    model='logreg', rounds=1, num_clients=4, clients_per_round=2, local_steps=2,
    eval_every=1, progress=False, out=out, compile_cache='off'), log=lambda *a: None)
print(json.dumps({'loaded': sorted(m for m in sys.modules if m.split('.')[0] in BLOCKED),
                  'accuracy': summary['final_accuracy'],
                  'files': sorted(os.listdir(out)),
                  'from': os.path.dirname(fedjax_drift.__file__)}))
'''


def _run_blocked(blocked, tmp_path):
  env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
  env['PYTHONPATH'] = ROOT  # as on the device: the working tree, not an installed package
  done = subprocess.run([sys.executable, '-c', CHILD, ','.join(blocked), ROOT, str(tmp_path)],
                        capture_output=True, text=True, cwd=str(tmp_path), env=env, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_package_imports_and_runs_a_round_without_the_optional_packages(tmp_path):
  result, _ = _run_blocked(OPTIONAL, tmp_path)
  assert result['loaded'] == []
  assert 0.0 <= result['accuracy'] <= 1.0
  assert result['from'] == os.path.join(ROOT, 'fedjax_drift')
  assert 'summary.json' in result['files']


def test_a_round_runs_without_pillow_matplotlib_and_tqdm_minus_the_plots(tmp_path):
  result, stderr = _run_blocked(OPTIONAL + MAYBE_ABSENT, tmp_path)
  assert result['loaded'] == []
  assert 'summary.json' in result['files'] and 'metrics.csv' in result['files']
  assert not [f for f in result['files'] if f.endswith('.png')]
  assert stderr.count('matplotlib is not installed') == 1

"""benchmarks/gpu_check.py (issue 48): the smoke check stops a call that has no GPU with one
screen, and the whole call runs at tiny sizes on a CPU, writing every section to one JSON."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, 'benchmarks', 'gpu_check.py')


def _call(*flags, timeout=900, **env_vars):
  env = dict(os.environ, PYTHONPATH=ROOT, **env_vars)  # as on the device: the working tree
  env.pop('OUT', None)
  return subprocess.run([sys.executable, SCRIPT, *flags], capture_output=True, text=True,
                        cwd=ROOT, env=env, timeout=timeout)


def test_without_a_gpu_the_smoke_check_stops_the_call_with_one_screen(tmp_path):
  done = _call(f'--out={tmp_path}', '--sections=rounds', timeout=300,
               JAX_PLATFORMS='cpu')  # no GPU, even on a machine that has one
  assert done.returncode == 1, done.stderr[-2000:]
  assert 'the smoke check FAILED' in done.stdout and 'not on a GPU' in done.stdout
  assert len(done.stdout.splitlines()) < 50  # one screen
  record = json.loads((tmp_path / 'gpu_check.json').read_text())
  assert record['sections']['smoke']['status'] == 'error'
  assert 'rounds' not in record['sections']  # nothing else ran
  assert record['sections']['smoke']['versions']['jax']


@pytest.mark.slow
def test_tiny_call_runs_every_section_on_cpu(tmp_path):
  done = _call('--tiny', f'--out={tmp_path}')
  assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
  record = json.loads((tmp_path / 'gpu_check.json').read_text())
  sections = record['sections']
  assert list(sections) == ['smoke', 'default_run', 'rounds', 'torch', 'sweep', 'pfl', 'preset']
  for name, s in sections.items():
    assert s['status'] in ('ok', 'skipped'), (name, s)
  assert sections['smoke']['device']['backend'] == 'cpu'
  assert sections['default_run']['cpu_figure']['file'].startswith('benchmarks/results/first-run-')
  assert 0 <= sections['default_run']['final_accuracy'] <= 1
  rows = sections['rounds']['rows']
  assert [(r['k'], r['mode']) for r in rows] == [
      (k, m) for k in (2, 4) for m in ('sequential', 'chunked', 'vmap')]
  assert all(r['seconds_per_round'] > 0 and r['compile_s'] > 0 for r in rows)
  assert sections['sweep']['runs_in_sweep'] == 4 and sections['sweep']['wall_ratio'] > 0
  assert sections['pfl']['rounds_per_s'] > 0
  assert sections['pfl']['projected_1500_rounds_s'] > sections['pfl']['compile_s']
  preset = sections['preset']
  assert preset['settings']['model'] == 'resnet8' and preset['estimate']['seconds'] > 0
  assert 'synthetic' in record['data']

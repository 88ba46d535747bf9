"""experiments/presets.py --executor=slurm through submitit, on submitit's local executor (the
same path, no cluster): one job per method sweep, each with its own run directory; a job
killed mid-run fails in one line, and a rerun submits only that one, which resumes from its
checkpoint, giving the tables of an uninterrupted run; each job's machine, time and commit are
in provenance.json."""
import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import fedjax_drift

pytest.importorskip('submitit')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'experiments'))
import presets  # noqa: E402

SCRIPT = os.path.join(ROOT, 'experiments', 'presets.py')
TINY = ['fedadc_cohort', '--mode=cpu', '--rounds=12', '--seeds=1']


def _rows(results):
  """results.json's rows as JSON, without the run directories' paths."""
  results = json.loads(json.dumps(results))
  return {s: [{k: ({c: v for c, v in val.items() if c != 'out'} if k == 'config' else val)
               for k, val in r.items()} for r in rows]
          for s, rows in results['scenarios'].items()}


def _job(out, name):
  path = os.path.join(out, 'jobs', f'{name}.json')
  try:
    return json.load(open(path))
  except (OSError, ValueError):  # not written yet, or being replaced
    return None


@pytest.mark.slow
def test_a_killed_job_alone_is_resubmitted_and_resumes(tmp_path):
  reference = presets.run_preset('fedadc_cohort', 'cpu', rounds=12, seeds=1,
                                 out_root=str(tmp_path / 'ref'), log=lambda *_: None)
  out = str(tmp_path / 'cluster')
  proc = subprocess.Popen([sys.executable, SCRIPT, *TINY, '--executor=submitit_local',
                           f'--out={out}'], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, start_new_session=True)
  end, victim = time.time() + 480, None
  while victim is None:
    assert proc.poll() is None and time.time() < end, proc.stderr.read() if proc.poll() else ''
    for d in glob.glob(os.path.join(out, 'runs', '*')):
      job = _job(out, os.path.basename(d))
      if job and job['state'] == 'running' and glob.glob(os.path.join(d, 'checkpoints', '*')) \
          and not os.path.exists(os.path.join(d, 'summary.json')):
        victim = os.path.basename(d)
        os.kill(job['pid'], signal.SIGKILL)
        break
    time.sleep(0.1)
  _, err = proc.communicate(timeout=600)
  assert proc.returncode == 2 and len(err.strip().splitlines()) == 1, err
  assert victim in err and 'rerun the same command to resubmit it' in err
  record = fedjax_drift.rundir.Record.load(os.path.join(out, 'runs', victim))
  others = {os.path.basename(d): _job(out, os.path.basename(d))['job_id']
            for d in glob.glob(os.path.join(out, 'runs', '*')) if not d.endswith(victim)}
  assert others and not os.path.exists(os.path.join(out, 'results.json'))

  rerun = subprocess.run([sys.executable, SCRIPT, *TINY, '--executor=submitit_local',
                          f'--out={out}'], capture_output=True, text=True, timeout=600)
  assert rerun.returncode == 0, rerun.stderr
  assert 'submitted 1 job(s)' in rerun.stdout
  assert {n: _job(out, n)['job_id'] for n in others} == others  # not resubmitted
  again = fedjax_drift.rundir.Record.load(os.path.join(out, 'runs', victim))
  assert again.run_id == record.run_id  # resumed from its checkpoint, not started again
  assert _job(out, victim)['state'] == 'ok'
  assert _rows(json.load(open(os.path.join(out, 'results.json')))) == _rows(reference)
  provenance = json.load(open(os.path.join(out, 'provenance.json')))
  assert sorted(j['run_dir'] for j in provenance['jobs']) == sorted(
      f'runs/{os.path.basename(d)}' for d in glob.glob(os.path.join(out, 'runs', '*')))
  for j in provenance['jobs']:
    assert j['host'] and j['commit'] and j['machine'] and j['wall_s'] > 0 and j['job_id']


def test_slurm_without_a_cluster_is_one_line(tmp_path):
  proc = subprocess.run([sys.executable, SCRIPT, *TINY, '--executor=slurm',
                         f'--out={tmp_path}'], capture_output=True, text=True, timeout=300)
  if proc.returncode == 0:
    pytest.skip('this machine is a SLURM cluster')
  assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
  assert proc.stderr.startswith('error: --executor=slurm')

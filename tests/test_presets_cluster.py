"""experiments/presets.py --executor=slurm through submitit, on submitit's local executor (the
same path, no cluster): one job per method sweep, each with its own run directory; a job
killed mid-run fails in one line; a rerun while a job of the first command still runs waits
on that job instead of submitting it again, and submits only the killed one, which resumes
from its checkpoint, giving the tables of an uninterrupted run; each job's machine, time and
commit are in provenance.json."""
import dataclasses
import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import fedjax_drift
from presets_helpers import SCRIPT, job_record, reference, run_ids, scenarios, tiny
from presetlib import cluster

pytest.importorskip('submitit')

ROUNDS = 12  # a checkpoint every 3: a job is killed between two
LOCAL = ['--executor=submitit_local']


def _command(out, log):
  """The tiny preset through submitit's local executor into `out`, in its own session,
  stdout and stderr to files (jobs it starts hold them open after it ends)."""
  return subprocess.Popen([sys.executable, SCRIPT, *tiny(ROUNDS), *LOCAL, f'--out={out}'],
                          stdout=open(f'{log}.out', 'w'), stderr=open(f'{log}.err', 'w'),
                          text=True, start_new_session=True)


def _running(out):
  """{sweep: (its job's record, whether it has a checkpoint)} of the jobs running now."""
  found = {}
  for d in glob.glob(os.path.join(out, 'runs', '*')):
    job = job_record(out, os.path.basename(d))
    if job and job['state'] == 'running' and not os.path.exists(
        os.path.join(d, 'summary.json')):
      found[os.path.basename(d)] = job, bool(glob.glob(os.path.join(d, 'checkpoints', '*')))
  return found


def _kill_one_stop_another(out, proc, log):
  """Once a job of `proc` has a checkpoint and another still runs: stops the other (SIGSTOP:
  a rerun finds it running) and kills the first (SIGKILL). Returns ((killed sweep, its job's
  record), (stopped sweep, its job's record))."""
  end = time.time() + 480
  while True:
    assert proc.poll() is None and time.time() < end, open(f'{log}.err').read()
    running = _running(out)
    victim = next((n for n, (_, checkpoint) in running.items() if checkpoint), None)
    stopped = next((n for n in running if n != victim), None)
    if victim and stopped:
      os.kill(running[stopped][0]['pid'], signal.SIGSTOP)
      os.kill(running[victim][0]['pid'], signal.SIGKILL)
      assert not os.path.exists(os.path.join(out, 'runs', stopped, 'summary.json'))
      return (victim, running[victim][0]), (stopped, running[stopped][0])
    time.sleep(0.1)


def _wait_for(text, proc, log, within=300):
  """Waits until `proc`'s stdout (log.out) holds `text`."""
  end = time.time() + within
  while text not in open(f'{log}.out').read():
    assert proc.poll() is None and time.time() < end, open(f'{log}.err').read()
    time.sleep(0.1)


@pytest.mark.slow
def test_a_rerun_waits_on_a_running_job_and_resubmits_only_a_killed_one(tmp_path):
  uninterrupted = reference(tmp_path / 'ref', ROUNDS)
  out, first_log, rerun_log = str(tmp_path / 'cluster'), tmp_path / 'first', tmp_path / 'rerun'
  first, rerun = _command(out, first_log), None
  try:
    (victim, killed), (stopped, running) = _kill_one_stop_another(out, first, first_log)
    before = run_ids(out)
    rerun = _command(out, rerun_log)  # while the first command still waits on its jobs
    _wait_for(f'{stopped}: job {running["job_id"]} is still RUNNING: waiting for it', rerun,
              rerun_log)
    os.kill(running['pid'], signal.SIGCONT)
    first.wait(timeout=600)
    rerun.wait(timeout=600)
  except BaseException:
    for proc in (first, rerun):  # what this test started, stopped jobs included
      if proc is not None:
        try:
          os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
          pass
    raise
  err = open(f'{first_log}.err').read()
  assert first.returncode == 2 and len(err.strip().splitlines()) == 1, err
  assert victim in err and 'rerun the same command to resubmit it' in err
  said = open(f'{rerun_log}.out').read()
  assert rerun.returncode == 0, open(f'{rerun_log}.err').read()
  assert f'{victim}: job {killed["job_id"]} ended (FAILED): submitting it again' in said
  assert 'submitted 1 job(s)' in said
  # The stopped job ran to its end once: no second job wrote its run directory.
  again = job_record(out, stopped)
  assert again['state'] == 'ok' and again['job_id'] == running['job_id']
  assert again['started_utc'] == running['started_utc']
  assert job_record(out, victim)['state'] == 'ok'
  assert job_record(out, victim)['job_id'] != killed['job_id']
  assert run_ids(out) == before  # the killed one resumed its run directory, not started again
  assert scenarios(json.load(open(os.path.join(out, 'results.json')))) == scenarios(
      uninterrupted)
  provenance = json.load(open(os.path.join(out, 'provenance.json')))
  assert sorted(j['run_dir'] for j in provenance['jobs']) == sorted(
      f'runs/{os.path.basename(d)}' for d in glob.glob(os.path.join(out, 'runs', '*')))
  for j in provenance['jobs']:
    assert j['host'] and j['commit'] and j['machine'] and j['wall_s'] > 0 and j['job_id']


def test_a_recorded_job_is_waited_on_only_while_it_runs_with_the_same_settings():
  config = fedjax_drift.Config(model='logreg', rounds=2, out='OUT/runs/s-fedavg')
  key = cluster.settings_key(config, True)
  record = {'job_id': '42', 'folder': 'OUT/submitit', 'cluster': 'slurm', 'settings': key}
  assert cluster.reconnect_action(None, None, key, config.out) == ('submit', '')
  for state in ('PENDING', 'RUNNING', 'REQUEUED'):
    action, line = cluster.reconnect_action(record, state, key, config.out)
    assert action == 'wait' and line == f'job 42 is still {state}: waiting for it, not ' \
        'submitting it again'
  for state in ('FAILED', 'CANCELLED', 'TIMEOUT', 'PREEMPTED', 'UNKNOWN', 'COMPLETED'):
    action, line = cluster.reconnect_action(record, state, key, config.out)
    assert action == 'submit' and line.startswith(f'job 42 ended ({state}): submitting it')
  other = cluster.settings_key(dataclasses.replace(config, rounds=3), True)
  with pytest.raises(fedjax_drift.UserError, match=r'OUT/runs/s-fedavg: job 42 is still '
                     r'RUNNING with other settings'):
    cluster.reconnect_action(record, 'RUNNING', other, config.out)
  assert cluster.settings_key(dataclasses.replace(config, overwrite='yes'), True) == key
  assert cluster.settings_key(config, False) != key


def test_a_local_job_whose_pid_is_another_process_has_ended(tmp_path):
  """A local job's id is its controller's pid: a live pid of another program (here, this
  test's process) is a job that ended, not one to wait on."""
  record = {'job_id': str(os.getpid()), 'folder': str(tmp_path), 'cluster': 'local'}
  assert cluster.job_state(record, cluster.recorded_job(record)) == 'FAILED'
  record['job_id'] = '999999999'  # no such process
  assert cluster.job_state(record, cluster.recorded_job(record)) == 'FAILED'


def test_slurm_without_a_cluster_is_one_line(tmp_path):
  proc = subprocess.run([sys.executable, SCRIPT, *tiny(ROUNDS), '--executor=slurm',
                         f'--out={tmp_path}'], capture_output=True, text=True, timeout=300)
  if proc.returncode == 0:
    pytest.skip('this machine is a SLURM cluster')
  assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
  assert proc.stderr.startswith('error: --executor=slurm')

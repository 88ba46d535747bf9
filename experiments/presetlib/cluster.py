"""A preset's method sweeps as cluster jobs through submitit (`presets.py --executor=slurm`).

Each (preset, scenario, method) sweep is one job with its own run directory, submitted as one
SLURM job array (`--slurm_array`: how many run at once). A job resumes its run directory
(jobs.run_or_resume), so a job killed, pre-empted or timed out continues from its checkpoint
when resubmitted; a rerun of the same command submits only the sweeps not finished, and the
tables are built from the run directories as with --jobs. Each job writes OUT/jobs/<sweep>.json
(host, machine, start, wall time, commit, job id): provenance.json lists them.

`--executor=submitit_local` runs the same path through submitit's local executor (every job a
process of this machine at once): the tests use it; it needs no cluster.
"""
import datetime
import os
import platform
import socket
import subprocess
import time

import jax

import fedjax_drift
from fedjax_drift import report
from presetlib.jobs import run_method_job, method_finished
from presetlib.loading import ROOT

EXECUTORS = ('local', 'slurm', 'submitit_local')
JOBS_DIR = 'jobs'  # OUT/jobs/<sweep>.json: each job's machine, time and commit


def executor(kind, folder, partition='', minutes=60, gpus=0, array=0):
  """A submitit executor for `kind` ('slurm' or 'submitit_local') writing its scripts and logs
  to `folder`; partition, minutes (time limit), gpus per job, array (jobs of an array running
  at once, 0 = no limit). UserError in one line when submitit or SLURM is missing."""
  try:
    import submitit  # pylint: disable=g-import-not-at-top  (optional: pip install ".[slurm]")
  except ImportError:
    raise fedjax_drift.UserError(f'--executor={kind} needs submitit: pip install ".[slurm]" '
                                 'in the clone') from None
  cluster = 'local' if kind == 'submitit_local' else 'slurm'
  try:
    ex = submitit.AutoExecutor(folder=folder, cluster=cluster)
  except (RuntimeError, ValueError) as e:
    raise fedjax_drift.UserError(f'--executor={kind}: {str(e).splitlines()[0]}') from None
  params = {'timeout_min': minutes, 'gpus_per_node': gpus, 'name': 'fedjax-drift-preset'}
  if cluster == 'slurm':
    params.update(slurm_array_parallelism=array or 1000,
                  **({'slurm_partition': partition} if partition else {}))
  ex.update_parameters(**params)
  return ex


class ClusterRunner:
  """Runner's interface (submit, close, abort) over a submitit executor: submit() holds the
  jobs back and the first result() sends every sweep not finished as one job array. A sweep
  whose run directories finished with the same settings is read here, not submitted."""

  def __init__(self, ex, log=print):
    self.executor, self.log = ex, log
    self._held, self._jobs = [], {}  # [(index, config, sweep)], index -> submitit job
    self._sent = 0

  def submit(self, config, sweep):
    """A future of the sweep's outcome (jobs.run_method_job's)."""
    index, self._sent = self._sent, self._sent + 1
    if method_finished(config, sweep):
      return _Read(config, sweep)
    self._held.append((index, config, sweep))
    return _Job(self, index, config)

  def _flush(self):
    if not self._held:
      return
    held, self._held = self._held, []
    # the jobs import presetlib (this directory) by name, in a fresh interpreter
    path = os.path.join(ROOT, 'experiments')
    os.environ['PYTHONPATH'] = os.pathsep.join(
        [path] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p])
    jobs = self.executor.map_array(run_job, [c for _, c, _ in held], [s for *_, s in held])
    self._jobs.update({i: j for (i, _, _), j in zip(held, jobs)})
    self.log(f'submitted {len(held)} job(s) ({self.executor.cluster}: '
             f'{", ".join(str(j.job_id) for j in jobs[:3])}{", ..." if len(jobs) > 3 else ""})')

  def wait(self, index, config):
    """The outcome of job `index`: ('error', message) if the job failed or was killed."""
    self._flush()
    job = self._jobs[index]
    try:
      return job.result()
    except Exception as e:  # pylint: disable=broad-except  (submitit's job failures)
      first = (str(e).strip().splitlines() or [type(e).__name__])[0]
      return 'error', (f'{config.out}: job {job.job_id} did not finish ({first[:200]}); '
                       'rerun the same command to resubmit it (it resumes from its checkpoint)')

  def close(self):
    """Nothing to end: jobs run on the cluster."""

  def abort(self):
    """Cancels the jobs of submitit's local executor (a cluster's jobs go on: a rerun
    collects them, or resubmits the ones not finished)."""
    if self.executor.cluster == 'local':
      for job in self._jobs.values():
        try:
          job.cancel(check=False)
        except Exception:  # pylint: disable=broad-except
          pass


class _Read:
  """A finished sweep: its runs read from its run directories."""

  def __init__(self, config, sweep):
    self.args = (config, sweep)

  def result(self):
    """jobs.run_method_job's outcome, read."""
    return run_method_job(*self.args)


class _Job:
  """A sweep sent to the cluster."""

  def __init__(self, runner, index, config):
    self.runner, self.index, self.config = runner, index, config

  def result(self):
    """Its outcome (ClusterRunner.wait)."""
    return self.runner.wait(self.index, self.config)


def job_file(config):
  """OUT/jobs/<sweep>.json of the sweep whose run directory is config.out (OUT/runs/<sweep>)."""
  out = os.path.dirname(os.path.dirname(config.out))
  return os.path.join(out, JOBS_DIR, os.path.basename(config.out) + '.json')


def run_job(config, sweep):
  """One cluster job: the sweep resumed or run (jobs.run_method_job), with OUT/jobs/<sweep>.json
  written at its start (pid, host) and end (wall time, outcome)."""
  start = time.time()
  info = {'run_dir': os.path.relpath(config.out, os.path.dirname(os.path.dirname(config.out))),
          'job_id': _job_id(), 'host': socket.gethostname(), 'pid': os.getpid(),
          'machine': _machine(), 'commit': _commit(),
          'started_utc': datetime.datetime.fromtimestamp(start, datetime.timezone.utc)
                                          .strftime('%Y-%m-%d %H:%M:%S'), 'state': 'running'}
  os.makedirs(os.path.dirname(job_file(config)), exist_ok=True)
  report.write_json(job_file(config), info)
  outcome = run_method_job(config, sweep)
  report.write_json(job_file(config), {**info, 'state': outcome[0],
                                       'wall_s': round(time.time() - start, 1)})
  return outcome


def read_job_files(out_dir):
  """[OUT/jobs/*.json] of a preset run by a cluster executor (sorted by sweep), or []."""
  folder = os.path.join(out_dir, JOBS_DIR)
  if not os.path.isdir(folder):
    return []
  return [fedjax_drift.rundir.read_json(os.path.join(folder, name))
          for name in sorted(os.listdir(folder)) if name.endswith('.json')]


def _job_id():
  for name in ('SLURM_ARRAY_JOB_ID', 'SLURM_JOB_ID', 'SUBMITIT_LOCAL_JOB_ID'):
    if os.environ.get(name):
      task = os.environ.get('SLURM_ARRAY_TASK_ID')
      return f'{os.environ[name]}_{task}' if task and name == 'SLURM_ARRAY_JOB_ID' else \
          os.environ[name]
  return str(os.getpid())


def _machine():
  devices = jax.devices()
  return (f'{os.cpu_count()}-core {platform.machine()} CPU, {len(devices)} '
          f'{devices[0].platform} device(s) ({devices[0].device_kind})')


def _commit():
  try:
    return subprocess.run(['git', '-C', ROOT, 'rev-parse', '--short', 'HEAD'],
                          capture_output=True, text=True, timeout=30).stdout.strip() or 'unknown'
  except OSError:
    return 'unknown'


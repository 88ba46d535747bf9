"""A preset's method sweeps as cluster jobs through submitit (`presets.py --executor=slurm`).

Each (preset, scenario, method) sweep is one job with its own run directory, submitted as one
SLURM job array (`--slurm_array`: how many run at once). A job resumes its run directory
(jobs.run_or_resume), so a job killed, pre-empted or timed out continues from its checkpoint
when resubmitted; a rerun of the same command submits only the sweeps not finished, and the
tables are built from the run directories as with --jobs. Each job writes OUT/jobs/<sweep>.json
(host, machine, start, wall time, commit, job id): provenance.json lists them.

The command records each job it submits in OUT/submitted/<sweep>.json (submitit's job id and
folder, the sweep's settings). A rerun asks each recorded job's state (sacct through submitit;
for the local executor, its controller process) and waits on one still queued or running
instead of submitting it again, so two jobs never write one run directory; one that ended
(failed, cancelled, timed out, unknown) is submitted again. One log line says which.

`--executor=submitit_local` runs the same path through submitit's local executor (every job a
process of this machine at once): the tests use it; it needs no cluster.
"""
import dataclasses
import datetime
import hashlib
import json
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
SUBMITTED_DIR = 'submitted'  # OUT/submitted/<sweep>.json: the submitit job sent for the sweep
# sacct's states of a job not ended yet: a rerun waits on these rather than submit a second job
ACTIVE = frozenset({'PENDING', 'RUNNING', 'REQUEUED', 'REQUEUE_HOLD', 'REQUEUE_FED', 'RESIZING',
                    'COMPLETING', 'CONFIGURING', 'SUSPENDED', 'STAGE_OUT', 'SIGNALING'})
POLL_S = 1  # how often a rerun looks whether a local job it waits on has ended


def executor(kind, folder, partition='', minutes=60, gpus=0, array=0):
  """A submitit executor for `kind` ('slurm' or 'submitit_local') writing its scripts and logs
  to `folder`; partition, minutes (time limit), gpus per job, array (jobs of an array running
  at once, 0 = no limit). UserError in one line when submitit or SLURM is missing."""
  submitit = _submitit(kind)
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


def _submitit(kind):
  """The submitit module; UserError naming --executor=kind when it is not installed."""
  try:
    import submitit  # pylint: disable=g-import-not-at-top  (optional: pip install ".[slurm]")
  except ImportError:
    raise fedjax_drift.UserError(f'--executor={kind} needs submitit: pip install ".[slurm]" '
                                 'in the clone') from None
  return submitit


class ClusterRunner:
  """Runner's interface (submit, close, abort) over a submitit executor: submit() holds the
  jobs back and the first result() sends every sweep not finished as one job array, after
  waiting instead on the recorded jobs of an earlier command still queued or running
  (reconnect_action). A sweep whose run directories finished with the same settings is read
  here, not submitted."""

  def __init__(self, ex, log=print):
    self.executor, self.log = ex, log
    self._held, self._jobs = [], {}  # [(index, config, sweep)], index -> submitit job
    self._adopted_local = set()  # indices of local jobs an earlier command started
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
    send = self._reconnect(held)
    if not send:
      return
    # the jobs import presetlib (this directory) by name, in a fresh interpreter
    path = os.path.join(ROOT, 'experiments')
    os.environ['PYTHONPATH'] = os.pathsep.join(
        [path] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p])
    jobs = self.executor.map_array(run_job, [c for _, c, _ in send], [s for *_, s in send])
    for (index, config, sweep), job in zip(send, jobs):
      self._jobs[index] = job
      write_submitted(config, sweep, job, self.executor.cluster)
    self.log(f'submitted {len(send)} job(s) ({self.executor.cluster}: '
             f'{", ".join(str(j.job_id) for j in jobs[:3])}{", ..." if len(jobs) > 3 else ""})')

  def _reconnect(self, held):
    """The held sweeps to submit: those with a recorded job still queued or running are
    waited on instead (one log line for each recorded job saying which)."""
    records = [read_submitted(config) for _, config, _ in held]
    # every job built (registered with submitit's watcher) first: one sacct call asks them all
    jobs = [recorded_job(r) if r else None for r in records]
    send = []
    for (index, config, sweep), record, job in zip(held, records, jobs):
      state = job_state(record, job) if record else None
      action, line = reconnect_action(record, state, settings_key(config, sweep), config.out)
      if line:
        self.log(f'{os.path.basename(config.out)}: {line}')
      if action == 'wait':
        self._jobs[index] = job
        if record['cluster'] == 'local':
          self._adopted_local.add(index)
      else:
        send.append((index, config, sweep))
    return send

  def wait(self, index, config):
    """The outcome of job `index`: ('error', message) if the job failed or was killed."""
    self._flush()
    job = self._jobs[index]
    while index in self._adopted_local and _controller_alive(job.job_id):
      time.sleep(POLL_S)  # not this process's child: submitit cannot poll it
    try:
      return job.result()
    except Exception as e:  # pylint: disable=broad-except  (submitit's job failures)
      first = (str(e).strip().splitlines() or [type(e).__name__])[0]
      return 'error', (f'{config.out}: job {job.job_id} did not finish ({first[:200]}); '
                       'rerun the same command to resubmit it (it resumes from its checkpoint)')

  def close(self):
    """Nothing to end: jobs run on the cluster."""

  def abort(self):
    """Cancels the jobs of submitit's local executor that this command started (a cluster's
    jobs go on: a rerun waits on them, or resubmits the ones not finished)."""
    if self.executor.cluster == 'local':
      for index, job in self._jobs.items():
        if index in self._adopted_local:
          continue
        try:
          job.cancel(check=False)
        except Exception:  # pylint: disable=broad-except
          pass


def reconnect_action(record, state, settings, out):
  """What a command does with a sweep not finished, from its recorded job (`record`, its
  OUT/submitted file, None if none), that job's `state` now (sacct's word) and the sweep's
  `settings` now (settings_key): ('wait', line) on a job still queued or running,
  ('submit', line) otherwise ('' when nothing was recorded). UserError when a job still
  running has other settings: a second job would write its run directory `out` too."""
  if record is None:
    return 'submit', ''
  job = f'job {record["job_id"]}'
  if state not in ACTIVE:
    return 'submit', (f'{job} ended ({state}): submitting it again (it resumes from its '
                      'checkpoint)')
  if record.get('settings') != settings:
    raise fedjax_drift.UserError(
        f'{out}: {job} is still {state} with other settings; wait for it to end or cancel it '
        '(scancel on SLURM), then rerun')
  return 'wait', f'{job} is still {state}: waiting for it, not submitting it again'


def settings_key(config, sweep):
  """A digest of what a sweep's job runs: its Config (but overwrite, which only says how it
  began) and whether it is one sweep."""
  values = {k: v for k, v in dataclasses.asdict(config).items() if k != 'overwrite'}
  text = json.dumps({'config': values, 'sweep': sweep}, sort_keys=True, default=str)
  return hashlib.sha256(text.encode()).hexdigest()[:16]


def write_submitted(config, sweep, job, cluster):
  """OUT/submitted/<sweep>.json: the submitit job (id, folder, cluster) sent for the sweep."""
  path = _out_file(config, SUBMITTED_DIR)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  report.write_json(path, {'job_id': str(job.job_id), 'folder': str(job.paths.folder),
                           'cluster': cluster, 'settings': settings_key(config, sweep),
                           'submitted_utc': _utc(time.time())})


def read_submitted(config):
  """The sweep's OUT/submitted record (write_submitted's), or None (none, or unreadable)."""
  try:
    record = fedjax_drift.rundir.read_json(_out_file(config, SUBMITTED_DIR))
  except (OSError, ValueError):
    return None
  keys = ('job_id', 'folder', 'cluster')
  return record if isinstance(record, dict) and all(k in record for k in keys) else None


def recorded_job(record):
  """The submitit Job of a record (read_submitted's), to ask its state and wait on it."""
  submitit = _submitit('slurm' if record['cluster'] == 'slurm' else 'submitit_local')
  kind = submitit.LocalJob if record['cluster'] == 'local' else submitit.SlurmJob
  return kind(folder=record['folder'], job_id=str(record['job_id']))


def job_state(record, job):
  """The recorded job's state now, in sacct's words: SLURM's through submitit, or for the
  local executor RUNNING while its controller process lives, else COMPLETED (a result file)
  or FAILED (none: killed, or it crashed)."""
  if record['cluster'] != 'local':
    return (str(job.state).split() or ['UNKNOWN'])[0].upper()  # 'CANCELLED by 1234'
  if _controller_alive(job.job_id):
    return 'RUNNING'
  return 'COMPLETED' if job.paths.result_pickle.exists() else 'FAILED'


def _controller_alive(job_id):
  """Whether the local job `job_id` (its controller's pid) still runs: a live process of
  submitit's local controller, not a zombie nor a pid reused since."""
  try:
    pid = int(job_id)
    os.kill(pid, 0)
  except (ValueError, ProcessLookupError, PermissionError):
    return False
  if not os.path.isdir('/proc/self'):
    return True  # no /proc to read the command line from: the pid alone says
  try:
    with open(f'/proc/{pid}/cmdline', 'rb') as f:
      return b'submitit.local._local' in f.read()  # a zombie's is empty
  except OSError:
    return False


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
  return _out_file(config, JOBS_DIR)


def _out_file(config, folder):
  """OUT/<folder>/<sweep>.json of the sweep whose run directory is config.out."""
  out = os.path.dirname(os.path.dirname(config.out))
  return os.path.join(out, folder, os.path.basename(config.out) + '.json')


def run_job(config, sweep):
  """One cluster job: the sweep resumed or run (jobs.run_method_job), with OUT/jobs/<sweep>.json
  written at its start (pid, host) and end (wall time, outcome)."""
  start = time.time()
  info = {'run_dir': os.path.relpath(config.out, os.path.dirname(os.path.dirname(config.out))),
          'job_id': _job_id(), 'host': socket.gethostname(), 'pid': os.getpid(),
          'machine': _machine(), 'commit': _commit(),
          'started_utc': _utc(start), 'state': 'running'}
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


def _utc(seconds):
  return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime(
      '%Y-%m-%d %H:%M:%S')


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


"""One method's runs (its grid x seeds) as a job, and the Runner that runs jobs in this process
or in `--jobs` worker processes.

A job's run directory is resumed, not restarted, when a rerun finds it: a finished run with
the same settings is read as it is, an interrupted one continues from its latest checkpoint
(fedjax_drift.run --resume: bit-identical to an uninterrupted run), so rerunning an
interrupted preset into the same --out gives the tables an uninterrupted run gives.

Workers are started with spawn and import this module to run _worker: it needs the
fedjax_drift package only, and what crosses processes is a Config and plain values. A worker
dies with its parent (PR_SET_PDEATHSIG on Linux, and a thread watching the parent's pid
everywhere), so a killed preset leaves no worker behind.
"""
import collections
import ctypes
import dataclasses
import json
import multiprocessing
from multiprocessing import connection
import os
import signal
import sys
import threading
import time
import traceback

import fedjax_drift
from fedjax_drift import interrupts, rundir, study, tables
from fedjax_drift.config import grid_points, parse_grid
from fedjax_drift.data import sources

# Metrics as the papers report them, per run, then statistics over seeds: fedjax_drift/tables.py.
run_metrics = tables.run_metrics
summarise = tables.summarise
PARENT_GRACE_S = 10  # an orphaned worker's run gets this long to stop at its checkpoint
STOP_GRACE_S = 5  # Runner.abort: workers get this long after SIGTERM before SIGKILL


def check_data(dataset, data_dir):
  """Loads the dataset once, so a missing one fails in one line before any work."""
  sources.load(dataset, data_dir or None)


def run_method(config, sweep=True, log=lambda *_: None):
  """Runs config's seeds x grid; returns [tables.Run] (seed, grid point, test and validation
  curves). A run directory already there is resumed (run_or_resume)."""
  if sweep:
    try:
      run_or_resume(config, log)
      return read_runs(config.out, config)
    except fedjax_drift.errors.MemoryBudgetError:
      if len(grid_points(parse_grid(config.grid))) * config.seeds == 1:
        raise
    return _run_in_parts(config, log)
  runs = []  # an algorithm sweeps refuse: one run per grid point and seed
  for single, point in _singles(config):
    run_or_resume(single, log)
    runs += [r._replace(seed=single.seed, point=point) for r in read_runs(single.out, single)]
  return runs


def _run_in_parts(config, log):
  """run_method's sweep when its runs do not fit the memory budget at once (FedDyn's and
  SCAFFOLD's per-client tables at paper scale): one part per grid point with all seeds, or
  with half, a quarter, ... of them, down to single runs, each part its own run directory
  (OUT-part-<point>-s<first seed>x<seeds>) resumed like any other. The part size is found
  the same way on every launch (a refused size writes nothing), so a rerun finds its parts."""
  points = grid_points(parse_grid(config.grid))
  per = config.seeds if len(points) > 1 else max(1, config.seeds // 2)
  while True:
    try:
      runs = []
      for point in points:
        tag = '-'.join(f'{k}{val:g}' for k, val in point.items()) or 'all'
        for first in range(0, config.seeds, per):
          part = dataclasses.replace(
              config, **point, grid='', seed=config.seed + first,
              seeds=min(per, config.seeds - first), out=f'{config.out}-part-{tag}-s{first}x{per}')
          run_or_resume(part, log)
          runs += [r._replace(point=point) for r in read_runs(part.out, part)]
      return runs
    except fedjax_drift.errors.MemoryBudgetError:
      if per == 1:
        raise
      per = max(1, per // 2)


def run_or_resume(config, log=lambda *_: None):
  """fedjax_drift.run(config) into config.out, keeping what an earlier launch of the same
  runs left there: a finished run is read as it is, an interrupted one resumed from its
  checkpoint. config.overwrite set ('yes': the preset's --overwrite) starts afresh. A run
  directory written with other settings is refused in one line."""
  if config.overwrite or not os.path.isfile(os.path.join(config.out, 'config.json')):
    # a launch killed before config.json left only recorded entries: --overwrite removes them
    fedjax_drift.run(dataclasses.replace(config, overwrite=rundir.OVERWRITE_MODES[1]), log)
    return
  _check_same_runs(config)
  if _finished(config):
    return
  fedjax_drift.run(dataclasses.replace(config, resume=True, overwrite=''), log)


def method_finished(config, sweep=True):
  """Whether every run directory of the sweep (run_method's) finished with these settings."""
  if config.overwrite:
    return False
  for single in [(config, None)] if sweep else _singles(config):
    try:
      _check_same_runs(single[0])
    except fedjax_drift.UserError:  # no config.json, or other settings
      return False
    if not _finished(single[0]):
      return False
  return True


def _singles(config):
  """[(Config, grid point)]: one run per grid point and seed, each in its own directory (for
  algorithms that refuse sweeps)."""
  out = []
  for point in grid_points(parse_grid(config.grid)):
    for s in range(config.seeds):
      tag = '-'.join(f'{k}{val:g}' for k, val in point.items())
      out.append((dataclasses.replace(config, **point, seed=config.seed + s, seeds=1, grid='',
                                      out=f'{config.out}-{tag}-s{s}'), point))
  return out


def _check_same_runs(config):
  """UserError unless config.out holds the runs of `config` (the settings fedjax_drift.run
  would resume with; --rounds too, which a plain --resume may change)."""
  saved = rundir.read_run_config(config.out)
  now = dataclasses.asdict(study.absolutize(config))  # config.json holds absolute paths
  differ = sorted(k for k in now if k not in ('out', 'overwrite', 'resume', 'progress',
                                              'compile_cache')
                  and k in saved and not _same(saved[k], now[k]))
  if differ:
    k = differ[0]
    raise fedjax_drift.UserError(
        f'{config.out} holds runs with --{k}={saved[k]!r}, this launch sets {now[k]!r}; pass '
        '--overwrite to start them again, or choose another --out')


def _same(a, b):
  """Whether two config.json values are equal as JSON (tuples are lists there)."""
  return json.loads(json.dumps(a)) == json.loads(json.dumps(b))


def _finished(config):
  """Whether config.out's runs finished (their record says so, summary.json is there)."""
  try:
    record = rundir.Record.load(config.out)
  except fedjax_drift.UserError:
    return False
  return bool(record is not None and record.data.get('finished') and
              os.path.isfile(os.path.join(config.out, 'summary.json')))


def run_method_job(config, sweep):
  """run_method in a worker process: ('ok', runs) or ('diverged', message); a UserError
  comes back as ('error', message), so nothing but plain values crosses processes."""
  try:
    return 'ok', run_method(config, sweep)
  except fedjax_drift.errors.DivergenceError as e:
    return 'diverged', str(e)
  except fedjax_drift.UserError as e:
    return 'error', str(e)


class _Later:
  """A job run in this process when its result is first asked for."""

  def __init__(self, config, sweep):
    self.args, self.value = (config, sweep), None

  def result(self):
    """The job's outcome, run now if not yet."""
    if self.value is None:
      self.value = run_method_job(*self.args)
    return self.value


class _Remote:
  """A job sent to the Runner's workers; result() waits for it."""

  def __init__(self, runner, index):
    self.runner, self.index = runner, index

  def result(self):
    """The job's outcome (Runner.wait)."""
    return self.runner.wait(self.index)


class Runner:
  """Runs a preset's methods one after another (jobs=1), or `jobs` at a time in worker
  processes: small models on a few cores spend most of a run in single-threaded work
  (tracing, XLA compilation, plotting), which two processes overlap. Each method's runs
  are the same programs on the same seeds either way, so the results are identical.

  Workers ignore the terminal's Ctrl-C (the parent decides: abort() stops them with SIGTERM,
  which ends a run at its last checkpoint, and SIGKILL after STOP_GRACE_S) and end with
  their parent however it ends."""

  def __init__(self, jobs=1):
    if jobs < 1:
      raise fedjax_drift.UserError(f'--jobs={jobs} must be at least 1')
    self.jobs = jobs
    self._reset()

  def submit(self, config, sweep):
    """A future of run_method_job(config, sweep): with jobs=1 it runs when its result is
    asked for, else in the next free worker (jobs are taken in the order submitted)."""
    if self.jobs == 1:
      return _Later(config, sweep)
    if not self._workers:
      self._start()
    self._queue.append((self._sent, config, sweep))
    self._sent += 1
    self._dispatch()
    return _Remote(self, self._sent - 1)

  def _start(self):
    ctx = multiprocessing.get_context('spawn')  # a forked JAX process is not safe to use
    # SIG_IGN is inherited through exec: a Ctrl-C while a worker imports JAX is no traceback.
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
      for _ in range(self.jobs):  # a pipe each (no semaphores for a kill to leak)
        here, there = ctx.Pipe()
        process = ctx.Process(target=_worker, args=(there, os.getpid()), daemon=True)
        process.start()
        there.close()
        self._workers.append((process, here))
    finally:
      if main:
        signal.signal(signal.SIGINT, previous)
    self._busy = [None] * self.jobs

  def _dispatch(self):
    """Sends queued jobs to idle workers."""
    for i, job in enumerate(self._busy):
      if job is None and self._queue:
        task = self._queue.popleft()
        self._workers[i][1].send(task)
        self._busy[i] = task[0]

  def wait(self, index):
    """The outcome of job `index`; UserError if a worker died (killed, out of memory)."""
    while index not in self._done:
      conns = [conn for _, conn in self._workers]
      for conn in connection.wait(conns, timeout=0.5):
        i = conns.index(conn)
        try:
          job, outcome = conn.recv()
        except (EOFError, OSError):
          self._died(self._workers[i][0])
        self._done[job], self._busy[i] = outcome, None
        self._dispatch()
      interrupts.check()  # a signal whose raise a library swallowed
    return self._done.pop(index)

  def _died(self, process):
    """A worker's pipe closed: its exit as Interrupted (a signal) or a UserError."""
    process.join(5)
    code = process.exitcode
    if code is not None and code > 128 and code - 128 in interrupts.SIGNALS:
      raise interrupts.Interrupted(interrupts.what(code - 128), code - 128)
    raise fedjax_drift.UserError(
        f'a --jobs worker ended with exit code {code} (killed, or out of memory?); rerun the '
        'same command to continue from the runs\' checkpoints')

  def close(self):
    """Ends the workers once the jobs sent are done; the Runner can start new ones."""
    for process, conn in self._workers:
      conn.send(None)
    for process, conn in self._workers:
      process.join()
      conn.close()
    self._reset()

  def abort(self):
    """Stops the workers now: SIGTERM (a run stops at its last checkpoint), then SIGKILL
    after STOP_GRACE_S. Jobs not finished are lost; a rerun resumes them."""
    for process, _ in self._workers:
      if process.is_alive():
        process.terminate()
    end = time.monotonic() + STOP_GRACE_S
    for process, conn in self._workers:
      process.join(max(0.0, end - time.monotonic()))
      if process.is_alive():
        process.kill()
        process.join(1)
      conn.close()
    self._reset()

  def _reset(self):
    self._workers, self._busy, self._queue = [], [], collections.deque()
    self._sent, self._done = 0, {}


def _worker(conn, parent):
  """A --jobs worker: runs (index, config, sweep) tasks received on `conn` until None,
  sending back (index, outcome). Ends with its parent; a signal ends it silently."""
  _die_with_parent(parent)
  while True:
    task = conn.recv()
    if task is None:
      return
    index, config, sweep = task
    try:
      outcome = run_method_job(config, sweep)
    except KeyboardInterrupt as e:  # SIGTERM from the parent: the run kept its checkpoint
      sys.stderr.flush()
      os._exit(interrupts.exit_code(e))  # pylint: disable=protected-access
    except Exception as e:  # pylint: disable=broad-except  (a bug: its traceback, one error)
      traceback.print_exc()
      first = (str(e).strip().splitlines() or [''])[0]
      outcome = 'error', f'{config.out}: {type(e).__name__}: {first} (traceback above)'
    conn.send((index, outcome))


def _die_with_parent(parent):
  """Ends this process when `parent` does: the kernel sends SIGTERM at its death (Linux
  prctl PR_SET_PDEATHSIG), and a thread checks the parent's pid every second everywhere
  (then the run gets PARENT_GRACE_S to stop at its checkpoint)."""
  if sys.platform.startswith('linux'):
    try:
      ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
      pass
  if os.getppid() != parent:  # it died before the line above
    os._exit(1)  # pylint: disable=protected-access

  def watch():
    while os.getppid() == parent:
      time.sleep(1)
    try:
      os.kill(os.getpid(), signal.SIGTERM)
    finally:
      time.sleep(PARENT_GRACE_S)
      os._exit(1)  # pylint: disable=protected-access
  threading.Thread(target=watch, name='presets-parent-watch', daemon=True).start()


def accuracy_column(config):
  """The metrics.csv column a run is reported by: a run that calibrates its clients at every
  evaluation, by their personalised accuracy; any other, by the global model's."""
  return 'personalized_accuracy' if config.personalize_every_eval else 'test_accuracy'


def read_runs(run_dir, config):
  """[tables.Run] of a run directory written with `config` (tables.read_runs)."""
  return tables.read_runs(run_dir, list(parse_grid(config.grid)), config.seed,
                          accuracy_column(config))

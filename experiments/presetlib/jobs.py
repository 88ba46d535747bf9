"""One method's runs (its grid x seeds) as a job, and the Runner that runs jobs in this process
or in `--jobs` worker processes.

Workers are started with spawn and import this module to run _run_method_job: it needs the
fedjax_drift package only, and what crosses processes is a Config and plain values.
"""
import dataclasses

import fedjax_drift
from fedjax_drift import tables
from fedjax_drift.config import grid_points, parse_grid
from fedjax_drift.data import sources

# Metrics as the papers report them, per run, then statistics over seeds: fedjax_drift/tables.py.
run_metrics = tables.run_metrics
summarise = tables.summarise


def check_data(dataset, data_dir):
  """Loads the dataset once, so a missing one fails in one line before any work."""
  sources.load(dataset, data_dir or None)


def run_method(config, sweep=True, log=lambda *_: None):
  """Runs config's seeds x grid; returns [tables.Run] (seed, grid point, test and validation
  curves)."""
  if sweep:
    fedjax_drift.run(config, log=log)
    return read_runs(config.out, config)
  runs = []  # an algorithm sweeps refuse: one run per grid point and seed
  for point in grid_points(parse_grid(config.grid)):
    for s in range(config.seeds):
      tag = '-'.join(f'{k}{val:g}' for k, val in point.items())
      single = dataclasses.replace(config, **point, seed=config.seed + s, seeds=1, grid='',
                                   out=f'{config.out}-{tag}-s{s}')
      fedjax_drift.run(single, log=log)
      runs += [r._replace(seed=config.seed + s, point=point)
               for r in read_runs(single.out, single)]
  return runs


def _run_method_job(config, sweep):
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
      self.value = _run_method_job(*self.args)
    return self.value


class Runner:
  """Runs a preset's methods one after another (jobs=1), or `jobs` at a time in worker
  processes: small models on a few cores spend most of a run in single-threaded work
  (tracing, XLA compilation, plotting), which two processes overlap. Each method's runs
  are the same programs on the same seeds either way, so the results are identical."""

  def __init__(self, jobs=1):
    if jobs < 1:
      raise fedjax_drift.UserError(f'--jobs={jobs} must be at least 1')
    self.jobs, self._pool = jobs, None

  def submit(self, config, sweep):
    """A future of _run_method_job(config, sweep): with jobs=1 it runs when its result is
    asked for, else in the next free worker (jobs are taken in the order submitted)."""
    if self.jobs == 1:
      return _Later(config, sweep)
    if self._pool is None:
      import concurrent.futures  # pylint: disable=g-import-not-at-top
      import multiprocessing  # pylint: disable=g-import-not-at-top
      # spawn: a forked JAX process is not safe to use.
      self._pool = concurrent.futures.ProcessPoolExecutor(
          self.jobs, mp_context=multiprocessing.get_context('spawn'))
    return self._pool.submit(_run_method_job, config, sweep)

  def close(self):
    """Stops the workers (cancelling jobs not started); the Runner can start new ones."""
    if self._pool is not None:
      self._pool.shutdown(cancel_futures=True)
      self._pool = None


def accuracy_column(config):
  """The metrics.csv column a run is reported by: a run that calibrates its clients at every
  evaluation, by their personalised accuracy; any other, by the global model's."""
  return 'personalized_accuracy' if config.personalize_every_eval else 'test_accuracy'


def read_runs(run_dir, config):
  """[tables.Run] of a run directory written with `config` (tables.read_runs)."""
  return tables.read_runs(run_dir, list(parse_grid(config.grid)), config.seed,
                          accuracy_column(config))

"""Runs shared among a command's tables: each distinct method sweep runs once.

The cpu tier maps several papers' datasets to the same embedded data and model, so presets
(and scenarios) that differ only in the paper's dataset resolve to the same runs. A sweep is
known by its key (sweep_key): the resolved Config without its output-only fields, the data
inputs' fingerprint (file hashes, TFDS version) and whether it sweeps. The first sweep of a
key in a command runs (or is resumed) in its own run directory; every later one with the
same key reads those runs, and its own run directory OUT/runs/<sweep> becomes a relative
symbolic link to the first's (its table's row records the directory it read, `shared_runs`).
A run's results depend on nothing but its key, so the tables are the same cell for cell as
with every sweep run on its own (`presets.py --no_share`; a test holds the two equal).

Nothing a user ran is lost: a real run directory where a link would go is kept and run (or
read) on its own, unless --overwrite asked to replace the runs in --out, and then only the
entries its record names are removed, as a run's own --overwrite removes them.
"""
import dataclasses
import os

import fedjax_drift
from fedjax_drift import inputs, rundir, study

# Config fields that say where and how a run writes, never what it computes (the fields
# jobs._check_same_runs ignores when it resumes a run directory).
OUTPUT_ONLY = ('out', 'overwrite', 'resume', 'progress', 'compile_cache')


def _inputs_fingerprint(config):
  """inputs.fingerprint of the files config's runs read."""
  return inputs.fingerprint(study.input_flags(config))


def sweep_key(config, sweep=True, fingerprint=_inputs_fingerprint):
  """The sha256 that names a sweep's runs: Config (absolute paths) less OUTPUT_ONLY, the data
  inputs' fingerprint (fingerprint(config)) and `sweep` (a sweep or one run per point)."""
  values = dataclasses.asdict(study.absolutize(config))
  for name in OUTPUT_ONLY:
    values.pop(name, None)
  return rundir.digest({'config': values, 'inputs': fingerprint(config),
                        'sweep': bool(sweep)})


class _Once:
  """A future whose result is asked for once of the one below it and kept (a Runner's
  _Remote gives its outcome once), so several tables can read it."""

  def __init__(self, future):
    self.future, self.value = future, None

  def result(self):
    """The sweep's outcome (jobs.run_method_job's)."""
    if self.value is None:
      self.value = self.future.result()
    return self.value


def _link(target, path):
  """Makes `path` a relative symbolic link to the directory `target` (replacing a link)."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  relative = os.path.relpath(target, os.path.dirname(path))
  if os.path.islink(path) and os.readlink(path) == relative:
    return
  temp = f'{path}.link-{os.getpid()}'
  os.symlink(relative, temp)
  os.replace(temp, path)


def _room(path, overwrite):
  """Whether `path` may become a link: nothing is there, or a link (this module's), or
  --overwrite (`overwrite` set) emptied the run directory there of its recorded entries
  alone (rundir.clear 'yes'). A directory with anything else in it stays as it is."""
  if os.path.islink(path) or not os.path.lexists(path):
    return True
  if not overwrite or not os.path.isdir(path):
    return False
  try:
    rundir.clear(path, rundir.OVERWRITE_MODES[1])
  except fedjax_drift.UserError:
    return False
  if os.listdir(path) == [rundir.MARKER]:
    os.remove(os.path.join(path, rundir.MARKER))
  if os.listdir(path):
    return False
  os.rmdir(path)
  return True


class Sharing:
  """Submits a command's sweeps to `runner` (jobs.Runner or cluster.ClusterRunner), each
  distinct sweep_key once; `enabled` False submits every sweep (the runs of --no_share).
  ran/shared count the sweeps submitted and those read from another's runs."""

  def __init__(self, runner, enabled=True):
    self.runner, self.enabled = runner, enabled
    self.ran, self.shared = 0, 0
    self._first = {}  # sweep_key -> (run directory, _Once)
    self._fingerprints = {}

  def _fingerprint(self, config):
    """inputs.fingerprint, hashed once per input file state (every sweep reads the same)."""
    files = inputs.input_files(study.input_flags(study.absolutize(config)))
    state = (config.dataset, config.data_dir, tuple(
        (flag, path, *((os.stat(path).st_mtime_ns, os.stat(path).st_size)
                       if os.path.isfile(path) else ())) for flag, path in files))
    if state not in self._fingerprints:
      self._fingerprints[state] = _inputs_fingerprint(config)
    return self._fingerprints[state]

  def submit(self, config, sweep=True):
    """(future of the sweep's outcome, the run directory it reads when that is another
    sweep's, else None). A sweep run one point per directory (`sweep` False) is not shared:
    its runs are not in one directory a link could name."""
    if not (self.enabled and sweep):
      return self._run(config, sweep), None
    key = sweep_key(config, sweep, self._fingerprint)
    if key in self._first and _room(config.out, config.overwrite):
      first, future = self._first[key]
      _link(first, config.out)
      self.shared += 1
      return future, first
    future = self._run(config, sweep)
    self._first.setdefault(key, (config.out, future))
    return future, None

  def _run(self, config, sweep):
    if config.overwrite and os.path.islink(config.out):
      os.remove(config.out)  # a link of an earlier command: --overwrite runs it here afresh
    self.ran += 1
    return _Once(self.runner.submit(config, sweep))

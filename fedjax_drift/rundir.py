"""The run directory: what this tool writes there, who may write, and what --overwrite removes.

The tool knows its own layout (OWN_FILES, OWN_DIRS, *.png, its temporary files), so
`--overwrite` removes only those and refuses when anything else is present, unless the user
confirms with `--overwrite=force`. It never removes the directory itself, the working
directory or one of its ancestors, or an input file. An exclusive `flock` on the directory
(no lock file: the kernel drops it when the holder dies, so a killed run never blocks
`--resume`) keeps a second process out for the whole run.

Every check that can fail runs before compilation (`check_out`, `check_save_params`).
"""
import contextlib
import errno
import fcntl
import fnmatch
import json
import os
import shutil

from fedjax_drift import report
from fedjax_drift.errors import UserError

OWN_FILES = ('config.json', 'summary.json', 'metrics.csv', 'rounds.csv', 'runs.csv',
             'personalization.csv')
OWN_DIRS = ('checkpoints', 'tensorboard')
OWN_PATTERNS = ('*.png', f'{report.TEMP_PREFIX}*{report.TEMP_SUFFIX}',
                '*.tmp[0-9]*')  # the last: temporaries of versions before fixed-length names
# Keys every config.json this tool writes has; a directory without them is not our run.
RUN_KEYS = ('algo', 'model', 'dataset', 'partition', 'rounds', 'seed', '_resolved')
# Longest path the tool (orbax included) creates below the run directory, with margin:
# 'checkpoints/<round>.orbax-checkpoint-tmp-<ns>/state/ocdbt.process_0/d/<32 hex>' is ~110.
RESERVED_PATH_CHARS = 200

OVERWRITE_MODES = ('', 'yes', 'force')


def overwrite_mode(value) -> str:
  """--overwrite's value as '', 'yes' or 'force' (booleans and true/false spellings too)."""
  text = str(value).strip().lower()
  if text in ('', 'false', '0', 'no', 'off', 'none'):
    return ''
  if text in ('yes', 'true', '1', 'on'):
    return 'yes'
  if text == 'force':
    return 'force'
  raise UserError(f'--overwrite={value} is not one of: (bare) --overwrite, --overwrite=force')


def is_own(name, extra=()) -> bool:
  """Whether an entry of a run directory (a base name) is something this tool writes.

  extra: further base names that are ours this time (the --save_params file when inside).
  """
  if name in OWN_FILES or name in OWN_DIRS or name in extra:
    return True
  return any(fnmatch.fnmatchcase(name, p) for p in OWN_PATTERNS)


def foreign_entries(run_dir, extra=()) -> list:
  """Sorted base names in run_dir that this tool did not write."""
  if not os.path.isdir(run_dir):
    return []
  return sorted(n for n in os.listdir(run_dir) if not is_own(n, extra))


def _inside(path, parent) -> bool:
  """Whether `path` is `parent` or lies below it (both made absolute and resolved)."""
  path, parent = os.path.realpath(path), os.path.realpath(parent)
  return path == parent or path.startswith(parent.rstrip(os.sep) + os.sep)


def _protected(entry, inputs):
  """The reason `entry` must never be removed, or None."""
  if _inside(os.getcwd(), entry):
    return 'the working directory is inside it'
  for path in inputs:
    if _inside(path, entry):
      return f'it holds the input {path}'
  return None


def plan_clear(run_dir, mode, inputs=(), extra=()) -> list:
  """The base names --overwrite=`mode` would remove from run_dir; removes nothing.

  'yes' takes only our entries and refuses (UserError naming one) if any other is present;
  'force' takes every entry. An input, the working directory or one of its ancestors make
  it refuse too. The directory itself always stays (it may be locked).
  """
  if _inside(os.getcwd(), run_dir) and mode == 'force':
    raise UserError(f'--overwrite=force would empty {run_dir}, which holds the working '
                    'directory; pick another --out')
  foreign = foreign_entries(run_dir, extra)
  if foreign and mode != 'force':
    raise UserError(f'--overwrite: {os.path.join(run_dir, foreign[0])} was not written by '
                    'fedjax-drift; remove it, pick another --out, or pass --overwrite=force')
  entries = sorted(os.listdir(run_dir)) if mode == 'force' else \
      sorted(n for n in os.listdir(run_dir) if is_own(n, extra))
  for name in entries:
    why = _protected(os.path.join(run_dir, name), inputs)
    if why:
      raise UserError(f'--overwrite would remove {os.path.join(run_dir, name)}, but {why}; '
                      'pick another --out')
  return entries


def clear(run_dir, mode, inputs=(), extra=()) -> list:
  """Removes what plan_clear allows (refusing as it does); returns the removed base names."""
  entries = plan_clear(run_dir, mode, inputs, extra)
  for name in entries:
    path = os.path.join(run_dir, name)
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path)
    else:
      os.remove(path)
  return entries


def remove_temporaries(run_dir) -> list:
  """Removes temporary files a killed run of this tool left in run_dir; returns their names."""
  if not os.path.isdir(run_dir):
    return []
  names = [n for n in os.listdir(run_dir)
           if any(fnmatch.fnmatchcase(n, p) for p in OWN_PATTERNS[1:])]
  for name in names:
    os.remove(os.path.join(run_dir, name))
  return names


def read_run_config(run_dir) -> dict:
  """config.json of an existing run of this tool; UserError if run_dir holds none."""
  path = os.path.join(run_dir, 'config.json')
  if not os.path.isfile(path):
    raise UserError(f'--resume: {run_dir} holds no run (no config.json)')
  try:
    with open(path) as f:
      saved = json.load(f)
  except (OSError, ValueError) as e:
    raise UserError(f'--resume: cannot read {path} ({e})') from None
  missing = [k for k in RUN_KEYS if k not in saved] if isinstance(saved, dict) else RUN_KEYS
  if missing:
    raise UserError(f'--resume: {path} is not a fedjax-drift run configuration (lacks '
                    f'{missing[0]!r})')
  return saved


def read_json(path):
  """The JSON object in `path` (a file this tool wrote)."""
  with open(path) as f:
    return json.load(f)


def enclosing_run(path):
  """The nearest proper ancestor of `path` that is a run directory of this tool, or None."""
  here = os.path.dirname(os.path.abspath(path))
  while True:
    config = os.path.join(here, 'config.json')
    if os.path.isfile(config):
      try:
        with open(config) as f:
          saved = json.load(f)
        if isinstance(saved, dict) and all(k in saved for k in RUN_KEYS):
          return here
      except (OSError, ValueError):
        pass
    parent = os.path.dirname(here)
    if parent == here:
      return None
    here = parent


def check_length(path, flag, reserve=0):
  """UserError unless `path` (absolute) plus `reserve` more characters, and each of its
  components, fit the file system's limits."""
  path = os.path.abspath(path)
  existing = _nearest_existing(path)
  try:
    name_max = os.pathconf(existing, 'PC_NAME_MAX')
    path_max = os.pathconf(existing, 'PC_PATH_MAX')
  except (OSError, ValueError):
    name_max, path_max = 255, 4096
  long_part = max(path.split(os.sep), key=len)
  if len(long_part.encode()) > name_max:
    raise UserError(f'{flag}: the name {long_part[:40]}... has {len(long_part.encode())} '
                    f'characters; the file system allows {name_max}')
  if len(path.encode()) + reserve >= path_max:
    raise UserError(f'{flag}: the path is {len(path.encode())} characters; the run needs '
                    f'{reserve} more below it and the file system allows {path_max - 1}')


def _nearest_existing(path):
  while not os.path.exists(path):
    path = os.path.dirname(path)
  return path


def check_writable(directory, flag):
  """UserError unless files can be created in `directory` (or, when it does not exist yet,
  in its nearest existing ancestor). Tries a real file: os.access says yes to root even on
  read-only mounts."""
  existing = _nearest_existing(os.path.abspath(directory))
  if not os.path.isdir(existing):
    raise UserError(f'{flag}: {existing} is a file, not a directory')
  probe = report.temp_name(existing)
  try:
    os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    os.remove(probe)
  except OSError as e:
    raise UserError(f'{flag}: cannot write in {existing} ({os.strerror(e.errno)})') from None


def check_out(run_dir, resume, overwrite, inputs=(), save_params=''):
  """Every check on --out that can fail, before any work. Writes nothing.

  inputs: the dataset and partition files the run reads (absolute paths).
  """
  flag, mode = f'--out={run_dir}', overwrite_mode(overwrite)
  if os.path.exists(run_dir) and not os.path.isdir(run_dir):
    raise UserError(f'{flag} is a file, not a directory')
  check_length(os.path.join(run_dir, 'x'), flag,
               max(RESERVED_PATH_CHARS, report.TEMP_NAME_LEN))
  outer = enclosing_run(run_dir)
  if outer:
    raise UserError(f'{flag} lies inside the run directory {outer}; pick a path outside it')
  for path in inputs:
    if os.path.dirname(os.path.realpath(path)) == os.path.realpath(run_dir) and \
        os.path.basename(path) in OWN_FILES:
      raise UserError(f'{flag}: the input {path} has the name of a file the run writes there')
  if resume:
    read_run_config(run_dir)
  elif os.path.isdir(run_dir) and os.listdir(run_dir):
    if not mode:
      raise UserError(f'{flag} already exists; pass --overwrite to replace it')
    plan_clear(run_dir, mode, inputs, own_extra(run_dir, save_params))
  check_writable(run_dir, flag)


def own_extra(run_dir, save_params):
  """(the --save_params base name,) when that file lies directly in run_dir, else ()."""
  if save_params and os.path.dirname(os.path.realpath(save_params)) == \
      os.path.realpath(run_dir):
    return (os.path.basename(save_params),)
  return ()


def check_save_params(path, run_dir, inputs=()):
  """Every check on --save_params that can fail, before any work. Writes nothing."""
  if not path:
    return
  flag = f'--save_params={path}'
  if os.path.isdir(path):
    raise UserError(f'{flag} is a directory')
  check_length(path, flag)
  check_length(os.path.join(os.path.dirname(os.path.abspath(path)), 'x' * report.TEMP_NAME_LEN),
               flag)
  for source in inputs:
    if os.path.realpath(source) == os.path.realpath(path):
      raise UserError(f'{flag} is an input of this run; it would be overwritten')
  inside_run = os.path.dirname(os.path.realpath(path)) == os.path.realpath(run_dir)
  if inside_run and os.path.basename(path) in OWN_FILES:
    raise UserError(f'{flag} would replace the run\'s own {os.path.basename(path)}')
  outer = enclosing_run(path)
  if outer and not _inside(outer, run_dir) and not inside_run:
    raise UserError(f'{flag} lies inside another run directory, {outer}')
  check_writable(os.path.dirname(os.path.abspath(path)), flag)


class Lock:
  """An exclusive flock on the run directory itself, held until release().

  A second process (or a second Lock in this one) gets a UserError at once. The kernel
  drops the lock when the holder exits, however it dies.
  """

  def __init__(self, run_dir):
    self.run_dir = run_dir
    self._fd = os.open(run_dir, os.O_RDONLY | getattr(os, 'O_DIRECTORY', 0))
    try:
      fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
      os.close(self._fd)
      self._fd = None
      if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
        raise UserError(f'--out={run_dir} is in use by another fedjax-drift process; wait '
                        'for it to finish or pick another --out') from None
      raise

  def release(self):
    if self._fd is not None:
      os.close(self._fd)  # closing the descriptor drops the flock
      self._fd = None

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.release()


@contextlib.contextmanager
def claimed(run_dir):
  """Creates run_dir if needed and holds its Lock. If the block fails and this call created
  the directory, the directory is removed again when still empty (a refused run leaves no
  trace)."""
  created = not os.path.exists(run_dir)
  try:
    os.makedirs(run_dir, exist_ok=True)
  except OSError as e:
    raise UserError(f'--out={run_dir}: cannot create it ({os.strerror(e.errno)})') from None
  try:
    with Lock(run_dir) as lock:
      yield lock
  except BaseException:
    if created and os.path.isdir(run_dir) and not os.listdir(run_dir):
      os.rmdir(run_dir)
    raise

"""The run directory: a record of what this tool wrote there, who may write, what goes.

Ownership is by record, not by name. Every run directory carries `.fedjax-drift.json` (the
MARKER): the run's identity (a random run id, when it was created, the tool's version, a hash
of the run-defining flags) and a manifest of every entry the tool created there, each name
recorded before the entry is created. `--overwrite`, `--resume` and the removal of a killed
run's temporary files touch only what that record names:
- bare `--overwrite` removes the recorded entries and refuses, naming one, when anything else
  is there; `--overwrite=force` removes everything, but only in a directory that is empty or
  carries the marker, and never in $HOME, / or an ancestor of either;
- a directory with files but no marker is never emptied (it is another tool's, or a
  fedjax-drift run from before the record: see `adopt`);
- temporary files are removed only when they match this run's recorded temporary names.
It never removes the working directory (or an ancestor), or an input file. An exclusive
`flock` on the directory (locks.py) keeps a second process out for the whole run.

Every check that can fail runs before compilation (`check_out`, `check_save_params`).
"""
import contextlib
import datetime
import fnmatch
import hashlib
import json
import os
import shutil

from fedjax_drift import report
from fedjax_drift.errors import UserError, read_json_input
from fedjax_drift.version import __version__

MARKER = '.fedjax-drift.json'
MARKER_FORMAT = 1
_BEFORE_RECORDS = ('config.json', 'summary.json', 'metrics.csv', 'rounds.csv', 'runs.csv',
                   'personalization.csv')
# The files a run writes at its top level (an input or --save_params may not take these names).
OWN_FILES = _BEFORE_RECORDS + ('shifts.csv', 'client_acc.csv', 'features.npz', 'attention.npz',
                               'attention.csv', 'best_val_params.npz', 'splits.csv')
OWN_DIRS = ('checkpoints', 'tensorboard')
# What a fedjax-drift from before the record wrote: adopted once, by `adopt`, when such a run
# (its config.json proves it) is resumed. Never used to decide what a marked run owns.
LEGACY_NAMES = _BEFORE_RECORDS + OWN_DIRS + ('accuracy.png', 'drift.png', 'partition.png')
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


def _now():
  return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')


def canonical(values: dict) -> dict:
  """values with every non-bool number as a float (1 and 1.0 are one value), for hashing."""
  def canon(v):
    if isinstance(v, dict):
      return {str(k): canon(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
      return [canon(x) for x in v]
    if isinstance(v, (int, float)) and not isinstance(v, bool):
      return float(v)
    return v
  return canon(values)


def digest(values: dict) -> str:
  """sha256 of the canonical JSON of `values` (see `canonical`)."""
  text = json.dumps(canonical(values), sort_keys=True, allow_nan=True)
  return hashlib.sha256(text.encode()).hexdigest()


def first_difference(recorded: dict, now: dict) -> str:
  """'--lr: 0.1 when recorded, 0.5 now' for the first (sorted) flag that differs, or ''."""
  a, b = canonical(recorded), canonical(now)
  for key in sorted(set(a) | set(b)):
    if a.get(key) != b.get(key):
      return (f'--{key}: {recorded.get(key, "(default)")!r} when recorded, '
              f'{now.get(key, "(default)")!r} now')
  return ''


class Record:
  """RUN_DIR/.fedjax-drift.json: whose run a directory holds and what this tool wrote there.

  Fields: tool, format, version, run_id (32 random hex digits), created (UTC), temporaries
  (the glob of this run's temporary file names), entries (base names the tool created in the
  directory, each recorded before it is created), outputs ([{path, sha256}] of --save_params
  files it wrote elsewhere), config / config_sha256 (the run-defining flags, see
  `outputs.run_flags`), finished (true once summary, plots and parameters are all
  written), adopted (the directory predates the record). Every change is written at once,
  atomically.
  """

  def __init__(self, run_dir, data):
    self.run_dir, self.data = run_dir, data
    self.path = os.path.join(run_dir, MARKER)

  @classmethod
  def new(cls, run_dir, **fields):
    """A fresh record (a new run id) for run_dir, written at once."""
    run_id = os.urandom(16).hex()
    record = cls(run_dir, {
        'tool': 'fedjax-drift', 'format': MARKER_FORMAT, 'version': __version__,
        'run_id': run_id, 'created': _now(), 'adopted': False, 'finished': False,
        'temporaries': f'{report.TEMP_PREFIX}{run_id[:4]}????{report.TEMP_SUFFIX}',
        'entries': [], 'outputs': [], 'config_sha256': None, 'config': None, **fields})
    record.save()
    return record

  @classmethod
  def load(cls, run_dir):
    """The record in run_dir, or None when it has none; UserError when it is unreadable."""
    path = os.path.join(run_dir, MARKER)
    if not os.path.lexists(path):
      return None
    try:
      with open(path) as f:
        data = json.load(f)
    except (OSError, ValueError) as e:
      raise UserError(f'--out: cannot read the run record {path} ({e})') from None
    if not isinstance(data, dict) or data.get('tool') != 'fedjax-drift' or not isinstance(
        data.get('entries'), list) or not isinstance(data.get('run_id'), str):
      raise UserError(f'--out: {path} is not a fedjax-drift run record')
    if not isinstance(data.get('format', 1), int) or data.get('format', 1) > MARKER_FORMAT:
      raise UserError(f'--out: {path} was written by a newer fedjax-drift (version '
                      f'{data.get("version", "?")}, record format {data.get("format")!r}; this '
                      f'is {__version__}, format {MARKER_FORMAT}); use that version')
    data.setdefault('outputs', [])
    return cls(run_dir, data)

  @classmethod
  def adopt(cls, run_dir, finished):
    """A record for a run directory written before records existed (its config.json is
    fedjax-drift's): the entries the old version's layout names, and its own temporaries."""
    names = [n for n in sorted(os.listdir(run_dir)) if n in LEGACY_NAMES or
             (len(n) == report.TEMP_NAME_LEN and fnmatch.fnmatchcase(
                 n, f'{report.TEMP_PREFIX}*{report.TEMP_SUFFIX}'))]
    return cls.new(run_dir, adopted=True, finished=bool(finished), entries=names)

  @property
  def run_id(self):
    return self.data['run_id']

  @property
  def temp_tag(self):
    """The 4 hex digits that start every temporary name of this run (report.temp_name)."""
    return self.data['temporaries'][len(report.TEMP_PREFIX):][:4]

  def save(self):
    report.atomic_write(self.path, (json.dumps(self.data, indent=1) + '\n').encode(),
                        tag=self.temp_tag)

  def add(self, name):
    """Records base name `name` as created by this tool (call before creating it)."""
    if name != MARKER and name not in self.data['entries']:
      self.data['entries'].append(name)
      self.save()

  def add_output(self, path, sha256):
    """Records a file written outside the directory (--save_params) with its sha256."""
    path = os.path.realpath(path)
    self.data['outputs'] = [o for o in self.data['outputs'] if o['path'] != path] + [
        {'path': path, 'sha256': sha256}]
    self.save()

  def wrote(self, path) -> bool:
    """Whether `path` is an output this run recorded and nobody has changed since."""
    path = os.path.realpath(path)
    for output in self.data['outputs']:
      if output['path'] == path and os.path.isfile(path):
        return _sha256(path) == output['sha256']
    return False

  def set(self, **fields):
    if any(self.data.get(k) != v for k, v in fields.items()):
      self.data.update(fields)
      self.save()

  def is_temporary(self, name) -> bool:
    return len(name) == report.TEMP_NAME_LEN and fnmatch.fnmatchcase(
        name, self.data['temporaries'])

  def owns(self, name) -> bool:
    return name in self.data['entries'] or self.is_temporary(name)


def _sha256(path):
  h = hashlib.sha256()
  with open(path, 'rb') as f:
    for chunk in iter(lambda: f.read(1 << 20), b''):
      h.update(chunk)
  return h.hexdigest()


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


def _home_or_root(run_dir):
  """Why --overwrite=force must never act on run_dir ('$HOME', '/' or an ancestor), or None."""
  home = os.path.expanduser('~')
  if os.path.realpath(run_dir) == os.path.realpath(os.sep):
    return '/'
  if home and home != os.sep and _inside(home, run_dir):
    return '$HOME' if os.path.realpath(home) == os.path.realpath(run_dir) else \
        f'an ancestor of $HOME ({home})'
  return None


def plan_clear(run_dir, mode, inputs=()) -> list:
  """The base names --overwrite=`mode` would remove from run_dir; removes nothing.

  Only a directory with a record (MARKER) is ever emptied: 'yes' takes the recorded entries
  and refuses (UserError naming one) if anything else is there; 'force' takes every entry,
  but never in $HOME, / or their ancestors. An input, the working directory or one of its
  ancestors make it refuse too. The directory and its record stay (the directory may be
  locked; the record is replaced by the next run's).
  """
  why = _home_or_root(run_dir) if mode == 'force' else None
  if why:
    raise UserError(f'--overwrite=force never empties {why}; pick another --out')
  if _inside(os.getcwd(), run_dir) and mode == 'force':
    raise UserError(f'--overwrite=force would empty {run_dir}, which holds the working '
                    'directory; pick another --out')
  names = sorted(n for n in os.listdir(run_dir) if n != MARKER) if os.path.isdir(run_dir) \
      else []
  if not names:
    return []
  record = Record.load(run_dir)
  if record is None:
    raise UserError(f'--overwrite: {os.path.join(run_dir, names[0])} is in a directory with no '
                    f'fedjax-drift record ({MARKER}), so nothing there is known to be ours; '
                    'remove the files yourself or pick another --out')
  foreign = [n for n in names if not record.owns(n)]
  if foreign and mode != 'force':
    raise UserError(f'--overwrite: {os.path.join(run_dir, foreign[0])} was not written by '
                    'this run of fedjax-drift; remove it, pick another --out, or pass '
                    '--overwrite=force')
  entries = names if mode == 'force' else [n for n in names if record.owns(n)]
  for name in entries:
    why = _protected(os.path.join(run_dir, name), inputs)
    if why:
      raise UserError(f'--overwrite would remove {os.path.join(run_dir, name)}, but {why}; '
                      'pick another --out')
  return entries


def clear(run_dir, mode, inputs=()) -> list:
  """Removes what plan_clear allows (refusing as it does); returns the removed base names."""
  entries = plan_clear(run_dir, mode, inputs)
  for name in entries:
    path = os.path.join(run_dir, name)
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path)
    elif os.path.lexists(path):
      os.remove(path)
  return entries


def undo(record) -> list:
  """Removes what the run of `record` created in its directory (its recorded entries, its
  temporaries, then the record itself): for a new run that failed before any checkpoint, so
  that the same command runs again without --overwrite. Nothing unrecorded is touched.
  Returns the removed base names."""
  names = [n for n in record.data['entries'] if os.path.lexists(os.path.join(record.run_dir, n))]
  for name in names:
    path = os.path.join(record.run_dir, name)
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path, ignore_errors=True)
    else:
      with contextlib.suppress(OSError):
        os.remove(path)
  names += remove_temporaries(record)
  with contextlib.suppress(OSError):
    os.remove(record.path)
  return names


def remove_temporaries(record) -> list:
  """Removes the temporary files a killed run left, only those matching the record's
  temporary names; returns their base names."""
  if record is None or not os.path.isdir(record.run_dir):
    return []
  names = [n for n in sorted(os.listdir(record.run_dir)) if record.is_temporary(n)]
  for name in names:
    os.remove(os.path.join(record.run_dir, name))
  return names


def open_record(run_dir, resume, mode, inputs=(), log=print):
  """The record of the run about to write in run_dir (we hold its locks.Lock).

  Resume: the existing record, or a record adopting a directory from before records (one
  line says so); the killed launch's temporaries are removed. Otherwise: what --overwrite
  allows is removed, and a new record (a new run id) replaces any old one.
  """
  if resume:
    record = Record.load(run_dir)
    if record is None:
      record = Record.adopt(run_dir, os.path.exists(os.path.join(run_dir, 'summary.json')))
      log(f'{run_dir} predates fedjax-drift\'s run records; it now has one ({MARKER}) '
          f'listing {len(record.data["entries"])} entries of its layout')
    remove_temporaries(record)
    return record
  try:  # the old record only names the killed launch's temporaries; a damaged one is replaced
    old = Record.load(run_dir) if os.path.isdir(run_dir) else None
  except UserError:
    old = None
  if mode:
    clear(run_dir, mode, inputs)
  remove_temporaries(old)
  return Record.new(run_dir)


def unknown_flag_error(run_dir, flag) -> UserError:
  """The one line for a run whose config.json sets --`flag`, which this version lacks: it
  names the file and the version that wrote the run (its record's), most likely a newer one."""
  try:
    record = Record.load(run_dir)
  except UserError:
    record = None
  wrote = record.data.get('version') if record is not None else None
  by = f'fedjax-drift {wrote}' if wrote else 'another version of fedjax-drift'
  return UserError(f'--resume: {os.path.join(run_dir, "config.json")} sets --{flag}, which '
                   f'fedjax-drift {__version__} does not have: the run was written by {by} '
                   '(a newer one?); resume it with that version')


def read_run_config(run_dir) -> dict:
  """config.json of an existing run of this tool; UserError if run_dir holds none."""
  path = os.path.join(run_dir, 'config.json')
  if not os.path.isfile(path):
    raise UserError(f'--resume: {run_dir} holds no run (no config.json)')
  saved = read_json_input(path, '--resume')
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
    if os.path.isfile(os.path.join(here, MARKER)):
      return here
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


def is_method_dir(outer, run_dir) -> bool:
  """Whether run_dir is one method's directory directly inside `outer`, a run of
  --grid='algo:...' (methods.py), whose config.json lists that method."""
  if os.path.dirname(os.path.abspath(run_dir)) != os.path.abspath(outer):
    return False
  try:
    saved = read_json(os.path.join(outer, 'config.json'))
  except (OSError, ValueError):
    return False
  listed = saved.get('_resolved', {}).get('methods', ()) if isinstance(saved, dict) else ()
  return os.path.basename(os.path.abspath(run_dir)) in listed


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


def check_path_text(path, flag):
  """Refuses a path holding bytes that are not UTF-8 (Python keeps them as surrogates): the
  run records its paths in UTF-8 JSON and prints them."""
  try:
    path.encode('utf-8')
  except UnicodeEncodeError:
    shown = path.encode('utf-8', 'surrogateescape').decode('utf-8', 'backslashreplace')
    raise UserError(f'{flag}={shown}: the path holds a byte that is not UTF-8; rename it or '
                    'pick another') from None


def check_out(run_dir, resume, overwrite, inputs=()):
  """Every check on --out that can fail, before any work. Writes nothing.

  inputs: the dataset and partition files the run reads (absolute paths).
  """
  flag, mode = f'--out={run_dir}', overwrite_mode(overwrite)
  check_path_text(run_dir, '--out')
  if os.path.islink(run_dir) and not os.path.exists(run_dir):
    raise UserError(f'{flag} is a symbolic link to {os.readlink(run_dir)}, which does not '
                    'exist; create that folder, or pick another --out')
  if os.path.exists(run_dir) and not os.path.isdir(run_dir):
    raise UserError(f'{flag} is a file, not a directory')
  check_length(os.path.join(run_dir, 'x'), flag,
               max(RESERVED_PATH_CHARS, report.TEMP_NAME_LEN))
  outer = enclosing_run(run_dir)
  if outer and not is_method_dir(outer, run_dir):
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
    plan_clear(run_dir, mode, inputs)
  elif mode == 'force' and _home_or_root(run_dir):  # empty: nothing to remove, still refused
    raise UserError(f'--overwrite=force never acts on {_home_or_root(run_dir)}; pick another '
                    '--out')
  check_writable(run_dir, flag)


def check_save_params(path, run_dir, inputs=(), overwrite='', resume=False):
  """Every check on --save_params that can fail, before any work. Writes nothing.

  An existing file is replaced only with --overwrite (not on --resume) or when the run in
  run_dir recorded writing it and it is unchanged since.
  """
  if not path:
    return
  check_path_text(path, '--save_params')
  if os.path.isfile(path) and not (overwrite_mode(overwrite) and not resume):
    record = Record.load(run_dir) if os.path.isdir(run_dir) else None
    if record is None or not record.wrote(path):
      raise UserError(f'--save_params={path} already exists and this run did not write it; '
                      + ('pick another file' if resume else
                         'pass --overwrite to replace it, or pick another file'))
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

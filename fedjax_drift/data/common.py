"""The toolbox every dataset loader shares: the Dataset it returns, its checks, the import cache.

Loaders (data/local.py, downloads.py, text.py, domains.py, multidomain.py, hub.py) import this
module and register their --dataset names here with `register_dataset`; data/sources.py, the
dispatcher, imports them all and picks the loader. Nothing here imports a loader, so the data
modules form no import cycle.

Every loader returns a `Dataset` of numpy arrays. Images keep their compact dtype (uint8 stays
uint8 on the device and is scaled to [0, 1] inside the compiled step); float features are used
unchanged. Images are stored NHWC; flat feature vectors keep their shape.
"""
import gzip
import os
import zipfile
from typing import Callable, NamedTuple, Optional

import numpy as np

from fedjax_drift import registry, report
from fedjax_drift.errors import UserError


class DatasetInfo(NamedTuple):
  """What the registry holds for one --dataset entry (registry.Entry.info).

  load: callable(dataset, data_dir=None, **options) -> a validated Dataset; options are the
    sources.load_options() (each loader takes the ones it uses and ignores the rest).
  files: callable(dataset, data_dir) -> the paths the loader reads, existing or not (the
    run's input fingerprint, inputs.py).
  importable: whether `fedjax-drift-data import` writes this name's cache.
  shown: the name --list shows ('npz:PATH' for the prefix 'npz:'); '' leaves it out.
  shared: the Config fields the loader also takes that are not the entry's alone (--image_size,
    --pretrained: the models read them too, so no entry declares them in `reads`).
  model: the --model a command line without one uses for this dataset ('' = Config's
    default), e.g. a text model for a text dataset (`usual_model`); or callable(dataset) ->
    that name, for a prefix whose files tell (npz:PATH of 32x32x3 images: cnn_cifar).
  classes: the dataset's class count when its name fixes it (10 for MNIST), 0 when the
    files tell (validate's stray-label check then judges by the labels found).
  source: where its files come from (a download address, and `tfds:NAME` where TFDS has
    it), for the refusal of a run without them and `fedjax-drift-data --help`.
  """
  load: Callable
  files: Callable
  importable: bool = False
  shown: str = ''
  shared: tuple = ()
  model: str = ''
  classes: int = 0
  source: str = ''


def register_dataset(name, summary, load, *, reads=(), shared=(), importable=False, files=None,
                     folder_files=None, prefix=False, shown=None, model='',
                     classes=0, source='') -> registry.Entry:
  """Registers --dataset=name (kind 'dataset'); returns its registry.Entry.

  summary: its --list line. load: see DatasetInfo. reads: the Config fields only this dataset
  reads (the unread-flag check, applies.py). files: callable(dataset, data_dir) -> paths, or
  None for `usual_files`' rule, with folder_files(dataset, folder) -> the paths read from a
  --data_dir folder. prefix: `name` matches every value starting with it. shown: the --list
  name (default `name`), '' for an alias that --list leaves out. model, classes, source: see
  DatasetInfo."""
  if files is None:
    def files(dataset, data_dir):
      return usual_files(dataset, data_dir, importable, folder_files)
  info = DatasetInfo(load, files, importable, name if shown is None else shown, tuple(shared),
                     model, classes, source)
  return registry.register('dataset', name, summary, reads, prefix=prefix, info=info)


def usual_model(dataset) -> str:
  """The --model registered as `dataset`'s usual one ('' when none, or an unknown name)."""
  entry = registry.find('dataset', dataset)
  if entry is None or entry.info is None:
    return ''
  return entry.info.model(dataset) if callable(entry.info.model) else entry.info.model


def npz_shape(path, key) -> Optional[tuple]:
  """The shape of array `key` in the npz at `path`, read from its .npy header alone; None
  when the file or the array cannot be read (the loader then says why)."""
  try:
    with zipfile.ZipFile(path) as archive, archive.open(f'{key}.npy') as f:
      major, _ = np.lib.format.read_magic(f)
      read = (np.lib.format.read_array_header_1_0 if major == 1
              else np.lib.format.read_array_header_2_0)
      return read(f)[0]
  except (OSError, KeyError, ValueError, zipfile.BadZipFile):
    return None


def source_of(dataset) -> str:
  """Where `dataset`'s files come from, as registered ('' when none is, or an unknown name)."""
  entry = registry.find('dataset', dataset)
  return entry.info.source if entry is not None and entry.info is not None else ''


def needs_files(dataset, path, import_name=None) -> str:
  """The one-line refusal of --dataset=`dataset` run without --data_dir and without an import
  at `path`: which files to get, where, and the import command (import_name: the --dataset
  the import takes, when it must be named)."""
  named = f' --dataset={import_name}' if import_name else ''
  source = source_of(dataset)
  where = f'; get {source}' if source else ''
  return (f'--dataset={dataset} needs --data_dir=DIR, or import the files once with '
          f'`fedjax-drift-data import DIR{named}` (nothing at {path}{where})')


def usual_files(dataset, data_dir, importable, folder_files: Optional[Callable] = None) -> list:
  """The files most loaders read: without --data_dir, the imported copy (none for a dataset
  that is not imported); --data_dir itself when it names a file; else folder_files(dataset,
  data_dir) (none without one)."""
  if not data_dir:
    return [imported_path(dataset)] if importable else []
  if not os.path.isdir(data_dir):
    return [data_dir]  # --data_dir names the file itself
  return folder_files(dataset, data_dir) if folder_files else []


def files_under(directory) -> list:
  """Every file below `directory`, sorted (none if it does not exist)."""
  return sorted(os.path.join(d, f) for d, _, files in os.walk(directory) for f in files)


class Dataset(NamedTuple):
  """A validated dataset. The optional fields describe structure beyond (x, y):

  domains_train/domains_test: int32 domain id per example (multi-domain data, for
    --partition=domains and per-domain evaluation); domain_names: one name per id.
  groups: {column name: int32 id per training example} (natural partitions,
    --partition=natural:COLUMN), e.g. {'client': ...} or {'writer': ...}.
  groups_test: {column name: int32 id per test example}, the same clients' numbers (ids
    beyond the training ones: clients with test examples only), or None: the natural
    datasets' readers keep them so that a drawn subset of clients keeps its own test examples
    (data/natural.py).
  vocab_size: 0 for images and features; for text, the tokenizer's vocabulary size, and x is
    int32 [N, 2, L]: x[:, 0] token ids in [0, vocab_size), x[:, 1] the attention mask (1 = a
    real token, 0 = padding); see data/text.py.
  x_val/y_val: the dataset's own validation split (SST-5's dev.txt), or None.
  """
  name: str
  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray
  num_classes: int
  domains_train: np.ndarray = None
  domains_test: np.ndarray = None
  domain_names: tuple = ()
  groups: dict = None
  vocab_size: int = 0
  x_val: np.ndarray = None
  y_val: np.ndarray = None
  groups_test: dict = None


def read_idx(path, expected_ndim, where=None):
  """A gzipped uint8 IDX file (a path, or a binary file object named `where`) -> its array."""
  where = where or path
  try:
    with gzip.open(path, 'rb') as f:
      raw = f.read()
  except (OSError, EOFError) as e:
    raise UserError(f'cannot read IDX file {where}: {e}') from None
  if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 8:
    raise UserError(f'{where} is not a uint8 IDX file (bad magic number)')
  ndim = raw[3]
  if ndim != expected_ndim:
    raise UserError(f'{where}: expected {expected_ndim} dimensions, found {ndim}')
  header = 4 + 4 * ndim
  shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], 'big') for i in range(ndim))
  if len(raw) != header + int(np.prod(shape)):
    raise UserError(f'{where} is truncated: header says {shape}, '
                    f'file has {len(raw) - header} data bytes')
  return np.frombuffer(raw, np.uint8, offset=header).reshape(shape)


NPZ_MAGIC = b'PK'  # an .npz is a zip archive


def check_npz_magic(path):
  """Refuses a file that is no zip archive (a CSV or text file named .npz) by what it starts
  with, instead of numpy's pickle advice."""
  try:
    with open(path, 'rb') as f:
      head = f.read(16)
  except OSError as e:
    raise UserError(f'cannot read {path}: {e.strerror or e}') from None
  if not head.startswith(NPZ_MAGIC):
    shown = head.decode('utf-8', 'replace').splitlines()[0][:16] if head else ''
    raise UserError(f'{path} is not an npz file (a zip of .npy arrays, as numpy.savez writes)'
                    + (f'; it starts with {shown!r}' if shown else '; it is empty'))


def load_npz(path, name=None):
  """Arrays x_train, y_train, x_test, y_test; uint8 images get a trailing channel if 3-D."""
  if not os.path.exists(path):
    raise UserError(f'data file {path} does not exist')
  check_npz_magic(path)
  try:
    with np.load(path, allow_pickle=False) as f:
      missing = [k for k in ('x_train', 'y_train', 'x_test', 'y_test') if k not in f]
      if missing:
        raise UserError(f'{path} lacks arrays {missing} (need x_train, y_train, x_test, y_test)')
      arrays = {k: f[k] for k in ('x_train', 'y_train', 'x_test', 'y_test')}
  except UserError:
    raise
  except Exception as e:  # zipfile/pickle errors of a truncated or foreign file
    raise UserError(f'cannot read {path} as npz: {e}') from None
  x_train, x_test = arrays['x_train'], arrays['x_test']
  tokens = x_train.dtype != np.uint8 and np.issubdtype(x_train.dtype, np.integer)
  if x_train.ndim == 3 and x_test.ndim == 3 and not tokens:  # grey images without channel axis
    x_train, x_test = x_train[..., None], x_test[..., None]
  return x_train, arrays['y_train'], x_test, arrays['y_test']


def cache_dir():
  """$FEDJAX_DRIFT_CACHE, by default ~/.cache/fedjax_drift: imports, decoded and tokenised
  copies, trained vocabularies."""
  return os.environ.get('FEDJAX_DRIFT_CACHE',
                        os.path.join(os.path.expanduser('~'), '.cache', 'fedjax_drift'))


def imported_path(name):
  """Where `fedjax-drift-data import` keeps dataset `name`: CACHE/datasets/NAME.npz."""
  return os.path.join(cache_dir(), 'datasets', f'{name}.npz')


def load_imported(name):
  """The imported copy of `name`, or a UserError saying how to get one."""
  path = imported_path(name)
  if not os.path.exists(path):
    raise UserError(needs_files(name, path))
  return load_npz(path)


def write_npz(path, **arrays):
  """Writes `arrays` to `path` (.npz) through a temporary beside it, renamed into place
  (report.atomic_write_with): an interrupt or a failure leaves no partial file. A failed
  write (a full disk, no permission) is one UserError naming `path`."""
  report.atomic_write_with(path, lambda f: np.savez(f, **arrays), parents=True,
                           hint='make room, or set FEDJAX_DRIFT_CACHE to a writable folder '
                           'with room')


def npz_structure(path):
  """The optional structure arrays of an npz (an imported cache or npz:PATH), as validate's
  keywords: d_train/d_test (domain ids), domain_names, <column>_train (group ids),
  vocab_size (a scalar: token data, x int32 [N, 2, L] of ids and attention mask), and x_val/
  y_val (the dataset's own validation split, for --val_source=dataset)."""
  try:
    with np.load(path, allow_pickle=False) as f:
      out = {}
      if 'x_val' in f or 'y_val' in f:  # validate refuses one without the other
        out.update({k: f[k] for k in ('x_val', 'y_val') if k in f})
      if 'vocab_size' in f:
        out['vocab_size'] = int(f['vocab_size'])
      if 'd_train' in f or 'd_test' in f:
        out['domains_train'] = f['d_train'] if 'd_train' in f else None
        out['domains_test'] = f['d_test'] if 'd_test' in f else None
      if 'domain_names' in f:
        out['domain_names'] = tuple(str(n) for n in f['domain_names'])
      groups = {k[:-len('_train')]: f[k] for k in f.files
                if k.endswith('_train') and k not in ('x_train', 'y_train', 'd_train')}
      groups_test = {k: f[f'{k}_test'] for k in groups if f'{k}_test' in f.files}
  except Exception as e:  # pylint: disable=broad-except
    raise UserError(f'cannot read {path} as npz: {e}') from None
  if groups_test:
    out['groups_test'] = groups_test
  return dict(out, groups=groups) if groups else out


def check_examples(where, x=None, y=None, classes=0, value_range=None, stored='',
                   clients=None):
  """The readers' one check of one record as the file stores it, before any conversion (a
  clip or a cast would hide what is wrong): y class indices 0..classes-1 (classes 0: any
  integer >= 0; validate's stray-label check then judges the whole dataset), x finite and,
  with value_range (lo, hi), inside the range the format defines (`stored` says it, e.g.
  "FEMNIST's pixels are 0..1"), and as many labels as examples. A refusal is one UserError
  naming `where` (the file and its client or record), the first bad example's index within
  it and, with clients (one id per example), that example's client."""
  def at(i):
    who = f', client {clients[i]}' if clients is not None else ''
    return f'{where}{who}, example {i}'
  if x is not None and y is not None and len(x) != len(y):
    raise UserError(f'{where}: {len(x)} examples but {len(y)} labels (a truncated or edited '
                    'record?)')
  if y is not None:
    y = np.asarray(y)
    if y.size and y.dtype.kind not in 'iuf':
      raise UserError(f'{at(0)}: label {y.reshape(-1)[0]!r} is not a class index')
    if y.size:
      yf = y.astype(np.float64)
      bad = ~np.isfinite(yf) | (yf != np.round(yf)) | (yf < 0)
      if classes:
        bad |= yf >= classes
      if bad.any():
        i = int(np.argmax(bad.reshape(len(y), -1).any(axis=1)))
        label = y.reshape(len(y), -1)[i][0]
        rule = (f'0..{classes - 1}, the dataset\'s {classes} classes' if classes else
                'a class index 0..C-1')
        raise UserError(f'{at(i)}: label {label:g} is outside {rule}'
                        if y.dtype.kind == 'f' else f'{at(i)}: label {int(label)} is outside '
                        f'{rule}')
  if x is not None:
    x = np.asarray(x)
    if x.size and x.dtype.kind == 'f':
      rows = x.reshape(len(x), -1)
      finite = np.isfinite(rows)
      if not finite.all():
        i = int(np.argmax(~finite.all(axis=1)))
        raise UserError(f'{at(i)}: holds NaN or infinite values')
      if value_range is not None:
        lo, hi = value_range
        out = (rows < lo) | (rows > hi)
        if out.any():
          i = int(np.argmax(out.any(axis=1)))
          v = rows[i][out[i]][0]
          scaled = (' (scaled 0..255?)' if hi <= 1 and rows.max() > 1 and rows.max() <= 255
                    else '')
          raise UserError(f'{at(i)}: value {v:g} is outside {lo:g}..{hi:g}{scaled}'
                          + (f' ({stored})' if stored else ''))


def _finite_float32(name, split, x):
  """x as float32, checked finite after the cast: what the model sees (float64 beyond
  float32's range becomes inf)."""
  with np.errstate(over='ignore'):
    cast = x.astype(np.float32)
  if not np.all(np.isfinite(cast)):
    why = ('NaN or infinite features' if not np.all(np.isfinite(x)) else
           f'features beyond float32\'s range (|x| > {np.finfo(np.float32).max:.3g}), which '
           'become infinite as float32')
    first = int(np.argmax(~np.isfinite(cast.reshape(len(cast), -1)).all(axis=1)))
    raise UserError(f'{name}: {split} holds {why} (first at example {first})')
  return cast


def _ranges(values) -> str:
  """Sorted distinct ints as ranges: [0, 1, 2, 3, 9, 255] -> '0-3, 9, 255'."""
  parts, i = [], 0
  while i < len(values):
    j = i
    while j + 1 < len(values) and values[j + 1] == values[j] + 1:
      j += 1
    parts.append(str(values[i]) if j == i else f'{values[i]}-{values[j]}')
    i = j + 1
  return ', '.join(parts)


def _check_no_stray_labels(name, y_train, y_test):
  """Labels are class indices 0..C-1. A dataset whose name fixes C (DatasetInfo.classes:
  MNIST's 10) refuses any label from C on. Otherwise, when the distinct labels of both
  splits are at most half of 0..max (ten digits and one 255 would make 256 classes, 245 of
  them empty), a few stray labels are the likelier cause, and the run would train a 256-way
  classifier without a word. Refused alike in either split, naming the labels found and
  the stray ones with their counts."""
  present = np.unique(np.concatenate([y_train, y_test]))
  classes = int(present[-1]) + 1
  entry = registry.find('dataset', name)
  known = entry.info.classes if entry is not None and entry.info is not None else 0
  if known:
    if classes <= known:
      return
    stray = [int(v) for v in present if v >= known]
  elif 2 * len(present) > classes:
    return
  else:
    run = 0  # labels 0..run-1 all present: the classes; the ones above them are stray
    while run < len(present) and present[run] == run:
      run += 1
    stray = [int(v) for v in present[run:]]
  counts = [f'{v} ({int((y_train == v).sum())} train, {int((y_test == v).sum())} test)'
            for v in stray[:5]]
  raise UserError(f'{name}: the labels found, {_ranges([int(v) for v in present])}, would '
                  f'make {classes} classes, {classes - len(present)} of them without an '
                  f'example; stray labels? {"; ".join(counts)}'
                  + (f' and {len(stray) - 5} more' if len(stray) > 5 else '')
                  + (f' ({name} has {known} classes, 0..{known - 1})' if known else
                     ' (labels must be class indices 0..C-1)'))


def validate(name, x_train, y_train, x_test, y_test, domains_train=None, domains_test=None,
             domain_names=(), groups=None, vocab_size=0, x_val=None, y_val=None,
             groups_test=None):
  """Checks shapes, label range and finiteness; returns a Dataset with int32 labels.

  The optional structure (domain ids per split, group columns per training example) is
  checked for length and integrality and carried as int32 (see `Dataset`). vocab_size > 0:
  x are token arrays int32 [N, 2, L], checked by `check_tokens` instead. x_val/y_val: an
  optional validation split, checked as the test split is (`_validate_val`)."""
  for split, x, y in (('train', x_train, y_train), ('test', x_test, y_test)):
    if x.ndim < 2:
      raise UserError(f'{name}: x_{split} must have a leading example axis, got shape {x.shape}')
    if y.ndim != 1 or len(y) != len(x):
      raise UserError(f'{name}: y_{split} shape {y.shape} does not match x_{split} {x.shape}')
    if len(x) == 0:
      raise UserError(f'{name}: the {split} split is empty')
    if y.dtype.kind not in 'iuf':  # strings, objects, booleans: not class indices
      kind = {'U': 'strings', 'S': 'strings', 'b': 'true/false values'}.get(
          y.dtype.kind, f'{y.dtype} values')
      raise UserError(f'{name}: y_{split} holds {kind}; labels are integer class indices '
                      '0..C-1')
    if y.dtype.kind == 'f' and len(y) and not (np.isfinite(y).all() and
                                               np.abs(y).max() < 2 ** 31):
      bad = y[~(np.isfinite(y) & (np.abs(y) < 2 ** 31))][0]
      raise UserError(f'{name}: y_{split} holds label {bad:g}, not a class index 0..C-1')
    if not np.issubdtype(y.dtype, np.integer):
      if not np.all(np.equal(np.mod(y, 1), 0)):
        raise UserError(f'{name}: y_{split} holds non-integer labels')
    if vocab_size:
      check_tokens(name, f'x_{split}', x, vocab_size)
    elif x.dtype != np.uint8:
      if not np.issubdtype(x.dtype, np.floating):
        raise UserError(f'{name}: x_{split} has dtype {x.dtype}; use uint8 images or floats')
  if x_train.shape[1:] != x_test.shape[1:]:
    raise UserError(f'{name}: train examples have shape {x_train.shape[1:]}, '
                    f'test examples {x_test.shape[1:]}')
  y_train, y_test = y_train.astype(np.int64), y_test.astype(np.int64)
  if y_train.min() < 0 or y_test.min() < 0:
    raise UserError(f'{name}: labels must be >= 0')
  _check_no_stray_labels(name, y_train, y_test)
  num_classes = int(y_train.max()) + 1
  if y_test.max() >= num_classes:
    raise UserError(f'{name}: y_test holds label {int(y_test.max())}, outside the training '
                    f'labels 0..{num_classes - 1}')
  if num_classes > 100_000:
    raise UserError(f'{name}: labels go up to {num_classes - 1}; expected class indices '
                    '0..C-1')
  if num_classes < 2:
    raise UserError(f'{name}: need at least 2 classes, found {num_classes}')
  # Every split by the same rules: floats finite after the float32 cast, and one scale for
  # all (uint8 is divided by 255 on the device, floats are used as they are).
  dtypes = x_train.dtype, x_test.dtype
  if x_train.dtype != np.uint8 and not vocab_size:
    x_train = _finite_float32(name, 'x_train', x_train)
  if x_test.dtype != np.uint8 and not vocab_size:
    x_test = _finite_float32(name, 'x_test', x_test)
  if (dtypes[0] == np.uint8) != (dtypes[1] == np.uint8):
    raise UserError(f'{name}: x_train is {dtypes[0]} and x_test is {dtypes[1]}, which '
                    'the model would scale differently (uint8 is divided by 255, floats are '
                    'used as they are); store both splits as uint8 or both as floats')
  domains_train, domains_test = _check_domains(name, domains_train, domains_test, len(x_train),
                                               len(x_test), domain_names)
  groups = {k: _check_ids(name, f'{k}_train', v, len(x_train)) for k, v in (groups or {}).items()}
  groups_test = {k: _check_ids(name, f'{k}_test', v, len(x_test))
                 for k, v in (groups_test or {}).items() if k in groups}
  ds = Dataset(name, x_train, y_train.astype(np.int32), x_test, y_test.astype(np.int32),
               num_classes, domains_train, domains_test, tuple(domain_names), groups or None,
               int(vocab_size), groups_test=groups_test or None)
  return ds if x_val is None and y_val is None else _validate_val(ds, x_val, y_val, dtypes[0])


def _validate_val(ds, x_val, y_val, train_dtype):
  """ds with its own validation split (x_val, y_val) checked by the test split's rules: same
  example shape and scale as x_train, labels among the training labels."""
  name = ds.name
  if x_val is None or y_val is None:
    raise UserError(f'{name}: a validation split needs both x_val and y_val')
  if y_val.ndim != 1 or len(y_val) != len(x_val) or not len(x_val):
    raise UserError(f'{name}: y_val shape {y_val.shape} does not match x_val {x_val.shape} '
                    '(or the split is empty)')
  if x_val.shape[1:] != ds.x_train.shape[1:]:
    raise UserError(f'{name}: validation examples have shape {x_val.shape[1:]}, train '
                    f'examples {ds.x_train.shape[1:]}')
  if ds.vocab_size:
    check_tokens(name, 'x_val', x_val, ds.vocab_size)
  elif (x_val.dtype == np.uint8) != (train_dtype == np.uint8):
    raise UserError(f'{name}: x_train is {train_dtype} and x_val is {x_val.dtype}; store both '
                    'as uint8 or both as floats')
  elif x_val.dtype != np.uint8:
    x_val = _finite_float32(name, 'x_val', x_val)
  if not np.all(np.equal(np.mod(y_val, 1), 0)) or y_val.min() < 0 or \
      y_val.max() >= ds.num_classes:
    raise UserError(f'{name}: y_val holds labels outside 0..{ds.num_classes - 1}')
  return ds._replace(x_val=x_val, y_val=y_val.astype(np.int32))


def check_tokens(name, split, x, vocab_size):
  """A text split x (int32 [N, 2, L]: token ids, attention mask) with ids in
  [0, vocab_size), a 0/1 mask and at least one real token per example; else a UserError."""
  if x.ndim != 3 or x.shape[1] != 2 or x.dtype != np.int32:
    raise UserError(f'{name}: {split} must be int32 [N, 2, L] (token ids, attention mask); '
                    f'got {x.dtype} {x.shape}')
  ids, mask = x[:, 0], x[:, 1]
  if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
    raise UserError(f'{name}: {split} holds token ids outside [0, {vocab_size}) (the '
                    'tokenizer\'s vocabulary)')
  if not np.all((mask == 0) | (mask == 1)):
    raise UserError(f'{name}: {split}\'s attention mask holds values other than 0 and 1')
  empty = np.flatnonzero(mask.sum(1) == 0)
  if empty.size:
    raise UserError(f'{name}: {split} example {int(empty[0])} has no tokens (an empty text?)')


def _check_ids(name, what, ids, n):
  ids = np.asarray(ids)
  if ids.shape != (n,):
    raise UserError(f'{name}: {what} has shape {ids.shape}; expected one id per example ({n})')
  if not np.issubdtype(ids.dtype, np.integer) or (n and ids.min() < 0):
    raise UserError(f'{name}: {what} must hold integer ids >= 0')
  return ids.astype(np.int32)


def _check_domains(name, d_train, d_test, n_train, n_test, domain_names):
  if d_train is None and d_test is None:
    return None, None
  if d_train is None or d_test is None:
    raise UserError(f'{name}: domain ids need both d_train and d_test')
  d_train = _check_ids(name, 'd_train', d_train, n_train)
  d_test = _check_ids(name, 'd_test', d_test, n_test)
  present = np.unique(np.concatenate([d_train, d_test]))
  if len(present) != int(present[-1]) + 1:  # an empty domain would be an empty client group
    missing = sorted(set(range(int(present[-1]) + 1)) - set(present.tolist()))
    raise UserError(f'{name}: domain ids {_ranges(present.tolist())} are not contiguous (no '
                    f'example has {_ranges(missing)}); number the domains 0..D-1')
  if domain_names and max(d_train.max(), d_test.max()) >= len(domain_names):
    raise UserError(f'{name}: domain ids go beyond the {len(domain_names)} domain names')
  return d_train, d_test

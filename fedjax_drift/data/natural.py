"""Natural federated datasets, with their own clients: FEMNIST by writer and Shakespeare by
speaking role, read from TensorFlow Federated's h5 files, LEAF's JSON or a Hugging Face folder.

Layouts (as their publishers ship them):
  TFF h5      fed_emnist_train.h5 + fed_emnist_test.h5: examples/<client_id>/pixels (float32
              [n, 28, 28], 1.0 = background) and label; shakespeare_train.h5 +
              shakespeare_test.h5: examples/<client_id>/snippets (byte strings). Read with h5py
              (the `federated` extra).
  LEAF JSON   train/*.json + test/*.json, each {"users": [...], "num_samples": [...],
              "user_data": {uid: {"x": [...], "y": [...]}}}: FEMNIST x are 784 floats per image
              (1.0 = background), y class ids 0..61; Shakespeare x are 80-character strings and
              y the next character.
  Hugging Face a folder of the hub's files (data/hubfiles.py: parquet, csv or arrow, as
              `huggingface-cli download` or save_to_disk leave them) in flwrlabs' columns:
              FEMNIST writer_id (string), image (PNG, 28x28 grey), character (class id
              0..61); Shakespeare character_id (string), x (80 characters), y (the next
              one). The hub ships only a training split: without a test split in the folder,
              each client is split as LEAF's split_data.py splits it (leaf_split).

FEMNIST pixels are stored as uint8 round(255 * p), so the model sees the files' own values
(both sources derive them from 8-bit images, 1.0 = white background, not inverted). Shakespeare
becomes LEAF's task everywhere: ids in LEAF's 80-symbol alphabet (`LETTERS`, from LEAF's
models/utils/language_utils.py), 80 characters in, the next character out (80 classes). TFF's
snippets are turned into that form as LEAF's preprocessing turns a role's text: a client's
snippets joined by spaces, newlines made spaces, runs of spaces made one, then every window of
80 characters with the character after it. A character outside the alphabet becomes a space.
The ids are stored as the text datasets' tokens (int32 [N, 2, 80]: ids, an all-ones mask).

Each training example carries its client's id in the group column `writer` (FEMNIST) or `role`
(Shakespeare), numbered in sorted order of the files' client ids (the test examples too, in
Dataset.groups_test; clients with test examples only are numbered after them):
--partition=natural (or natural:writer, natural:role) makes each of them a client.
--num_clients below their number draws a seeded subset when the data are read, as LEAF
samples whole users and TFF evaluates the sampled clients: the chosen clients' training
examples make the training split and their test examples the test split (`chosen`). The draw
is Stack Overflow's (stackoverflow.choose), the one partitions.natural makes on the whole list
of clients, so the clients are those the partition would take from all of them; the study
reads the data once, so the runs of --seeds > 1 share that draw. Any other partition, or all
the clients, keeps every example of both splits.
"""
import io
import json
import os
import re

import numpy as np

from fedjax_drift.data import common, hubfiles, stackoverflow
from fedjax_drift.errors import UserError, first_line

try:  # optional: only TFF's h5 files need it
  import h5py
except ImportError:  # pragma: no cover - the `federated` extra installs it
  h5py = None

FEMNIST_H5 = ('fed_emnist_train.h5', 'fed_emnist_test.h5')
SHAKESPEARE_H5 = ('shakespeare_train.h5', 'shakespeare_test.h5')
# LEAF's Shakespeare alphabet (TalwalkarLab/leaf models/utils/language_utils.py ALL_LETTERS).
LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
SEQ_LEN = 80  # LEAF's window: 80 characters predict the 81st
COLUMNS = {'femnist': 'writer', 'shakespeare': 'role'}
# The hub's columns (flwrlabs/femnist, flwrlabs/shakespeare): (client, x, y).
HF_COLUMNS = {'femnist': ('writer_id', 'image', 'character'),
              'shakespeare': ('character_id', 'x', 'y')}
TRAIN_FRACTION = 0.9  # LEAF's split_data.py default (--tf 0.9)
SPLIT_SEED = 0  # the one-split hub folders' per-client split: fixed, so every run tests alike
FEMNIST_CLASSES = 62  # 10 digits, 26 upper- and 26 lower-case letters
# What FEMNIST's float files store (TFF's h5 and LEAF's JSON), for the range check's message.
FEMNIST_PIXELS = 'FEMNIST\'s files store pixels as 0..1, 1.0 = background'

# Character -> id in LETTERS; anything else -> the space's id (see the module docstring).
_IDS = np.full(1 << 16, LETTERS.index(' '), np.int32)  # the Basic Multilingual Plane
_IDS[[ord(c) for c in LETTERS]] = np.arange(len(LETTERS), dtype=np.int32)


def char_ids(text) -> np.ndarray:
  """A string -> int32 ids in LETTERS (characters outside it: the space's id)."""
  codes = np.frombuffer(text.encode('utf-32-le'), np.uint32)
  return np.where(codes < len(_IDS), _IDS[np.minimum(codes, len(_IDS) - 1)], _IDS[ord(' ')])


def leaf_text(snippets) -> str:
  """A TFF client's snippets as LEAF's preprocessing leaves a role's text: joined by spaces,
  newlines made spaces, runs of two or more spaces made one (gen_all_data.py txt_to_data)."""
  text = ' '.join(snippets).replace('\n', ' ')
  return re.sub(r'   *', ' ', text)


def windows(ids, seq_len=SEQ_LEN):
  """ids [n] -> (x [n - seq_len, seq_len], y [n - seq_len]): each window and the id after it
  (LEAF's txt_to_data: range(0, len(text) - seq_len))."""
  if len(ids) <= seq_len:
    return np.zeros((0, seq_len), np.int32), np.zeros(0, np.int32)
  x = np.lib.stride_tricks.sliding_window_view(ids[:-1], seq_len)
  return np.ascontiguousarray(x), ids[seq_len:].copy()


def _tokens(x):
  """Char ids [N, L] -> the text datasets' int32 [N, 2, L] (ids, an all-ones mask)."""
  return np.stack([x, np.ones_like(x)], axis=1).astype(np.int32)


# ---------------------------------------------------------------------------------------------
# Readers: each returns {client_id: (x, y)} of one split.

def _need_h5py(path):
  if h5py is None:
    raise UserError(f'reading {path} needs h5py: pip install "fedjax-drift[federated]"')


def read_h5(path, fields, convert):
  """A TFF h5 file -> {client_id: convert(where, {field: array})} of
  examples/<client_id>/<field>, one client in memory at a time before its conversion; where
  is 'PATH: client ID', for convert's refusals. A record that cannot be read or converted
  is one UserError naming the file and the client."""
  _need_h5py(path)
  try:
    with h5py.File(path, 'r') as f:
      if 'examples' not in f:
        raise UserError(f'{path} has no examples/ group (TFF\'s layout: examples/<client>/...)')
      out = {}
      for cid in sorted(f['examples']):
        group = f['examples'][cid]
        missing = [k for k in fields if k not in group]
        if missing:
          raise UserError(f'{path}: client {cid} lacks {", ".join(missing)} (expected '
                          f'{", ".join(fields)})')
        try:
          out[cid] = convert(f'{path}: client {cid}', {k: group[k][()] for k in fields})
        except UserError:
          raise
        except (OSError, ValueError, TypeError, IndexError, KeyError) as e:
          # a corrupt record (h5py's read errors are OSErrors; a bad shape or byte string)
          raise UserError(f'{path}: client {cid}: cannot read its record '
                          f'({first_line(e)})') from None
      return out
  except UserError:
    raise
  except OSError as e:
    raise UserError(f'cannot read {path} as h5: {first_line(e)}') from None


def read_leaf_split(folder, convert):
  """LEAF's split folder (train/ or test/) of *.json -> {user: convert(where, x, y)}, each
  file's Python lists converted and dropped before the next file is read (LEAF's FEMNIST
  holds tens of gigabytes as Python floats); where is 'PATH: user ID', for convert's
  refusals. A user whose num_samples is not the length of its y, or whose record cannot be
  converted, is one UserError naming the file and the user. A user with no samples is kept
  as an empty client, which `assemble` leaves out (the rule of every reader)."""
  names = sorted(n for n in os.listdir(folder) if n.endswith('.json')) if os.path.isdir(
      folder) else []
  if not names:
    raise UserError(f'{folder} holds no LEAF .json files')
  users = {}
  for name in names:
    path = os.path.join(folder, name)
    try:
      with open(path, encoding='utf-8') as f:
        raw = json.load(f)
    except (OSError, ValueError) as e:
      raise UserError(f'cannot read {path} as LEAF JSON: {e}') from None
    try:
      data = raw['user_data']
      counts = raw.get('num_samples')
      counts = counts if isinstance(counts, list) and len(counts) == len(raw['users']) else None
      for k, uid in enumerate(raw['users']):
        x, y = data[uid]['x'], data[uid]['y']
        where = f'{path}: user {uid}'
        if counts is not None and counts[k] != len(y):
          raise UserError(f'{where}: num_samples says {counts[k]} but y holds {len(y)} '
                          'labels (a truncated or edited file?)')
        try:
          users[uid] = convert(where, x, y)
        except UserError:
          raise
        except (ValueError, TypeError, IndexError, OverflowError) as e:
          raise UserError(f'{where}: cannot read its record ({first_line(e)})') from None
    except (KeyError, TypeError) as e:
      raise UserError(f'{path} is not in LEAF\'s layout ({{"users", "num_samples", '
                      f'"user_data": {{uid: {{"x", "y"}}}}}}): missing {e}') from None
    del raw
  return users


def _pixels_uint8(p):
  return np.clip(np.round(np.asarray(p, np.float64) * 255.0), 0, 255).astype(np.uint8)


def femnist_examples(where, pixels, labels):
  """One FEMNIST record as its file stores it (float pixels [n, 28, 28] or [n, 784] in 0..1,
  labels 0..61) -> (uint8 [n, 28, 28, 1], labels [n]), checked first (common.check_examples:
  labels, NaN, the 0..1 range) so that nothing wrong is clipped or cast away."""
  pixels, labels = np.asarray(pixels), np.asarray(labels).reshape(-1)
  if not len(labels) and not pixels.size:  # an empty client: `assemble` leaves it out
    return np.zeros((0, 28, 28, 1), np.uint8), np.zeros(0, np.int64)
  if pixels.dtype.kind not in 'iuf' or not (
      (pixels.ndim == 3 and pixels.shape[1:] == (28, 28)) or
      (pixels.ndim == 2 and pixels.shape[1] == 784)):
    raise UserError(f'{where}: pixels are {pixels.dtype} {list(pixels.shape)}, not FEMNIST '
                    'images (floats [n, 28, 28], or 784 floats each in LEAF\'s JSON)')
  common.check_examples(where, pixels, labels, FEMNIST_CLASSES, (0.0, 1.0), FEMNIST_PIXELS)
  return _pixels_uint8(pixels).reshape(-1, 28, 28, 1), labels.astype(np.int64)


def femnist_h5(path):
  """One TFF FEMNIST file -> {writer: (uint8 [n, 28, 28, 1], labels [n])}."""
  return read_h5(path, ('pixels', 'label'),
                 lambda where, d: femnist_examples(where, d['pixels'], d['label']))


def femnist_leaf(folder):
  """One LEAF FEMNIST split folder -> {writer: (uint8 [n, 28, 28, 1], labels [n])}."""
  def convert(where, x, y):
    if not len(x) and not len(y):  # a user with no samples: an empty client
      return femnist_examples(where, np.zeros((0, 784)), np.zeros(0, np.int64))
    try:
      x = np.asarray(x, np.float64)
    except (ValueError, TypeError):  # strings (LEAF's Shakespeare), ragged lists
      x = np.zeros(0)
    if x.ndim != 2 or x.shape[1] != 784:
      raise UserError(f'{where}: x are not FEMNIST images (784 floats each)')
    try:
      y = np.asarray(y, np.float64)
    except (ValueError, TypeError):
      raise UserError(f'{where}: y are not class ids 0..{FEMNIST_CLASSES - 1}') from None
    return femnist_examples(where, x, y)
  return read_leaf_split(folder, convert)


def shakespeare_h5(path):
  """One TFF Shakespeare file -> {role: (ids [n, 80], next ids [n])} (LEAF's windows)."""
  def convert(where, d):
    snippets = []
    for k, s in enumerate(np.asarray(d['snippets']).reshape(-1)):
      try:
        snippets.append(s.decode('utf-8') if isinstance(s, bytes) else str(s))
      except UnicodeDecodeError as e:
        raise UserError(f'{where}, snippet {k}: not UTF-8 text ({e.reason} at byte '
                        f'{e.start})') from None
    return windows(char_ids(leaf_text(snippets)))
  return read_h5(path, ('snippets',), convert)


def shakespeare_leaf(folder):
  """One LEAF Shakespeare split folder -> {role: (ids [n, 80], next ids [n])}."""
  def convert(where, xs, ys):
    if len(xs) != len(ys):
      raise UserError(f'{where}: {len(xs)} x but {len(ys)} y (a truncated or edited file?)')
    bad = next((k for k, (s, c) in enumerate(zip(xs, ys)) if not isinstance(s, str) or
                not isinstance(c, str) or len(s) != SEQ_LEN or len(c) != 1), None)
    if bad is not None:
      raise UserError(f'{where}, example {bad}: not LEAF Shakespeare (x: {SEQ_LEN}-character '
                      'strings, y: one character each)')
    x = np.stack([char_ids(s) for s in xs]) if xs else np.zeros((0, SEQ_LEN), np.int32)
    return x, char_ids(''.join(ys))
  return read_leaf_split(folder, convert)


# Hugging Face folders (data/hubfiles.py reads their tables).

def by_client(clients, x, y):
  """One split's rows -> {client: (x, y)}, each client's rows in file order."""
  keys, inverse = np.unique(np.asarray(clients), return_inverse=True)
  inverse = inverse.reshape(-1)
  order = np.argsort(inverse, kind='stable')
  bounds = np.cumsum(np.bincount(inverse, minlength=len(keys)))[:-1]
  return {str(k): (x[rows], y[rows]) for k, rows in zip(keys, np.split(order, bounds))}


def leaf_split(clients, temporal, rng):
  """{client: (x, y)} -> (train, test) as LEAF's split_data.py --by sample splits a client:
  clients with fewer than 2 examples dropped; k = max(1, int(0.9 n)) training examples (1 when
  n = 2); Shakespeare (`temporal`) trains on the first k windows and tests on those from
  k + 79 (no test window overlaps a training one), the others draw k at random (`rng`, one
  draw per client in sorted order); a client left without test examples is dropped."""
  train, test = {}, {}
  for c in sorted(clients):
    x, y = clients[c]
    n = len(y)
    if n < 2:
      continue
    k = 1 if n == 2 else max(1, int(TRAIN_FRACTION * n))
    if temporal:
      tr, te = np.arange(k), np.arange(k + SEQ_LEN - 1, n)
    else:
      tr = np.sort(rng.choice(n, k, replace=False))
      te = np.setdiff1d(np.arange(n), tr)
    if len(tr) and len(te):
      train[c], test[c] = (x[tr], y[tr]), (x[te], y[te])
  return train, test


def _grey(data, where):
  """Encoded image bytes -> uint8 [28, 28] (the PNG's own grey values)."""
  try:
    from PIL import Image  # pylint: disable=g-import-not-at-top  (only hub images need it)
    image = np.asarray(Image.open(io.BytesIO(data)).convert('L'))
  except OSError as e:
    raise UserError(f'{where}: an image does not decode ({e})') from None
  if image.shape != (28, 28):
    raise UserError(f'{where}: an image is {image.shape[1]}x{image.shape[0]}, not FEMNIST\'s '
                    '28x28')
  return image


def femnist_table(table, where):
  """flwrlabs/femnist's columns -> (writer ids, uint8 [n, 28, 28, 1], labels [n])."""
  cols = hubfiles.columns(table, HF_COLUMNS['femnist'], where)
  labels = cols['character']
  if any(not isinstance(v, (int, float)) or isinstance(v, bool) for v in labels):
    k = next(k for k, v in enumerate(labels) if not isinstance(v, (int, float)) or
             isinstance(v, bool))
    raise UserError(f'{where}, client {cols["writer_id"][k]}, row {k}: character '
                    f'{labels[k]!r} is not a class id 0..{FEMNIST_CLASSES - 1}')
  common.check_examples(where, y=np.asarray(labels, np.float64), classes=FEMNIST_CLASSES,
                        clients=cols['writer_id'])
  pictures = hubfiles.image_bytes(cols['image'], where)
  x = np.stack([_grey(b, where) for b in pictures]) if pictures else np.zeros((0, 28, 28))
  return cols['writer_id'], x[..., None].astype(np.uint8), np.asarray(labels, np.int64)


def shakespeare_table(table, where):
  """flwrlabs/shakespeare's columns (x: 80 characters, y: the next one) -> (role ids,
  ids [n, 80], next ids [n])."""
  cols = hubfiles.columns(table, HF_COLUMNS['shakespeare'], where)
  xs, ys = cols['x'], cols['y']
  if any(len(s) != SEQ_LEN for s in xs) or any(len(c) != 1 for c in ys):
    raise UserError(f'{where} is not LEAF Shakespeare (x: {SEQ_LEN}-character strings, y: one '
                    'character each)')
  return cols['character_id'], char_ids(''.join(xs)).reshape(-1, SEQ_LEN), char_ids(''.join(ys))


_HF_TABLE = {'femnist': femnist_table, 'shakespeare': shakespeare_table}


def read_hf(name, folder):
  """A Hugging Face folder of `name` -> ({client: (x, y)} train, test): its own test split
  when it has one, else LEAF's per-client split of its one split (leaf_split, seed
  SPLIT_SEED), as the hub's flwrlabs datasets ship only a training split."""
  tables = hubfiles.read_splits(folder)
  if 'train' not in tables:
    raise UserError(f'{folder} has no training split (its files name {", ".join(tables)})')
  where = f'--dataset={name} --data_dir={folder}'
  train = by_client(*_HF_TABLE[name](tables['train'], f'{where} (train)'))
  if 'test' in tables:
    return train, by_client(*_HF_TABLE[name](tables['test'], f'{where} (test)'))
  return leaf_split(train, name == 'shakespeare', np.random.default_rng(SPLIT_SEED))


# ---------------------------------------------------------------------------------------------
# Assembling a Dataset.

def assemble(name, train, test):
  """{client: (x, y)} of each split -> a validated Dataset whose training examples carry
  their client's id (sorted order of the client ids) in the group column COLUMNS[name];
  clients without examples are left out."""
  clients = sorted(c for c in train if len(train[c][1]))
  if not clients:
    raise UserError(f'{name}: the training files hold no examples')
  held = [c for c in sorted(test) if len(test[c][1])]
  if not held:
    raise UserError(f'{name}: the test files hold no examples')
  x_train = np.concatenate([train[c][0] for c in clients])
  y_train = np.concatenate([train[c][1] for c in clients])
  ids = np.repeat(np.arange(len(clients), dtype=np.int32), [len(train[c][1]) for c in clients])
  x_test = np.concatenate([test[c][0] for c in held])
  y_test = np.concatenate([test[c][1] for c in held])
  number = {c: k for k, c in enumerate(clients + sorted(set(held) - set(clients)))}
  test_ids = np.repeat(np.array([number[c] for c in held], np.int32),
                       [len(test[c][1]) for c in held])
  structure = dict(groups={COLUMNS[name]: ids}, groups_test={COLUMNS[name]: test_ids})
  if name == 'shakespeare':
    ds = common.validate(name, _tokens(x_train), y_train, _tokens(x_test), y_test,
                         vocab_size=len(LETTERS), **structure)
    return ds._replace(num_classes=len(LETTERS))
  return common.validate(name, x_train, y_train, x_test, y_test, **structure)


def chosen(ds, num_clients, seed, partition):
  """`ds` with only the --num_clients clients drawn with --seed (stackoverflow.choose over
  its training clients' numbers), renumbered 0..k-1 in order, in both splits, when
  --partition is natural on its group column and the draw leaves some out; else `ds`."""
  column = COLUMNS.get(ds.name)
  if column is None or partition not in ('natural', f'natural:{column}'):
    return ds
  train_ids = ds.groups[column]
  count = int(train_ids.max()) + 1
  picked = np.asarray(stackoverflow.choose(list(range(count)), num_clients, seed), np.int64)
  if len(picked) == count:
    return ds
  test_ids = (ds.groups_test or {}).get(column)
  if test_ids is None:
    raise UserError(f'--dataset={ds.name}: the imported copy has no test client ids, so '
                    f'--num_clients={num_clients} cannot keep its clients\' test examples; '
                    'import the files again (`fedjax-drift-data import DIR`)')
  renumber = np.full(max(count, int(test_ids.max()) + 1), -1, np.int64)
  renumber[picked] = np.arange(len(picked))
  train, test = renumber[train_ids] >= 0, renumber[test_ids] >= 0
  if not test.any():
    raise UserError(f'--dataset={ds.name}: none of the {len(picked)} clients drawn '
                    f'(--num_clients, --seed) has test examples; choose more clients')
  return ds._replace(
      x_train=ds.x_train[train], y_train=ds.y_train[train], x_test=ds.x_test[test],
      y_test=ds.y_test[test], groups={column: renumber[train_ids[train]].astype(np.int32)},
      groups_test={column: renumber[test_ids[test]].astype(np.int32)})


def layout(folder):
  """'leaf' or 'hf': what a folder holds besides TFF's h5 pair (LEAF's train/ and test/ of
  .json, or LEAF's data/ folder holding them; else a Hugging Face folder's .parquet, .csv or
  .arrow files), with the path to read; None when neither."""
  if os.path.isfile(os.path.join(folder, 'dataset_dict.json')):  # save_to_disk's, not LEAF's
    return 'hf', folder
  for sub in ('', 'data'):
    root = os.path.join(folder, sub) if sub else folder
    if all(os.path.isdir(os.path.join(root, s)) for s in ('train', 'test')) and any(
        n.endswith('.json') for n in os.listdir(os.path.join(root, 'train'))):
      return 'leaf', root
  if hubfiles.data_files(folder):
    return 'hf', folder
  return None, folder


def leaf_kind(folder):
  """'femnist' or 'shakespeare' by the first training file's first x (a list of pixels or a
  string), read from its first 64 KiB; None when it is neither."""
  train = os.path.join(folder, 'train')
  names = sorted(n for n in os.listdir(train) if n.endswith('.json'))
  if not names:
    return None
  with open(os.path.join(train, names[0]), encoding='utf-8', errors='replace') as f:
    head = f.read(1 << 16)
  match = re.search(r'"x"\s*:\s*\[\s*([\["])', head)
  if not match:
    return None
  return 'femnist' if match.group(1) == '[' else 'shakespeare'


_H5 = {'femnist': (FEMNIST_H5, femnist_h5), 'shakespeare': (SHAKESPEARE_H5, shakespeare_h5)}
_LEAF = {'femnist': femnist_leaf, 'shakespeare': shakespeare_leaf}


def read_folder(name, folder):
  """`name`'s Dataset from a folder of TFF's two h5 files, LEAF's train/ and test/, or a
  Hugging Face folder (read_hf)."""
  if not os.path.isdir(folder):
    raise UserError(f'--data_dir={folder} is not a directory')
  files, read = _H5[name]
  if all(os.path.exists(os.path.join(folder, f)) for f in files):
    return assemble(name, *(read(os.path.join(folder, f)) for f in files))
  kind, root = layout(folder)
  if kind == 'leaf':
    return assemble(name, _LEAF[name](os.path.join(root, 'train')),
                    _LEAF[name](os.path.join(root, 'test')))
  if kind == 'hf':
    return assemble(name, *read_hf(name, folder))
  raise UserError(f'--data_dir={folder} holds neither TFF\'s {" + ".join(files)} nor LEAF\'s '
                  'train/ and test/ folders of .json files nor a Hugging Face folder\'s '
                  '.parquet/.csv/.arrow files')


def hf_kind(folder):
  """'femnist' or 'shakespeare' when the first readable data file below a Hugging Face folder
  has flwrlabs' columns for it (read from its schema or header); else None. A folder whose
  data files are all unreadable (a truncated first shard of one) is a UserError naming the
  first of them; a later shard that is unreadable is named when the split is read."""
  if hubfiles.pa is None:
    return None
  failed = None
  for path in hubfiles.data_files(folder):  # the first readable file tells
    try:
      names = set(hubfiles.column_names(path))
    except (OSError, ValueError, UnicodeDecodeError) as e:  # a truncated shard, say
      failed = failed or (path, e)
      continue
    return next((k for k, cols in HF_COLUMNS.items() if set(cols) <= names), None)
  if failed:  # files, none readable: say which, rather than "found no dataset files"
    raise UserError(f'cannot read {failed[0]}: {first_line(failed[1])} (a truncated or '
                    'partial download? fetch that file again)')
  return None


def found_in(dirpath, files, subdirs):
  """[(dataset, reader)] for `fedjax-drift-data import`: TFF's h5 pairs in this folder, a
  LEAF data folder (train/ and test/ of .json) by what its files hold, and a Hugging Face
  folder (a hub repository's root, with its README.md, or save_to_disk's, with its
  dataset_dict.json; not their subfolders) by its columns."""
  found = []
  if {'README.md', 'dataset_dict.json'} & files:
    kind = hf_kind(dirpath)
    if kind:
      found.append((kind, lambda: assemble(kind, *read_hf(kind, dirpath))))
  for name, (pair, _) in _H5.items():
    if all(f in files for f in pair):
      found.append((name, lambda name=name: read_folder(name, dirpath)))
  if {'train', 'test'} <= subdirs:
    try:
      kind = leaf_kind(dirpath)
    except OSError:
      kind = None
    if kind:
      found.append((kind, lambda: assemble(kind, _LEAF[kind](os.path.join(dirpath, 'train')),
                                           _LEAF[kind](os.path.join(dirpath, 'test')))))
  return found


# ---------------------------------------------------------------------------------------------
# Loading and registering.

def load(dataset, data_dir=None, num_clients=0, seed=0, partition='', **_):
  """femnist or shakespeare from --data_dir (read_folder), or the imported copy, with only
  the clients --num_clients draws when --partition is natural (`chosen`)."""
  if data_dir:
    return chosen(read_folder(dataset, data_dir), num_clients, seed, partition)
  arrays = common.load_imported(dataset)
  structure = common.npz_structure(common.imported_path(dataset))
  if dataset == 'shakespeare':  # token data: the alphabet is the vocabulary and the classes
    structure['vocab_size'] = len(LETTERS)
    ds = common.validate(dataset, *arrays, **structure)._replace(num_classes=len(LETTERS))
  else:
    ds = common.validate(dataset, *arrays, **structure)
  return chosen(ds, num_clients, seed, partition)


def _folder_files(dataset, folder):
  files, _ = _H5[dataset]
  kind, root = layout(folder)
  if kind == 'hf':
    return hubfiles.data_files(folder)
  return ([os.path.join(folder, f) for f in files]
          + common.files_under(os.path.join(root, 'train'))
          + common.files_under(os.path.join(root, 'test')))


# The fields `chosen` reads: --num_clients clients drawn with --seed for --partition=natural.
_SHARED = ('num_clients', 'seed', 'partition')
common.register_dataset(
    'femnist', 'FEMNIST by writer (62 classes, 28x28): TFF\'s fed_emnist_{train,test}.h5, '
    'LEAF\'s train/ + test/ JSON, a Hugging Face folder (flwrlabs/femnist), or imported; '
    'group column writer', load, importable=True, shared=_SHARED,
    folder_files=_folder_files, model='cnn_emnist', classes=FEMNIST_CLASSES,
    source='TFF\'s https://storage.googleapis.com/tff-datasets-public/fed_emnist.tar.bz2, '
    'LEAF\'s data from https://github.com/TalwalkarLab/leaf, or '
    'huggingface.co/datasets/flwrlabs/femnist')
common.register_dataset(
    'shakespeare', 'Shakespeare by speaking role, LEAF\'s next-character task (80 symbols): '
    'TFF\'s shakespeare_{train,test}.h5, LEAF\'s JSON, a Hugging Face folder '
    '(flwrlabs/shakespeare), or imported; group column role',
    load, importable=True, shared=_SHARED, folder_files=_folder_files, model='char_lstm',
    classes=len(LETTERS),
    source='TFF\'s https://storage.googleapis.com/tff-datasets-public/shakespeare.tar.bz2, '
    'LEAF\'s data from https://github.com/TalwalkarLab/leaf, or '
    'huggingface.co/datasets/flwrlabs/shakespeare')

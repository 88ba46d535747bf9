"""Text datasets read from the files their publishers distribute, tokenised into arrays.

Readers (each returns `Texts`: the strings and int64 labels of every split):
  ag_news    ag_news_csv.tgz (Xiang Zhang's release: ag_news_csv/train.csv, test.csv,
             classes.txt), or its extracted folder. CSV rows "class index (1-4)", "title",
             "description"; text = title + " " + description and label = index - 1, as the
             TFDS (ag_news_subset) and Hugging Face (ag_news) loaders build them.
  sst5       Stanford's trainDevTestTrees_PTB.zip (trees/train.txt, dev.txt, test.txt), or
             its trees/ folder: one PTB tree per line, "(3 (2 It) (4 ...))"; label = the root's
             sentiment 0..4, text = the leaves joined by spaces; dev.txt is the optional
             validation split (Dataset.x_val).
  text:PATH  a CSV (with a header) or JSONL file with `text` and `label` columns and a `split`
             column (train/test, optionally validation), or a folder with train.csv|jsonl and
             test.csv|jsonl (and optionally validation|valid|dev.csv|jsonl). Integer labels are
             used as they are; other labels become ids 0..C-1 in sorted order of the training
             labels.
  tfds:NAME  text features of a TFDS dataset (data/hub.py): tfds:ag_news_subset.

Tokenisation uses Hugging Face `tokenizers` (`tokenize`): --tokenizer=PATH reads a
tokenizer.json or a WordPiece vocab.txt (or a folder holding one); --tokenizer=auto takes the
--pretrained checkpoint folder's, else trains a WordPiece vocabulary of --vocab_size on the
training texts (`train_wordpiece`, deterministic). Sequences are truncated and padded to
--max_seq_len: x is int32 [N, 2, L], x[:, 0] the token ids and x[:, 1] the attention mask
(1 = real token). Tokenised arrays and trained vocabularies are cached under
$FEDJAX_DRIFT_CACHE (tokenized/, tokenizers/), keyed by content, so a second load is fast.

`fedjax-drift-data import` stores the texts themselves (UTF-8 bytes + offsets, no pickles) in
CACHE/datasets/NAME.npz; loading then tokenises with the run's tokenizer flags.
"""
import csv
import io
import json
import os
import re
import tarfile
import zipfile
import zlib
from typing import NamedTuple, Optional

import numpy as np

from fedjax_drift.data import common
from fedjax_drift.data.tokenization import digest, encode, resolve_tokenizer, texts_digest
from fedjax_drift.errors import UserError, first_line

AG_NEWS_ARCHIVE = 'ag_news_csv.tgz'
AG_NEWS_FOLDER = 'ag_news_csv'
SST5_ARCHIVE = 'trainDevTestTrees_PTB.zip'
SST5_SPLITS = {'train': 'train.txt', 'val': 'dev.txt', 'test': 'test.txt'}
SST5_CLASSES = 5
TEXT_SUFFIXES = ('.csv', '.jsonl')
VAL_NAMES = ('validation', 'valid', 'val', 'dev')
# Bumped when the tokenised arrays' layout changes, so old cache entries are not read.
_CACHE_FORMAT = 1


class Texts(NamedTuple):
  """A text dataset before tokenisation: strings and int64 labels per split (val optional)."""
  train: list
  y_train: np.ndarray
  test: list
  y_test: np.ndarray
  val: Optional[list] = None
  y_val: Optional[np.ndarray] = None

  def splits(self):
    """[(split name, texts, labels)] of the splits present: train, test, then val."""
    out = [('train', self.train, self.y_train), ('test', self.test, self.y_test)]
    return out + ([('val', self.val, self.y_val)] if self.val is not None else [])


# ---------------------------------------------------------------------------------------------
# AG News: ag_news_csv.tgz = ag_news_csv/{train.csv, test.csv, classes.txt, readme.txt}

def _ag_news_rows(stream, where, num_classes):
  """One AG News CSV (a binary stream) -> (texts, labels 0..num_classes-1)."""
  texts, labels = [], []
  reader = csv.reader(io.TextIOWrapper(stream, encoding='utf-8', newline=''))
  try:
    for row in reader:
      if reader.line_num == 1 and row and row[0].strip().lower() == 'class index':
        continue  # the header row of Kaggle's copy of the same files
      if len(row) != 3:
        raise UserError(f'{where} line {reader.line_num}: {len(row)} fields; AG News rows are '
                        '"class index","title","description"')
      if not row[0].strip().isdigit() or not 1 <= int(row[0]) <= num_classes:
        raise UserError(f'{where} line {reader.line_num}: class index {row[0]!r} is not '
                        f'1..{num_classes}')
      texts.append(f'{row[1]} {row[2]}')
      labels.append(int(row[0]) - 1)
  except (UnicodeDecodeError, csv.Error, EOFError, OSError, zlib.error, tarfile.TarError) as e:
    raise UserError(f'cannot read {where} as AG News CSV: {first_line(e)}') from None
  if not texts:
    raise UserError(f'{where} holds no rows')
  return texts, np.asarray(labels, np.int64)


def _ag_news_classes(raw, where):
  try:
    names = [line.strip() for line in raw.decode('utf-8').splitlines() if line.strip()]
  except UnicodeDecodeError:
    raise UserError(f'{where} is not UTF-8 text') from None
  if len(names) < 2:
    raise UserError(f'{where} names {len(names)} classes; AG News\'s classes.txt names 4')
  return len(names)


def _read_ag_news(open_member, where):
  """open_member(name) -> binary stream or None; name in train.csv, test.csv, classes.txt."""
  classes = open_member('classes.txt')
  num_classes = _ag_news_classes(classes.read(), f'{where}/classes.txt') if classes else 4
  out = []
  for name in ('train.csv', 'test.csv'):
    stream = open_member(name)
    if stream is None:
      raise UserError(f'{where} lacks {name} (AG News: {AG_NEWS_FOLDER}/train.csv, test.csv)')
    out += _ag_news_rows(stream, f'{where}/{name}', num_classes)
  return Texts(*out)


def read_ag_news(path):
  """AG News from ag_news_csv.tgz, a folder holding it or ag_news_csv/, or that folder."""
  if os.path.isdir(path):
    for folder in (path, os.path.join(path, AG_NEWS_FOLDER)):
      if os.path.isfile(os.path.join(folder, 'train.csv')):
        def open_member(name, folder=folder):
          file = os.path.join(folder, name)
          return open(file, 'rb') if os.path.isfile(file) else None
        return _read_ag_news(open_member, folder)
    archive = os.path.join(path, AG_NEWS_ARCHIVE)
    if not os.path.isfile(archive):
      raise UserError(f'{path} holds no AG News files ({AG_NEWS_ARCHIVE}, or {AG_NEWS_FOLDER}/ '
                      'with train.csv and test.csv)')
    path = archive
  if not os.path.isfile(path):
    raise UserError(f'AG News file {path} does not exist')
  try:
    with tarfile.open(path, 'r:gz') as tar:
      members = {os.path.basename(m.name): m for m in tar.getmembers() if m.isfile()}
      return _read_ag_news(lambda n: tar.extractfile(members[n]) if n in members else None,
                           path)
  except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
    raise UserError(f'cannot read AG News archive {path}: {first_line(e)}') from None


# ---------------------------------------------------------------------------------------------
# SST-5: trainDevTestTrees_PTB.zip = trees/{train,dev,test}.txt, one PTB tree per line

_TREE_TOKEN = re.compile(r'\(|\)|[^\s()]+')


def parse_tree(line):
  """A PTB sentiment tree '(3 (2 It) (4 (2 works)))' -> (root label, [leaf words]).

  Every node is '(' label children ')' with a label 0..4; a leaf is a node whose one child is
  a word. Raises ValueError saying what is wrong with a malformed line."""
  tokens = _TREE_TOKEN.findall(line)
  if len(tokens) < 4 or tokens[0] != '(':
    raise ValueError('not a tree "(label ...)"')
  leaves, depth, previous = [], 0, None
  for i, token in enumerate(tokens):
    if token == '(':
      depth += 1
    elif token == ')':
      if previous == '(' or previous is None or depth == 0:
        raise ValueError('unbalanced or empty node')
      depth -= 1
      if depth == 0 and i != len(tokens) - 1:
        raise ValueError('text after the tree ends')
    elif previous == '(':
      if not (token.isdigit() and 0 <= int(token) < SST5_CLASSES):
        raise ValueError(f'label {token!r} is not 0..{SST5_CLASSES - 1}')
    else:
      if tokens[i + 1:i + 2] != [')']:
        raise ValueError(f'word {token!r} is not a leaf "(label word)"')
      leaves.append(token)
    previous = token
  if depth:
    raise ValueError('unbalanced parentheses (a truncated line?)')
  if not leaves:
    raise ValueError('a tree without words')
  return int(tokens[1]), leaves


def _sst5_split(raw, where):
  """One trees file's bytes -> (texts, labels)."""
  try:
    lines = raw.decode('utf-8').splitlines()
  except UnicodeDecodeError:
    raise UserError(f'{where} is not UTF-8 text') from None
  texts, labels = [], []
  for number, line in enumerate(lines, 1):
    if not line.strip():
      continue
    try:
      label, leaves = parse_tree(line)
    except ValueError as e:
      raise UserError(f'{where} line {number}: {e}; SST-5 lines are PTB trees '
                      '"(3 (2 It) (4 ...))"') from None
    texts.append(' '.join(leaves))
    labels.append(label)
  if not texts:
    raise UserError(f'{where} holds no trees')
  return texts, np.asarray(labels, np.int64)


def _read_sst5(read_member, where):
  """read_member(file name) -> bytes or None; dev.txt may be missing."""
  splits = {}
  for split, name in SST5_SPLITS.items():
    raw = read_member(name)
    if raw is None and split != 'val':
      raise UserError(f'{where} lacks trees/{name} (SST-5: trees/train.txt, dev.txt, test.txt)')
    splits[split] = _sst5_split(raw, f'{where}/{name}') if raw is not None else (None, None)
  return Texts(*splits['train'], *splits['test'], *splits['val'])


def read_sst5(path):
  """SST-5 from trainDevTestTrees_PTB.zip, a folder holding it or trees/, or trees/ itself."""
  if os.path.isdir(path):
    for folder in (path, os.path.join(path, 'trees')):
      if os.path.isfile(os.path.join(folder, 'train.txt')):
        def read_member(name, folder=folder):
          file = os.path.join(folder, name)
          if not os.path.isfile(file):
            return None
          with open(file, 'rb') as f:
            return f.read()
        return _read_sst5(read_member, folder)
    archive = os.path.join(path, SST5_ARCHIVE)
    if not os.path.isfile(archive):
      raise UserError(f'{path} holds no SST-5 files ({SST5_ARCHIVE}, or trees/ with '
                      'train.txt and test.txt)')
    path = archive
  if not os.path.isfile(path):
    raise UserError(f'SST-5 file {path} does not exist')
  try:
    with zipfile.ZipFile(path) as archive:
      members = {os.path.basename(n): n for n in archive.namelist() if not n.endswith('/')}
      return _read_sst5(lambda n: archive.read(members[n]) if n in members else None, path)
  except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as e:
    raise UserError(f'cannot read SST-5 archive {path}: {first_line(e)}') from None


# ---------------------------------------------------------------------------------------------
# text:PATH: CSV or JSONL with text, label (and split) columns

def _records(path):
  """A CSV (with header) or JSONL file -> [(line number, dict)] rows. A UTF-8 byte-order
  mark is skipped; a NUL byte, a JSONL line that is not an object, and a CSV row with more
  fields than its header are UserErrors naming the line."""
  try:
    with open(path, 'r', encoding='utf-8-sig', newline='') as f:
      if path.endswith('.jsonl'):
        rows = []
        for number, line in enumerate(f, 1):
          if line.strip():
            try:
              row = json.loads(line)
            except json.JSONDecodeError as e:  # its lineno counts within this one line
              raise UserError(f'{path} line {number} is not JSON: {e.msg} (column '
                              f'{e.colno})') from None
            if not isinstance(row, dict):
              raise UserError(f'{path} line {number} is not a JSON object')
            rows.append((number, row))
      else:
        reader = csv.DictReader(f)
        rows = [(reader.line_num, row) for row in reader]
        for number, row in rows:
          if None in row:  # DictReader's key for the fields beyond the header
            raise UserError(f'{path} line {number} has {len(reader.fieldnames) + len(row[None])}'
                            f' fields, its header {len(reader.fieldnames)} (a comma in an '
                            'unquoted text?)')
  except (UnicodeDecodeError, csv.Error, OSError) as e:
    raise UserError(f'cannot read {path}: {first_line(e)}') from None
  for number, row in rows:
    for key, value in row.items():
      if '\0' in str(key) or (isinstance(value, str) and '\0' in value):
        raise UserError(f'{path} line {number} holds a NUL byte (in {key!r}); not a text file?')
  return rows


def _columns(rows, path, columns):
  """{column: [values]} of [(line number, row)]; a row lacking one, or whose text or label
  is not a plain value (a JSON object or list, true/false), is a UserError naming the
  file and line."""
  if not rows:
    raise UserError(f'{path} holds no rows')
  for number, row in rows:
    missing = [c for c in columns if row.get(c) is None]
    if missing:
      raise UserError(f'{path} line {number} lacks {", ".join(missing)} (text files need '
                      f'columns {", ".join(columns)})')
    for c in columns:
      if isinstance(row[c], (dict, list, bool)) or (c == 'text' and not isinstance(row[c], str)):
        raise UserError(f'{path} line {number}: {c} is {json.dumps(row[c])[:40]}, not a '
                        + ('string' if c == 'text' else 'label (an integer or a name)'))
  return {c: [row[c] for _, row in rows] for c in columns} | {
      'line': [number for number, _ in rows]}


def _label_ids(splits, where):
  """{split: raw labels} -> {split: int64 ids}: integers as they are, else the training
  labels' sorted distinct values numbered 0..C-1."""
  as_text = {s: [str(v).strip() for v in values] for s, values in splits.items()}
  if all(re.fullmatch(r'\d+', v) for values in as_text.values() for v in values):
    return {s: np.asarray([int(v) for v in values], np.int64) for s, values in as_text.items()}
  names = sorted(set(as_text['train']))
  index = {n: i for i, n in enumerate(names)}
  for split, values in as_text.items():
    unknown = sorted(set(values) - set(index))
    if unknown:
      raise UserError(f'{where}: {split} label {unknown[0]!r} is not among the training labels')
  return {s: np.asarray([index[v] for v in values], np.int64) for s, values in as_text.items()}


def _split_files(folder):
  """{split: path} of train.*, test.* and a validation file in folder."""
  files = {}
  for split, names in (('train', ('train',)), ('test', ('test',)), ('val', VAL_NAMES)):
    for name in names:
      for suffix in TEXT_SUFFIXES:
        if os.path.isfile(os.path.join(folder, name + suffix)) and split not in files:
          files[split] = os.path.join(folder, name + suffix)
  for split in ('train', 'test'):
    if split not in files:
      raise UserError(f'--dataset=text:{folder}: the folder lacks {split}.csv or {split}.jsonl')
  return files


def read_text_files(path):
  """text:PATH: one file with a split column, or a folder of per-split files -> Texts."""
  if os.path.isdir(path):
    columns = {s: _columns(_records(p), p, ('text', 'label'))
               for s, p in _split_files(path).items()}
  else:
    if not os.path.isfile(path):
      raise UserError(f'--dataset=text:{path}: no such file or folder')
    if not path.endswith(TEXT_SUFFIXES):
      raise UserError(f'--dataset=text:{path}: use a .csv or .jsonl file, or a folder with '
                      'train.csv|jsonl and test.csv|jsonl')
    rows = _columns(_records(path), path, ('text', 'label', 'split'))
    known = ('train', 'test') + VAL_NAMES
    for number, value in zip(rows['line'], rows['split']):
      if str(value).strip().lower() not in known:
        raise UserError(f'{path} line {number} has split {value!r}; the split column says '
                        f'one of {", ".join(known)}')
    columns = {}
    for split, names in (('train', ('train',)), ('test', ('test',)), ('val', VAL_NAMES)):
      keep = [i for i, s in enumerate(rows['split']) if str(s).strip().lower() in names]
      if keep:
        columns[split] = {c: [rows[c][i] for i in keep] for c in ('text', 'label')}
    for split in ('train', 'test'):
      if split not in columns:
        raise UserError(f'{path}: no row has split {split!r} (the split column says train, '
                        'test or validation)')
  labels = _label_ids({s: c['label'] for s, c in columns.items()}, path)
  texts = {s: [str(t) for t in c['text']] for s, c in columns.items()}
  for split in ('train', 'test'):
    if not any(t.strip() for t in texts[split]):  # it would train at chance
      raise UserError(f'{path}: every {split} text is empty')
  return Texts(texts['train'], labels['train'], texts['test'], labels['test'],
               texts.get('val'), labels.get('val'))


# ---------------------------------------------------------------------------------------------
# The import cache: texts as UTF-8 bytes + offsets in CACHE/datasets/NAME.npz

def pack(texts):
  """[str] -> (uint8 UTF-8 bytes of all texts, int64 offsets [N + 1])."""
  encoded = [t.encode('utf-8') for t in texts]
  offsets = np.zeros(len(encoded) + 1, np.int64)
  offsets[1:] = np.cumsum([len(b) for b in encoded])
  return np.frombuffer(b''.join(encoded), np.uint8), offsets


def unpack(data, offsets):
  """The inverse of `pack`."""
  raw = np.asarray(data, np.uint8).tobytes()
  return [raw[offsets[i]:offsets[i + 1]].decode('utf-8') for i in range(len(offsets) - 1)]


def save_imported(name, texts: Texts):
  """Writes `texts` to common.imported_path(name) (text_<split>, offsets_<split>, y_<split>)."""
  arrays = {}
  for split, strings, labels in texts.splits():
    arrays[f'text_{split}'], arrays[f'offsets_{split}'] = pack(strings)
    arrays[f'y_{split}'] = np.asarray(labels, np.int64)
  common.write_npz(common.imported_path(name), **arrays)


def load_imported(name):
  """The Texts that `fedjax-drift-data import` stored for `name`."""
  path = common.imported_path(name)
  if not os.path.exists(path):
    raise UserError(common.needs_files(name, path, name))
  try:
    with np.load(path, allow_pickle=False) as f:
      if 'text_train' not in f:
        raise UserError(f'{path} holds no texts (text_train): import the files again with '
                        f'`fedjax-drift-data import DIR --dataset={name}`')
      out = {}
      for split in ('train', 'test', 'val'):
        if f'text_{split}' in f:
          out[split] = unpack(f[f'text_{split}'], f[f'offsets_{split}'])
          out[f'y_{split}'] = f[f'y_{split}']
  except UserError:
    raise
  except Exception as e:  # pylint: disable=broad-except  (truncated or foreign npz)
    raise UserError(f'cannot read {path} as imported texts: {first_line(e)}') from None
  return Texts(**out)


def found_in(dirpath, files, subdirs):
  """[(cache name, reader)] for the text datasets' files in one folder (files, subdirs: sets)."""
  found = []
  if AG_NEWS_ARCHIVE in files or (os.path.basename(dirpath) == AG_NEWS_FOLDER
                                  and {'train.csv', 'test.csv'} <= files):
    found.append(('ag_news', lambda: read_ag_news(dirpath)))
  if SST5_ARCHIVE in files or (os.path.basename(dirpath) == 'trees'
                               and {'train.txt', 'test.txt'} <= files):
    found.append(('sst5', lambda: read_sst5(dirpath)))
  del subdirs
  return found


def extracted_copies(files):
  """Folder names holding the extracted copy of an archive among `files` (not walked)."""
  archives = {AG_NEWS_ARCHIVE: AG_NEWS_FOLDER, SST5_ARCHIVE: 'trees'}
  return {folder for archive, folder in archives.items() if archive in files}


def read(dataset, data_dir):
  """The Texts of --dataset (ag_news, sst5, text:PATH) from --data_dir or the import cache."""
  if dataset.startswith('text:'):
    return read_text_files(dataset[len('text:'):])
  if not data_dir:
    return load_imported(dataset)
  return read_ag_news(data_dir) if dataset == 'ag_news' else read_sst5(data_dir)


def tokenize(texts: Texts, tokenizer='auto', vocab_size=8000, max_seq_len=128, pretrained=''):
  """Texts -> ({split: int32 [N, 2, L]}, vocab size), cached in CACHE/tokenized/KEY.npz
  (KEY: the texts of every split, the tokenizer's full JSON and max_seq_len)."""
  tok = resolve_tokenizer(tokenizer, pretrained, texts.train, vocab_size)
  size = tok.get_vocab_size(with_added_tokens=True)
  key = digest(_CACHE_FORMAT, digest(*(texts_digest(t) for _, t, _ in texts.splits())),
                digest(tok.to_str()), max_seq_len)[:24]
  path = os.path.join(common.cache_dir(), 'tokenized', f'{key}.npz')
  names = [f'x_{split}' for split, _, _ in texts.splits()]
  if os.path.isfile(path):
    try:
      with np.load(path, allow_pickle=False) as f:
        return {n: f[n] for n in names}, size
    except Exception:  # pylint: disable=broad-except  (a damaged cache entry: tokenise again)
      pass
  arrays = {f'x_{split}': encode(tok, strings, max_seq_len) for split, strings, _ in
            texts.splits()}
  common.write_npz(path, **arrays)
  return arrays, size


def to_dataset(name, texts: Texts, tokenizer='auto', vocab_size=8000, max_seq_len=128,
               pretrained='', **_):
  """Texts -> a validated Dataset of token arrays (vocab_size set, the dataset's own
  validation split in x_val/y_val when it has one)."""
  arrays, size = tokenize(texts, tokenizer, vocab_size, max_seq_len, pretrained)
  ds = common.validate(name, arrays['x_train'], texts.y_train, arrays['x_test'], texts.y_test,
                       vocab_size=size)
  if texts.val is None:
    return ds
  common.check_tokens(name, 'x_val', arrays['x_val'], size)
  y_val = np.asarray(texts.y_val, np.int64)
  if len(y_val) != len(arrays['x_val']) or (len(y_val) and not
                                            0 <= y_val.min() <= y_val.max() < ds.num_classes):
    raise UserError(f'{name}: y_val holds labels outside 0..{ds.num_classes - 1}')
  return ds._replace(x_val=arrays['x_val'], y_val=y_val.astype(np.int32))


def load(dataset, data_dir=None, **options):
  """--dataset=ag_news|sst5|text:PATH -> a validated, tokenised Dataset."""
  return to_dataset(dataset, read(dataset, data_dir), **options)


# The tokenizer flags every text dataset reads (tfds: text datasets too, data/hub.py).
TOKENIZER_READS = ('tokenizer', 'vocab_size', 'max_seq_len')


def _archive_files(dataset, folder):
  """The files ag_news or sst5 may read from a --data_dir folder."""
  if dataset == 'ag_news':
    return ([os.path.join(folder, AG_NEWS_ARCHIVE)]
            + [os.path.join(folder, n) for n in ('train.csv', 'test.csv', 'classes.txt')]
            + common.files_under(os.path.join(folder, AG_NEWS_FOLDER)))
  return ([os.path.join(folder, SST5_ARCHIVE)]
          + [os.path.join(folder, n) for n in SST5_SPLITS.values()]
          + common.files_under(os.path.join(folder, 'trees')))


def _text_files(dataset, data_dir):
  """text:PATH's file, or every file in its folder."""
  del data_dir
  path = dataset[len('text:'):]
  return common.files_under(path) if os.path.isdir(path) else [path]


def _register(name, summary, **how):
  """Registers a text dataset: it reads the tokenizer flags (and --pretrained's tokenizer)."""
  return common.register_dataset(name, summary, load, reads=TOKENIZER_READS,
                                 shared=('pretrained',), model='text_bag', **how).name


# The datasets `fedjax-drift-data import` stores as texts (tokenised when a run loads them).
IMPORTABLE = (
    _register('ag_news', 'AG News, 4 topics (120,000 / 7,600 texts): ag_news_csv.tgz, or '
              'imported; tokenised (--tokenizer, --max_seq_len)',
              importable=True, folder_files=_archive_files,
              source='Xiang Zhang\'s ag_news_csv.tgz from https://drive.google.com/uc?export='
              'download&id=0Bz8a_Dbh9QhbUDNpeUdjb0wxRms, or run --dataset=tfds:ag_news_subset'),
    _register('sst5', 'SST-5, 5 sentiment classes (8,544 / 2,210 sentences, dev = validation): '
              'Stanford\'s trainDevTestTrees_PTB.zip, or imported; tokenised',
              importable=True, folder_files=_archive_files,
              source='trainDevTestTrees_PTB.zip from '
              'https://nlp.stanford.edu/sentiment/trainDevTestTrees_PTB.zip'))
_register('text:', 'a CSV or JSONL file with text, label and split columns, or a folder with '
          'train.csv|jsonl and test.csv|jsonl; tokenised',
          prefix=True, shown='text:PATH', files=_text_files)

"""Readers for the downloaded files of CIFAR-100, Tiny-ImageNet, EMNIST and SVHN.

Each reader takes the downloaded file (or its extracted folder) and returns a dict of numpy
arrays: x_train, y_train, x_test, y_test (images NHWC uint8, labels int64 in the dataset's
canonical order), plus CIFAR-100's y_train_coarse and y_test_coarse. A missing, truncated or
foreign file ends in a one-line UserError naming it.
"""
import contextlib
import io
import os
import tarfile
import zipfile
import zlib

import numpy as np

from fedjax_drift.data import common, formats
from fedjax_drift.errors import UserError, first_line

CIFAR100_LABELS = ('fine', 'coarse')
CIFAR100_NUM = {'fine': 100, 'coarse': 20}
TINY_IMAGENET_SIZE = 64
EMNIST_SPLITS = ('byclass', 'bymerge', 'balanced', 'letters', 'digits', 'mnist')
SVHN_FILES = ('train_32x32.mat', 'test_32x32.mat')


# ---------------------------------------------------------------------------------------------
# CIFAR-100: cifar-100-python.tar.gz = cifar-100-python/{train,test,meta}, Python 2 pickles.

def _cifar100_split(raw, where):
  """One pickled CIFAR-100 split -> (x [N,32,32,3] uint8, fine [N], coarse [N])."""
  try:
    split = formats.load_arrays_pickle(raw)
    data, fine, coarse = split[b'data'], split[b'fine_labels'], split[b'coarse_labels']
    x = np.asarray(data, np.uint8).reshape(-1, 3, 32, 32)  # rows of R, G, B planes
  except Exception as e:  # pylint: disable=broad-except
    raise UserError(f'{where} is not a CIFAR-100 python split: {first_line(e)}') from None
  fine, coarse = np.asarray(fine, np.int64), np.asarray(coarse, np.int64)
  if not len(x) == len(fine) == len(coarse):
    raise UserError(f'{where}: {len(x)} images but {len(fine)} fine and {len(coarse)} coarse '
                    'labels')
  for kind, labels in (('fine', fine), ('coarse', coarse)):
    if len(labels) and not 0 <= labels.min() <= labels.max() < CIFAR100_NUM[kind]:
      raise UserError(f'{where}: {kind} labels outside 0..{CIFAR100_NUM[kind] - 1}')
  return np.ascontiguousarray(x.transpose(0, 2, 3, 1)), fine, coarse


def _check_cifar100_meta(raw, where):
  try:
    meta = formats.load_arrays_pickle(raw)
    counts = len(meta[b'fine_label_names']), len(meta[b'coarse_label_names'])
  except Exception as e:  # pylint: disable=broad-except
    raise UserError(f'{where} is not CIFAR-100\'s meta pickle: {first_line(e)}') from None
  if counts != (100, 20):
    raise UserError(f'{where} names {counts[0]} fine and {counts[1]} coarse classes; '
                    'CIFAR-100 has 100 and 20')


def _cifar100_arrays(read, where):
  """read(name) -> bytes of cifar-100-python/{meta,train,test}; the arrays dict."""
  _check_cifar100_meta(read('meta'), f'{where}:meta')
  x_train, fine_train, coarse_train = _cifar100_split(read('train'), f'{where}:train')
  x_test, fine_test, coarse_test = _cifar100_split(read('test'), f'{where}:test')
  return {'x_train': x_train, 'y_train': fine_train, 'x_test': x_test, 'y_test': fine_test,
          'y_train_coarse': coarse_train, 'y_test_coarse': coarse_test}


def read_cifar100(path):
  """The official `cifar-100-python.tar.gz`, or its extracted `cifar-100-python/` folder.

  Labels are the pickles' own indices: fine 0..99 and coarse 0..19, in the alphabetical order
  of meta's fine_label_names / coarse_label_names (apple=0 ... worm=99). Returns both label
  sets: y_train/y_test (fine) and y_train_coarse/y_test_coarse.
  """
  if os.path.isdir(path):
    def read(name):
      file = os.path.join(path, name)
      if not os.path.isfile(file):
        raise UserError(f'missing {file} (a cifar-100-python folder holds train, test, meta)')
      with open(file, 'rb') as f:
        return f.read()
    return _cifar100_arrays(read, path)
  if not os.path.isfile(path):
    raise UserError(f'missing {path} (the official cifar-100-python.tar.gz)')
  try:
    with tarfile.open(path, 'r:gz') as tar:
      members = {m.name.split('/', 1)[-1]: m for m in tar if m.isfile()
                 and m.name.startswith('cifar-100-python/')}
      def read(name):
        if name not in members:
          raise UserError(f'{path} lacks cifar-100-python/{name} (expected the official '
                          'cifar-100-python.tar.gz)')
        return tar.extractfile(members[name]).read()
      return _cifar100_arrays(read, path)
  except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
    raise UserError(f'cannot read CIFAR-100 tarball {path}: {first_line(e)}') from None


# ---------------------------------------------------------------------------------------------
# Tiny-ImageNet: tiny-imagenet-200.zip = tiny-imagenet-200/{wnids.txt, train/<wnid>/images/
# *.JPEG, val/images/*.JPEG, val/val_annotations.txt, test/images/*.JPEG (unlabelled)}.

class _ZipTree:
  """Members of a zip below the folder that holds `marker` (e.g. tiny-imagenet-200/)."""

  def __init__(self, path, marker):
    self.path = path
    try:
      self.zip = zipfile.ZipFile(path)
      names = self.zip.namelist()
    except (zipfile.BadZipFile, OSError, EOFError) as e:
      raise UserError(f'cannot read {path} as a zip file: {first_line(e)}') from None
    found = [n for n in names if n == marker or n.endswith('/' + marker)]
    if not found:
      raise UserError(f'{path} holds no {marker} (expected the official tiny-imagenet-200.zip)')
    self.prefix = found[0][:-len(marker)]
    self.names = [n[len(self.prefix):] for n in names
                  if n.startswith(self.prefix) and not n.endswith('/')]

  def read(self, name):
    try:
      return self.zip.read(self.prefix + name)
    except KeyError:
      raise UserError(f'{self.path} lacks {self.prefix}{name}') from None
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as e:
      raise UserError(f'cannot read {self.path}:{self.prefix}{name}: {first_line(e)}') from None

  def where(self, name):
    return f'{self.path}:{self.prefix}{name}'

  def close(self):
    self.zip.close()


class _DirTree:
  """Files below a folder, named by their '/'-separated relative paths."""

  def __init__(self, root):
    self.path = root
    self.names = []
    for dirpath, dirs, files in os.walk(root):
      dirs.sort()
      rel = os.path.relpath(dirpath, root).replace(os.sep, '/')
      self.names += [f if rel == '.' else f'{rel}/{f}' for f in files]

  def read(self, name):
    file = os.path.join(self.path, *name.split('/'))
    if not os.path.isfile(file):
      raise UserError(f'missing {file}')
    with open(file, 'rb') as f:
      return f.read()

  def where(self, name):
    return os.path.join(self.path, *name.split('/'))

  def close(self):
    pass


def _tiny_imagenet_tree(path):
  """The tree of tiny-imagenet-200.zip, its extracted folder, or a folder holding either."""
  if os.path.isfile(path):
    return _ZipTree(path, 'wnids.txt')
  for folder in (path, os.path.join(path, 'tiny-imagenet-200')):
    if os.path.isfile(os.path.join(folder, 'wnids.txt')):
      return _DirTree(folder)
  zipped = os.path.join(path, 'tiny-imagenet-200.zip')
  if os.path.isfile(zipped):
    return _ZipTree(zipped, 'wnids.txt')
  raise UserError(f'{path} holds neither tiny-imagenet-200.zip nor the extracted '
                  'tiny-imagenet-200/ (with wnids.txt)')


def _text_lines(tree, name):
  try:
    text = tree.read(name).decode('ascii')
  except UnicodeDecodeError:
    raise UserError(f'{tree.where(name)} is not a text file') from None
  return [line for line in text.splitlines() if line.strip()]


def _tiny_imagenet_examples(tree):
  """([(train member, label)], [(val member, label)]) with labels in wnids.txt's order."""
  wnids = [line.strip() for line in _text_lines(tree, 'wnids.txt')]
  label = {w: i for i, w in enumerate(wnids)}
  if len(label) != len(wnids) or not wnids:
    raise UserError(f'{tree.where("wnids.txt")} must list distinct WordNet ids, one a line')
  by_class = {w: [] for w in wnids}
  for name in tree.names:
    parts = name.split('/')
    if (len(parts) == 4 and parts[0] == 'train' and parts[2] == 'images'
        and parts[3].endswith('.JPEG') and parts[1] in by_class):
      by_class[parts[1]].append(name)
  train = [(n, label[w]) for w in wnids for n in sorted(by_class[w])]
  if not train:
    raise UserError(f'{tree.path} holds no train/<wnid>/images/*.JPEG')
  test = []
  annotations = 'val/val_annotations.txt'
  for row, line in enumerate(_text_lines(tree, annotations)):
    fields = line.split('\t')
    if len(fields) < 2 or fields[1] not in label:
      raise UserError(f'{tree.where(annotations)} line {row + 1} is not "file<TAB>wnid<TAB>'
                      'bbox" with a wnid of wnids.txt')
    test.append((f'val/images/{fields[0]}', label[fields[1]]))
  return train, test


def _decode_into(tree, examples, out, desc):
  """Decodes each (member, label)'s JPEG into out[i] (RGB, 64x64); returns the labels."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  from tqdm import tqdm  # pylint: disable=g-import-not-at-top
  size = out.shape[1:3]
  # disable=None: a bar on a terminal, silent in logs and tests.
  for i, (name, _) in enumerate(tqdm(examples, desc=desc, unit='img', disable=None)):
    try:
      with Image.open(io.BytesIO(tree.read(name))) as image:
        if image.size != (size[1], size[0]):
          raise UserError(f'{tree.where(name)} is {image.size[0]}x{image.size[1]}, not '
                          f'{size[1]}x{size[0]}')
        out[i] = np.asarray(image.convert('RGB'), np.uint8)  # some are greyscale JPEGs
    except (OSError, SyntaxError, ValueError) as e:  # PIL's errors for broken images
      raise UserError(f'cannot decode {tree.where(name)}: {first_line(e)}') from None
  return np.asarray([y for _, y in examples], np.int64)


def read_tiny_imagenet(path):
  """tiny-imagenet-200.zip (or its extracted folder) -> 64x64x3 uint8 train and test.

  Classes are numbered in the order of wnids.txt (as listed, not sorted); training images
  are train/<wnid>/images/*.JPEG in that class order, sorted by name within a class. The
  labelled val/ split (val/val_annotations.txt: file, wnid, box) is the test split, in the
  annotation file's order; the official test/ images have no labels and are left out.
  Greyscale JPEGs become RGB. Images are decoded one at a time into preallocated arrays,
  straight from the zip, so memory holds the result and one image.
  """
  with contextlib.closing(_tiny_imagenet_tree(path)) as tree:
    train, test = _tiny_imagenet_examples(tree)
    shape = (TINY_IMAGENET_SIZE, TINY_IMAGENET_SIZE, 3)
    x_train = np.empty((len(train),) + shape, np.uint8)
    y_train = _decode_into(tree, train, x_train, 'tiny_imagenet train')
    x_test = np.empty((len(test),) + shape, np.uint8)
    y_test = _decode_into(tree, test, x_test, 'tiny_imagenet val')
  return {'x_train': x_train, 'y_train': y_train, 'x_test': x_test, 'y_test': y_test}


# ---------------------------------------------------------------------------------------------
# EMNIST: NIST's gzip.zip = gzip/emnist-<split>-{train,test}-{images-idx3,labels-idx1}-ubyte.gz

def emnist_files(split):
  """The four IDX file names of one EMNIST split: train images, labels, test images, labels."""
  return tuple(f'emnist-{split}-{part}-ubyte.gz' for part in (
      'train-images-idx3', 'train-labels-idx1', 'test-images-idx3', 'test-labels-idx1'))


def emnist_splits_in(names):
  """The EMNIST splits whose train images are among `names` (basenames or zip members)."""
  bases = {n.rsplit('/', 1)[-1] for n in names}
  return [s for s in EMNIST_SPLITS if emnist_files(s)[0] in bases]


def _emnist_opener(path):
  """(open(file name) -> binary file object, where(file name) -> str, close()) for NIST's zip
  or a folder of its files."""
  if os.path.isfile(path):
    try:
      archive = zipfile.ZipFile(path)
      members = {n.rsplit('/', 1)[-1]: n for n in archive.namelist()}
    except (zipfile.BadZipFile, OSError, EOFError) as e:
      raise UserError(f'cannot read {path} as a zip file: {first_line(e)}') from None
    def open_member(name):
      if name not in members:
        raise UserError(f'{path} lacks gzip/{name} (expected NIST\'s EMNIST gzip.zip)')
      return archive.open(members[name])
    return open_member, lambda name: f'{path}:{members.get(name, name)}', archive.close
  folders = [path, os.path.join(path, 'gzip')]
  def where(name):
    return next((os.path.join(f, name) for f in folders if os.path.isfile(os.path.join(f, name))),
                os.path.join(path, name))
  def open_file(name):
    if not os.path.isfile(where(name)):
      raise UserError(f'missing {where(name)} (EMNIST\'s --data_dir holds NIST\'s gzip.zip or '
                      'its gzip/emnist-SPLIT-*-ubyte.gz files)')
    return open(where(name), 'rb')
  return open_file, where, lambda: None


def _emnist_path(path):
  """gzip.zip inside a folder is read as the zip; anything else as given."""
  if os.path.isdir(path) and not emnist_splits_in(os.listdir(path)) and not (
      os.path.isdir(os.path.join(path, 'gzip'))):
    zipped = os.path.join(path, 'gzip.zip')
    if os.path.isfile(zipped):
      return zipped
  return path


def read_emnist(path, split='byclass'):
  """One EMNIST split from NIST's gzip.zip, or a folder of its .gz files (or its gzip/).

  NIST stores each 28x28 image transposed (column-major); they are transposed back so that
  glyphs come out upright, as in MNIST. Labels are NIST's class indices (byclass: digits 0-9,
  then A-Z, then a-z; see emnist-SPLIT-mapping.txt), except `letters`, whose labels 1..26
  (A/a ... Z/z) are shifted to 0..25 so that classes start at 0.
  """
  if split not in EMNIST_SPLITS:
    raise UserError(f'--emnist_split={split} is unknown; use one of {", ".join(EMNIST_SPLITS)}')
  path = _emnist_path(path)
  if not os.path.exists(path):
    raise UserError(f'missing {path} (NIST\'s EMNIST gzip.zip or a folder of its .gz files)')
  open_file, where, close = _emnist_opener(path)
  arrays = []
  try:
    for name, ndim in zip(emnist_files(split), (3, 1, 3, 1)):
      with open_file(name) as f:
        try:
          arrays.append(common.read_idx(f, ndim, where(name)))
        except (zipfile.BadZipFile, zlib.error) as e:
          raise UserError(f'cannot read {where(name)}: {first_line(e)}') from None
  finally:
    close()
  x_train, y_train, x_test, y_test = arrays
  if split == 'letters':
    y_train, y_test = y_train.astype(np.int64) - 1, y_test.astype(np.int64) - 1
  # Transposing the last two axes undoes NIST's column-major storage.
  return {'x_train': np.ascontiguousarray(x_train.transpose(0, 2, 1))[..., None],
          'y_train': y_train.astype(np.int64),
          'x_test': np.ascontiguousarray(x_test.transpose(0, 2, 1))[..., None],
          'y_test': y_test.astype(np.int64)}


# ---------------------------------------------------------------------------------------------
# SVHN: train_32x32.mat and test_32x32.mat (MATLAB v5): X [32, 32, 3, N] uint8, y [N, 1].

def _svhn_mat(path):
  """One SVHN .mat -> (x [N, 32, 32, 3] uint8, y [N] in 0..9; the file's 10 is digit 0)."""
  if not os.path.isfile(path):
    raise UserError(f'missing {path} (SVHN\'s cropped-digit files are '
                    f'{" and ".join(SVHN_FILES)})')
  import scipy.io  # pylint: disable=g-import-not-at-top
  try:
    mat = scipy.io.loadmat(path, variable_names=('X', 'y'))
    x, y = mat['X'], mat['y']
  except Exception as e:  # pylint: disable=broad-except  (scipy raises many kinds)
    raise UserError(f'cannot read {path} as SVHN\'s MATLAB file (X, y): {first_line(e)}') from None
  if x.ndim != 4 or x.shape[:3] != (32, 32, 3) or y.size != x.shape[3]:
    raise UserError(f'{path}: X has shape {x.shape} and y {y.shape}; SVHN\'s are '
                    '[32, 32, 3, N] and [N, 1]')
  y = y.reshape(-1).astype(np.int64)
  if y.size and not 1 <= y.min() <= y.max() <= 10:
    raise UserError(f'{path}: labels outside SVHN\'s 1..10')
  x = np.ascontiguousarray(np.asarray(x, np.uint8).transpose(3, 0, 1, 2))
  return x, np.where(y == 10, 0, y)


def read_svhn(path):
  """SVHN's cropped digits from a folder with train_32x32.mat and test_32x32.mat (the
  extra_32x32.mat set is not used). Labels 0..9 are the digits (the files store 0 as 10)."""
  x_train, y_train = _svhn_mat(os.path.join(path, SVHN_FILES[0]))
  x_test, y_test = _svhn_mat(os.path.join(path, SVHN_FILES[1]))
  return {'x_train': x_train, 'y_train': y_train, 'x_test': x_test, 'y_test': y_test}


# ---------------------------------------------------------------------------------------------
# Loading: --dataset=cifar100, tiny_imagenet, svhn, emnist and emnist_SPLIT (the cache names
# `fedjax-drift-data import` writes: EMNIST's are per split).

EMNIST_NAMES = tuple(f'emnist_{s}' for s in EMNIST_SPLITS)


def emnist_name(dataset, emnist_split='byclass'):
  """The split-specific name (emnist_SPLIT) of --dataset=emnist + --emnist_split, or of
  --dataset=emnist_SPLIT; a second, different split in --emnist_split is a UserError."""
  if dataset == 'emnist':
    split = emnist_split
  else:
    split = dataset[len('emnist_'):]
    if emnist_split not in ('byclass', split):
      raise UserError(f'--dataset={dataset} and --emnist_split={emnist_split} conflict: give '
                      'the split once')
  if split not in EMNIST_SPLITS:
    raise UserError(f'--emnist_split={split} is unknown; use one of {", ".join(EMNIST_SPLITS)}')
  return f'emnist_{split}'


def _cifar100_path(data_dir):
  """--data_dir as the tarball, a folder holding it, or the extracted cifar-100-python/."""
  for path in (data_dir, os.path.join(data_dir, 'cifar-100-python')):
    if os.path.isdir(path) and {'train', 'test', 'meta'} <= set(os.listdir(path)):
      return path
  if os.path.isdir(data_dir):
    return os.path.join(data_dir, 'cifar-100-python.tar.gz')
  return data_dir


def _svhn_dir(data_dir):
  return os.path.dirname(data_dir) if data_dir.endswith('.mat') else data_dir


def read(dataset, data_dir):
  """The arrays dict of `dataset` read in place from --data_dir (emnist: emnist_SPLIT)."""
  if dataset == 'cifar100':
    return read_cifar100(_cifar100_path(data_dir))
  if dataset == 'tiny_imagenet':
    return read_tiny_imagenet(data_dir)
  if dataset == 'svhn':
    return read_svhn(_svhn_dir(data_dir))
  return read_emnist(data_dir, dataset[len('emnist_'):])


def _imported(name, extra=()):
  """The imported cache of `name` as the arrays dict, with the `extra` arrays too."""
  path = common.imported_path(name)
  if name in EMNIST_NAMES[1:] and not os.path.exists(path):  # import takes byclass by default
    raise UserError(common.needs_files(name, path, name))
  arrays = dict(zip(('x_train', 'y_train', 'x_test', 'y_test'), common.load_imported(name)))
  with np.load(path, allow_pickle=False) as f:
    missing = [k for k in extra if k not in f]
    if missing:
      raise UserError(f'{path} lacks {", ".join(missing)}: import the files again with '
                      '`fedjax-drift-data import DIR`')
    arrays.update({k: f[k] for k in extra})
  return arrays


def load(dataset, data_dir=None, cifar100_labels='fine', emnist_split='byclass', **_):
  """A validated Dataset of `dataset` (registered below), from --data_dir or the cache.

  cifar100_labels picks CIFAR-100's fine (100) or coarse (20) labels; emnist_split the EMNIST
  split of --dataset=emnist. The Dataset's name is the --dataset value."""
  name = emnist_name(dataset, emnist_split) if dataset.startswith('emnist') else dataset
  if cifar100_labels not in CIFAR100_LABELS:
    raise UserError(f'--cifar100_labels={cifar100_labels} is unknown; use fine or coarse')
  coarse = name == 'cifar100' and cifar100_labels == 'coarse'
  extra = ('y_train_coarse', 'y_test_coarse') if coarse else ()
  arrays = read(name, data_dir) if data_dir else _imported(name, extra)
  if coarse:
    arrays['y_train'], arrays['y_test'] = arrays['y_train_coarse'], arrays['y_test_coarse']
  return common.validate(dataset, arrays['x_train'], arrays['y_train'], arrays['x_test'],
                         arrays['y_test'])


EMNIST_SOURCE = ('gzip.zip from https://biometrics.nist.gov/cs_links/EMNIST/gzip.zip, or run '
                 '--dataset=tfds:emnist/byclass')
common.register_dataset(
    'cifar100', 'CIFAR-100: cifar-100-python.tar.gz, or imported; --cifar100_labels=fine|coarse',
    load, reads=('cifar100_labels',), importable=True, model='resnet18',
    source='cifar-100-python.tar.gz from '
    'https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz, or run '
    '--dataset=tfds:cifar100')
common.register_dataset(
    'tiny_imagenet', 'Tiny-ImageNet 64x64, 200 classes (val = test): tiny-imagenet-200.zip, '
    'or imported', load, importable=True, model='resnet18',
    source='tiny-imagenet-200.zip from http://cs231n.stanford.edu/tiny-imagenet-200.zip')
common.register_dataset(
    'emnist', 'EMNIST --emnist_split (default byclass, 62 classes), or emnist_SPLIT: NIST\'s '
    'gzip.zip, or imported', load, reads=('emnist_split',), model='cnn_emnist',
    source=EMNIST_SOURCE)
common.register_dataset(
    'svhn', 'SVHN cropped digits 32x32: train_32x32.mat + test_32x32.mat, or imported',
    load, importable=True, model='cnn_cifar',
    source='train_32x32.mat + test_32x32.mat from http://ufldl.stanford.edu/housenumbers/, '
    'or run --dataset=tfds:svhn_cropped')
for _split, _name in zip(EMNIST_SPLITS, EMNIST_NAMES):  # --list shows them as `emnist` only
  common.register_dataset(
      _name, f'EMNIST\'s {_split} split (--dataset=emnist --emnist_split={_split})', load,
      reads=('emnist_split',), importable=True, shown='', model='cnn_emnist',
      source=EMNIST_SOURCE.replace('emnist/byclass', f'emnist/{_split}'))


# ---------------------------------------------------------------------------------------------
# `fedjax-drift-data import DIR`: which of these datasets one folder holds.

def found_in(dirpath, files, subdirs):
  """[(cache name, reader)] for the files of these datasets in one folder (files, subdirs:
  sets of names); the readers return arrays dicts. EMNIST gives one entry per split."""
  join = lambda name: os.path.join(dirpath, name)  # pylint: disable=unnecessary-lambda-assignment
  found = []
  if 'cifar-100-python.tar.gz' in files:
    found.append(('cifar100', lambda: read_cifar100(join('cifar-100-python.tar.gz'))))
  elif os.path.basename(dirpath) == 'cifar-100-python' and {'train', 'test', 'meta'} <= files:
    found.append(('cifar100', lambda: read_cifar100(dirpath)))
  if 'tiny-imagenet-200.zip' in files:
    found.append(('tiny_imagenet', lambda: read_tiny_imagenet(join('tiny-imagenet-200.zip'))))
  elif 'wnids.txt' in files and {'train', 'val'} <= subdirs:
    found.append(('tiny_imagenet', lambda: read_tiny_imagenet(dirpath)))
  emnist_source, splits = None, emnist_splits_in(files)
  if splits:
    emnist_source = dirpath
  elif 'gzip.zip' in files:
    emnist_source, splits = join('gzip.zip'), _zip_emnist_splits(join('gzip.zip'))
  found += [(f'emnist_{s}', lambda s=s: read_emnist(emnist_source, s)) for s in splits]
  if set(SVHN_FILES) & files:  # one of the two alone is refused, naming the other
    found.append(('svhn', lambda: read_svhn(dirpath)))
  return found


def extracted_copies(files):
  """The folder names that hold the extracted copy of an archive among `files` (a set)."""
  archives = {'cifar-100-python.tar.gz': 'cifar-100-python',
              'tiny-imagenet-200.zip': 'tiny-imagenet-200', 'gzip.zip': 'gzip'}
  return {folder for archive, folder in archives.items() if archive in files}


def _zip_emnist_splits(path):
  """The EMNIST splits in NIST's gzip.zip; an unreadable or foreign one counts as byclass,
  so that importing it ends in the reader's error naming the file."""
  try:
    with zipfile.ZipFile(path) as archive:
      return emnist_splits_in(archive.namelist()) or ['byclass']
  except (zipfile.BadZipFile, OSError, EOFError):
    return ['byclass']


def default_imports(found):
  """found without EMNIST's other splits when its default (byclass) is there: the NIST
  download holds six splits (about 1.8 GB as arrays). Returns (kept, skipped names)."""
  names = [name for name, _ in found]
  if 'emnist_byclass' not in names:
    return found, []
  extra = set(EMNIST_NAMES) - {'emnist_byclass'}
  return ([f for f in found if f[0] not in extra],
          [name for name in names if name in extra])

"""Readers for the files people download: CIFAR-10 (python tarball or JPEGs) and USPS.

Each reader returns (x_train, y_train, x_test, y_test) as numpy arrays, images NHWC, and
raises UserError naming the file it cannot read. MNIST-style IDX files are read by
local.read_idx_dir.
"""
import bz2
import io
import os
import pickle
import tarfile

import numpy as np

from fedjax_drift.data import common
from fedjax_drift.errors import UserError

CIFAR10_CLASSES = ('airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse',
                   'ship', 'truck')
CIFAR10_TRAIN_BATCHES = tuple(f'data_batch_{i}' for i in range(1, 6))
_NUMPY_GLOBALS = {('numpy', 'ndarray'), ('numpy', 'dtype'),
                  ('numpy.core.multiarray', '_reconstruct'),
                  ('numpy._core.multiarray', '_reconstruct'),
                  ('numpy.core.multiarray', 'scalar'), ('numpy._core.multiarray', 'scalar'),
                  ('numpy.core.numeric', '_frombuffer'), ('numpy._core.numeric', '_frombuffer'),
                  ('_codecs', 'encode')}


class _ArraysOnly(pickle.Unpickler):
  """Unpickles dicts, lists, bytes and numpy arrays; refuses any other global."""

  def find_class(self, module, name):
    if (module, name) in _NUMPY_GLOBALS:
      return super().find_class(module, name)
    raise pickle.UnpicklingError(f'unexpected object {module}.{name}')


def load_arrays_pickle(raw):
  """Unpickles bytes holding only dicts, lists, bytes and numpy arrays (Python 2 pickles'
  strings come back as bytes); any other object raises pickle.UnpicklingError."""
  return _ArraysOnly(io.BytesIO(raw), encoding='bytes').load()


def _cifar_batch(raw, where):
  """One pickled CIFAR-10 batch -> (x [N,32,32,3] uint8, y [N] int64)."""
  try:
    batch = _ArraysOnly(io.BytesIO(raw), encoding='bytes').load()
    data, labels = batch[b'data'], batch[b'labels']
  except Exception as e:  # pylint: disable=broad-except
    raise UserError(f'{where} is not a CIFAR-10 python batch: {e}') from None
  try:
    x = np.asarray(data, np.uint8)
    labels = np.asarray(labels)
  except (ValueError, TypeError) as e:
    raise UserError(f'{where}: its data or labels are not arrays ({e})') from None
  if x.ndim != 2 or x.shape[1] != 3 * 32 * 32:
    raise UserError(f'{where}: data is {list(x.shape)}, not rows of 3072 bytes (32x32x3); '
                    'a truncated or edited batch?')
  common.check_examples(where, x, labels, classes=10)
  x = x.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
  return np.ascontiguousarray(x), labels.astype(np.int64)


def _cifar_batches(read, where):
  """Concatenates the five train batches and the test batch; read(name) -> bytes."""
  train = [_cifar_batch(read(name), f'{where}:{name}') for name in CIFAR10_TRAIN_BATCHES]
  x_test, y_test = _cifar_batch(read('test_batch'), f'{where}:test_batch')
  return (np.concatenate([x for x, _ in train]), np.concatenate([y for _, y in train]),
          x_test, y_test)


def read_cifar10_python(path):
  """The official `cifar-10-python.tar.gz`, or its extracted `cifar-10-batches-py/`."""
  if os.path.isdir(path):
    def read(name):
      file = os.path.join(path, name)
      if not os.path.exists(file):
        raise UserError(f'missing {file} (a cifar-10-batches-py directory)')
      with open(file, 'rb') as f:
        return f.read()
    return _cifar_batches(read, path)
  try:
    with tarfile.open(path, 'r:gz') as tar:
      members = {os.path.basename(m.name): m for m in tar if m.isfile()}
      def read(name):
        if name not in members:
          raise UserError(f'{path} lacks {name} (expected the official cifar-10-python.tar.gz)')
        return tar.extractfile(members[name]).read()
      return _cifar_batches(read, path)
  except (tarfile.TarError, OSError, EOFError) as e:
    raise UserError(f'cannot read CIFAR-10 tarball {path}: {e}') from None


def cifar10_from_jpegs(items, where):
  """items: (relative path '.../{train,test}/<class>/x.jpg', bytes) -> the four arrays.

  Labels follow the canonical CIFAR-10 order (airplane=0 ... truck=9), not the sorted folder
  names; examples are sorted by path, so the result does not depend on the listing order.
  """
  from PIL import Image  # pylint: disable=g-import-not-at-top
  splits = {'train': [], 'test': []}
  for name, data in items:
    parts = name.replace(os.sep, '/').strip('./').split('/')
    if len(parts) < 3 or parts[-3] not in splits or parts[-2] not in CIFAR10_CLASSES:
      continue
    image = np.asarray(Image.open(io.BytesIO(data)).convert('RGB'), np.uint8)
    splits[parts[-3]].append((name, image, CIFAR10_CLASSES.index(parts[-2])))
  out = []
  for split, examples in splits.items():
    if not examples:
      raise UserError(f'{where} holds no {split}/<class>/*.jpg images')
    examples.sort(key=lambda e: e[0])
    out += [np.stack([e[1] for e in examples]), np.asarray([e[2] for e in examples], np.int64)]
  return tuple(out)


def read_cifar10_jpeg_dir(path):
  """A directory of {train,test}/<class>/*.jpg (the layout of cifar10-jpeg.tar.gz, unpacked)."""
  def items():
    for dirpath, _, files in os.walk(path):
      for file in sorted(files):
        if file.lower().endswith(('.jpg', '.jpeg', '.png')):
          full = os.path.join(dirpath, file)
          with open(full, 'rb') as f:
            yield os.path.relpath(full, path), f.read()
  return cifar10_from_jpegs(items(), path)


def _read_libsvm_bz2(path, num_features=256):
  """LIBSVM's USPS file: 'label i:v ...' with labels 1..10 and v in [-1, 1]."""
  try:
    with bz2.open(path, 'rt') as f:
      lines = [line.split() for line in f if line.strip()]
  except (OSError, EOFError, ValueError) as e:
    raise UserError(f'cannot read {path} as bz2 text: {e}') from None
  x = np.zeros((len(lines), num_features), np.float32)
  y = np.zeros(len(lines), np.int64)
  try:
    for row, tokens in enumerate(lines):
      y[row] = int(float(tokens[0])) - 1
      for token in tokens[1:]:
        index, value = token.split(':')
        x[row, int(index) - 1] = float(value)
  except (ValueError, IndexError) as e:
    raise UserError(f'{path} line {row + 1} is not LIBSVM "label index:value" text: {e}') from None
  # examples are lines: example i is line i + 1 (blank lines aside); labels 1..10 are 0..9 here
  common.check_examples(f'{path} (labels 1..10)', x, y, classes=10, value_range=(-1.0, 1.0),
                        stored='LIBSVM\'s USPS stores values in -1..1')
  return ((x + 1) / 2).reshape(-1, 16, 16), y


def read_usps_libsvm(train_path, test_path):
  """LIBSVM's usps.bz2 and usps.t.bz2 -> 16x16 float32 images in [0, 1], labels 0..9."""
  x_train, y_train = _read_libsvm_bz2(train_path)
  x_test, y_test = _read_libsvm_bz2(test_path)
  return x_train, y_train, x_test, y_test


def read_usps_h5(path):
  """The usps.h5 of Kaggle's USPS copy: train/{data,target}, test/{data,target}."""
  try:
    import h5py  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise UserError(f'reading {path} needs h5py: pip install h5py') from None
  try:
    with h5py.File(path, 'r') as f:
      arrays = [np.asarray(f[split][key]) for split in ('train', 'test')
                for key in ('data', 'target')]
  except (OSError, KeyError) as e:
    raise UserError(f'cannot read {path} as USPS h5 (train/data, train/target, ...): {e}') from None
  x_train, y_train, x_test, y_test = arrays
  for split, x, y in (('train', x_train, y_train), ('test', x_test, y_test)):
    if x.ndim < 1 or x.size != len(x) * 256:
      raise UserError(f'{path}: {split}/data is {list(x.shape)}, not rows of 256 values '
                      '(16x16)')
    common.check_examples(f'{path} {split}/', x, y, classes=10, value_range=(0.0, 1.0),
                          stored='usps.h5 stores pixels as 0..1')
  return (x_train.astype(np.float32).reshape(-1, 16, 16), y_train.astype(np.int64),
          x_test.astype(np.float32).reshape(-1, 16, 16), y_test.astype(np.int64))

"""Small synthetic copies of downloaded dataset files, in their real formats.

Each writer returns the arrays it wrote, (x_train, y_train, x_test, y_test), so a test can
check that an importer reads back exactly them.
"""
import bz2
import gzip
import io
import os
import pickle
import tarfile

import numpy as np

IDX_FILES = ('train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz',
             't10k-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte.gz')
CIFAR10_CLASSES = ('airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse',
                   'ship', 'truck')


def _images(rng, n, shape, classes=10):
  """Labels 0..classes-1 (each present) and uint8 images whose brightness encodes the label."""
  y = np.arange(n) % classes
  rng.shuffle(y)
  x = (y.reshape((-1,) + (1,) * len(shape)) * 20 + rng.integers(0, 10, (n,) + shape))
  return x.astype(np.uint8), y.astype(np.int64)


def _write_idx(path, array):
  header = bytes([0, 0, 8, array.ndim]) + b''.join(int(d).to_bytes(4, 'big')
                                                   for d in array.shape)
  with gzip.open(path, 'wb') as f:
    f.write(header + array.astype(np.uint8).tobytes())


def write_idx_dir(path, n_train=200, n_test=50, seed=0):
  """The four gzipped IDX files of MNIST / Fashion-MNIST, 28x28."""
  os.makedirs(path, exist_ok=True)
  rng = np.random.default_rng(seed)
  arrays = _images(rng, n_train, (28, 28)) + _images(rng, n_test, (28, 28))
  for name, a in zip(IDX_FILES, arrays):
    _write_idx(os.path.join(path, name), a)
  return arrays


def _cifar_pickle(x, y):
  data = x.transpose(0, 3, 1, 2).reshape(len(x), -1)  # rows of R, G, B planes, as CIFAR
  return pickle.dumps({b'batch_label': b'synthetic', b'labels': [int(v) for v in y],
                       b'data': data, b'filenames': [b'x.png'] * len(y)}, protocol=2)


def write_cifar10_python(path, per_batch=20, n_test=20, seed=0, class_ordered=False):
  """cifar-10-python.tar.gz: cifar-10-batches-py/data_batch_1..5 and test_batch (pickles).
  Training examples in random order (as the official file), or with class_ordered class by
  class across the five batches (as a reader of class folders gives them)."""
  rng = np.random.default_rng(seed)
  batches = [_images(rng, per_batch, (32, 32, 3)) for _ in range(5)]
  if class_ordered:
    x, y = (np.concatenate(a) for a in zip(*batches))
    order = np.argsort(y, kind='stable')
    batches = list(zip(np.split(x[order], 5), np.split(y[order], 5)))
  x_test, y_test = _images(rng, n_test, (32, 32, 3))
  names = [f'data_batch_{i}' for i in range(1, 6)] + ['test_batch']
  with tarfile.open(path, 'w:gz') as tar:
    for name, (x, y) in zip(names, batches + [(x_test, y_test)]):
      raw = _cifar_pickle(x, y)
      info = tarfile.TarInfo(f'cifar-10-batches-py/{name}')
      info.size = len(raw)
      tar.addfile(info, io.BytesIO(raw))
  return (np.concatenate([x for x, _ in batches]), np.concatenate([y for _, y in batches]),
          x_test, y_test)


def write_cifar10_jpeg_dir(path, per_class=2):
  """{train,test}/<class>/NNNN.jpg with a flat shade per class (JPEG is lossy)."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  for split in ('train', 'test'):
    for c, cls in enumerate(CIFAR10_CLASSES):
      os.makedirs(os.path.join(path, split, cls), exist_ok=True)
      for k in range(per_class):
        Image.fromarray(np.full((32, 32, 3), 20 * c, np.uint8)).save(
            os.path.join(path, split, cls, f'{k:04d}.jpg'), format='JPEG')


def _write_libsvm_bz2(path, x, y):
  """LIBSVM text, labels 1..10, features in [-1, 1], zeros left out as LIBSVM does."""
  lines = []
  for row, label in zip(x.reshape(len(x), -1), y):
    scaled = row * 2 - 1
    feats = ' '.join(f'{i + 1}:{v:.6f}' for i, v in enumerate(scaled) if v != 0)
    lines.append(f'{int(label) + 1} {feats}\n')
  with bz2.open(path, 'wt') as f:
    f.writelines(lines)


def write_usps_libsvm(path, n_train=60, n_test=20, seed=0):
  """usps.bz2 and usps.t.bz2; returns 16x16 float images in [0, 1] and labels 0..9."""
  os.makedirs(path, exist_ok=True)
  rng = np.random.default_rng(seed)
  out = []
  for name, n in (('usps.bz2', n_train), ('usps.t.bz2', n_test)):
    y = np.arange(n) % 10
    x = np.round(rng.uniform(0, 1, (n, 16, 16)) * 8) / 8  # exact in text, some exact zeros
    x[:, 0, 0] = 0.5  # a feature whose LIBSVM value is 0, so the file leaves it out
    _write_libsvm_bz2(os.path.join(path, name), x, y)
    out += [x.astype(np.float32), y.astype(np.int64)]
  return tuple(out)


def write_downloads(root):
  """A folder as a user might have after downloading: every importable dataset once."""
  return {'mnist': write_idx_dir(os.path.join(root, 'mnist'), seed=1),
          'fashion_mnist': write_idx_dir(os.path.join(root, 'fashion-mnist'), seed=2),
          'cifar10': write_cifar10_python(os.path.join(root, 'cifar-10-python.tar.gz')),
          'usps': write_usps_libsvm(os.path.join(root, 'usps'))}

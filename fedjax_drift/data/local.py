"""Datasets read from local files in their usual formats: the embedded Fashion-MNIST subset,
MNIST and Fashion-MNIST (IDX), CIFAR-10, USPS, and npz:PATH.

Without --data_dir, MNIST, Fashion-MNIST, CIFAR-10 and USPS are read from the copy that
`fedjax-drift-data import` wrote (data/prepare.py). The file formats are parsed by
data/formats.py (CIFAR-10, USPS) and here (IDX).
"""
import gzip
import hashlib
import os
import tarfile
import zlib

from fedjax_drift.data import common, formats
from fedjax_drift.errors import UserError

EMBEDDED_PATH = os.path.join(os.path.dirname(__file__), 'fashion_mnist_small.npz')
IDX_CLASSES = 10  # MNIST's digits, Fashion-MNIST's ten kinds of clothing
IDX_FILES = ('train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz',
             't10k-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte.gz')


# The official files' public MD5s (as their publishers and torchvision list them): of each
# gzipped download and of its decompressed content, which a recompressed copy (a Linux
# distribution's package) keeps. The label files tell the two datasets apart.
IDX_MD5 = {
    'mnist': {
        'train-labels-idx1-ubyte.gz': ('d53e105ee54ea40749a09fcbcd1e9432',
                                       'a25bea736e30d166cdddb491f175f624'),
        't10k-labels-idx1-ubyte.gz': ('ec29112dd5afa0611ce80d1b7f02629c',
                                      '27ae3e4e09519cfbb04c329615203637'),
    },
    'fashion_mnist': {
        'train-labels-idx1-ubyte.gz': ('25c81989df183df01b3e8a0aad5dffbe',
                                       '9018921c3c673c538a1fc5bad174d6f9'),
        't10k-labels-idx1-ubyte.gz': ('bb300cfdad3c16e7a12a480ee83cd310',
                                      '15d484375f8d13e6eb1aabb0c3f46965'),
    },
}


def idx_identity(folder):
  """'mnist' or 'fashion_mnist' when the folder's IDX label files are the official ones
  (IDX_MD5, compressed or not), else None (other files: named by the user or the folder)."""
  digests = {}
  for name in IDX_MD5['mnist']:
    path = os.path.join(folder, name)
    try:
      with open(path, 'rb') as f:
        raw = f.read()
      digests[name] = {hashlib.md5(raw).hexdigest(),
                       hashlib.md5(gzip.decompress(raw)).hexdigest()}
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile):
      return None
  for dataset, files in IDX_MD5.items():
    if all(digests[name] & set(md5s) for name, md5s in files.items()):
      return dataset
  return None


def check_idx_identity(folder, dataset, flag):
  """Refuses `dataset` (mnist or fashion_mnist) for a folder that holds the other one's
  official files."""
  found = idx_identity(folder)
  if found and dataset in IDX_MD5 and found != dataset:
    raise UserError(f'{flag}={dataset}, but {folder} holds the official {found} files (by '
                    f'their checksums); use --dataset={found}')


def read_idx_dir(data_dir):
  """Reads the four gzipped IDX files of an MNIST-style directory."""
  if not os.path.isdir(data_dir):
    raise UserError(f'--data_dir={data_dir} is not a directory')
  paths = [os.path.join(data_dir, name) for name in IDX_FILES]
  for p in paths:
    if not os.path.exists(p):
      raise UserError(f'missing {p} (an MNIST-style --data_dir holds {", ".join(IDX_FILES)})')
  x_train, y_train = common.read_idx(paths[0], 3), common.read_idx(paths[1], 1)
  x_test, y_test = common.read_idx(paths[2], 3), common.read_idx(paths[3], 1)
  for labels, images, y in ((paths[1], paths[0], y_train), (paths[3], paths[2], y_test)):
    if len(y) != len(x_train if images == paths[0] else x_test):
      raise UserError(f'{labels} holds {len(y)} labels but {images} holds '
                      f'{len(x_train if images == paths[0] else x_test)} images')
    common.check_examples(labels, y=y, classes=IDX_CLASSES)  # the pixels are uint8 0..255
  return x_train[..., None], y_train, x_test[..., None], y_test


def _with_channel(x_train, y_train, x_test, y_test):
  if x_train.ndim == 3:
    x_train, x_test = x_train[..., None], x_test[..., None]
  return x_train, y_train, x_test, y_test


def load_cifar10(data_dir):
  """CIFAR-10 from --data_dir: the official python tarball (or its extracted folder), the
  cifar10-jpeg.tar.gz tarball, or a directory of {train,test}/<class>/*.jpg."""
  candidates = [data_dir, os.path.join(data_dir, 'cifar-10-python.tar.gz'),
                os.path.join(data_dir, 'cifar-10-batches-py')]
  for path in candidates:
    if os.path.isfile(path) and path.endswith('cifar-10-python.tar.gz'):
      return formats.read_cifar10_python(path)
    if os.path.isdir(path) and os.path.exists(os.path.join(path, 'test_batch')):
      return formats.read_cifar10_python(path)
  if os.path.isdir(os.path.join(data_dir, 'train')):
    return formats.read_cifar10_jpeg_dir(data_dir)
  return load_cifar10_jpeg(data_dir)


def load_usps(data_dir):
  """USPS from --data_dir: LIBSVM usps.bz2 + usps.t.bz2, usps.h5, or usps.npz (or the file)."""
  if data_dir.endswith('.npz'):
    return common.load_npz(data_dir)
  if data_dir.endswith('.h5'):
    return _with_channel(*formats.read_usps_h5(data_dir))
  libsvm = [os.path.join(data_dir, n) for n in ('usps.bz2', 'usps.t.bz2')]
  if all(os.path.exists(p) for p in libsvm):
    return _with_channel(*formats.read_usps_libsvm(*libsvm))
  if os.path.exists(os.path.join(data_dir, 'usps.h5')):
    return _with_channel(*formats.read_usps_h5(os.path.join(data_dir, 'usps.h5')))
  path = os.path.join(data_dir, 'usps.npz')
  if not os.path.exists(path):
    raise UserError(f'--data_dir={data_dir} holds no USPS files (usps.bz2 + usps.t.bz2, '
                    'usps.h5 or usps.npz)')
  return common.load_npz(path)


def load_cifar10_jpeg(data_dir, cache=True):
  """CIFAR-10 from a tarball of {train,test}/<class>/*.jpg, decoded once and cached as .npz.

  Labels follow the canonical CIFAR-10 order (airplane=0 ... truck=9), not the sorted folder
  names. The cache lives outside the data folder, keyed by the tarball's checksum.
  cache=False decodes without reading or writing that cache (`fedjax-drift-data import` keeps
  its own copy, datasets/cifar10.npz: a second one would double the ~185 MB).
  """
  tar_path = data_dir
  if os.path.isdir(data_dir):
    tar_path = os.path.join(data_dir, 'cifar10-jpeg.tar.gz')
  if not os.path.exists(tar_path):
    raise UserError(f'missing {tar_path} (--dataset=cifar10 expects cifar10-jpeg.tar.gz '
                    'in --data_dir)')
  digest = hashlib.sha256()
  with open(tar_path, 'rb') as f:
    for chunk in iter(lambda: f.read(1 << 20), b''):
      digest.update(chunk)
  cache = cache and os.path.join(common.cache_dir(), f'cifar10-{digest.hexdigest()[:16]}.npz')
  if cache and os.path.exists(cache):
    return common.load_npz(cache)
  try:
    with tarfile.open(tar_path, 'r:gz') as tar:
      items = ((m.name, tar.extractfile(m).read()) for m in tar
               if m.isfile() and m.name.endswith('.jpg'))
      arrays = formats.cifar10_from_jpegs(items, tar_path)
  except (tarfile.TarError, OSError, EOFError) as e:
    raise UserError(f'cannot read CIFAR-10 tarball {tar_path}: {e}') from None
  out = dict(zip(('x_train', 'y_train', 'x_test', 'y_test'), arrays))
  if not cache:
    return arrays
  common.write_npz(cache, **out)
  return out['x_train'], out['y_train'], out['x_test'], out['y_test']


# ---------------------------------------------------------------------------------------------
# Loading and registering: each loader takes (dataset, data_dir, **options) and returns a
# validated Dataset named by the --dataset value.

def load_embedded(dataset, data_dir=None, **_):
  """The Fashion-MNIST subset shipped in the package (--data_dir is not read)."""
  del data_dir
  return common.validate(dataset, *common.load_npz(EMBEDDED_PATH))


def load_file_npz(dataset, data_dir=None, **_):
  """npz:PATH: its four arrays and the optional structure arrays (common.npz_structure)."""
  del data_dir
  path = dataset[len('npz:'):]
  arrays = common.load_npz(path)
  return common.validate(dataset, *arrays, **common.npz_structure(path))


def _imported_or(dataset, data_dir, read):
  """read(data_dir)'s arrays, or without --data_dir the imported copy with its structure."""
  if data_dir:
    return common.validate(dataset, *read(data_dir))
  arrays = common.load_imported(dataset)
  return common.validate(dataset, *arrays, **common.npz_structure(common.imported_path(dataset)))


def load_idx(dataset, data_dir=None, **_):
  """mnist or fashion_mnist: the four IDX files in --data_dir (the other dataset's official
  files are refused), or the imported copy."""
  if data_dir:
    check_idx_identity(data_dir, dataset, '--dataset')
  return _imported_or(dataset, data_dir, read_idx_dir)


def load_cifar10_dataset(dataset, data_dir=None, **_):
  """cifar10 from --data_dir (see load_cifar10), or the imported copy."""
  return _imported_or(dataset, data_dir, load_cifar10)


def load_usps_dataset(dataset, data_dir=None, **_):
  """usps from --data_dir (see load_usps), or the imported copy."""
  return _imported_or(dataset, data_dir, load_usps)


def _idx_files(dataset, data_dir):
  """The IDX files in --data_dir (a folder by rule), or the imported copy."""
  if not data_dir:
    return [common.imported_path(dataset)]
  return [os.path.join(data_dir, n) for n in IDX_FILES]


def _cifar10_files(dataset, folder):
  del dataset
  return ([os.path.join(folder, n) for n in ('cifar-10-python.tar.gz', 'cifar10-jpeg.tar.gz')]
          + common.files_under(os.path.join(folder, 'cifar-10-batches-py'))
          + common.files_under(os.path.join(folder, 'train'))
          + common.files_under(os.path.join(folder, 'test')))


def _usps_files(dataset, folder):
  del dataset
  return [os.path.join(folder, n) for n in ('usps.bz2', 'usps.t.bz2', 'usps.h5', 'usps.npz')]


common.register_dataset(
    'embedded', 'Fashion-MNIST subset shipped in the package: 6,000 train / 1,000 test, 28x28',
    load_embedded, files=lambda dataset, data_dir: [EMBEDDED_PATH])
common.register_dataset(
    'mnist', 'MNIST: --data_dir with the four IDX .gz files, or imported once',
    load_idx, importable=True, files=_idx_files, classes=10,
    source='train-images-idx3-ubyte.gz and its three siblings from '
    'http://yann.lecun.com/exdb/mnist/ (mirror https://ossci-datasets.s3.amazonaws.com/'
    'mnist/), or run --dataset=tfds:mnist')
common.register_dataset(
    'fashion_mnist', 'Fashion-MNIST: --data_dir with the four IDX .gz files, or imported once',
    load_idx, importable=True, files=_idx_files, classes=10,
    source='train-images-idx3-ubyte.gz and its three siblings from '
    'https://github.com/zalandoresearch/fashion-mnist#get-the-data, or run '
    '--dataset=tfds:fashion_mnist')
common.register_dataset(
    'cifar10', 'CIFAR-10: cifar-10-python.tar.gz or {train,test}/<class>/*.jpg, or imported',
    load_cifar10_dataset, importable=True, folder_files=_cifar10_files, model='cnn_cifar',
    classes=10, source='cifar-10-python.tar.gz from '
    'https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz, or run '
    '--dataset=tfds:cifar10')
common.register_dataset(
    'usps', 'USPS 16x16 digits: usps.bz2 + usps.t.bz2 (LIBSVM), usps.h5 or usps.npz, or imported',
    load_usps_dataset, importable=True, folder_files=_usps_files, classes=10,
    source='usps.bz2 + usps.t.bz2 from '
    'https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/multiclass.html#usps')
def _npz_model(dataset) -> str:
  """npz:PATH's usual --model: cnn_cifar for 32x32x3 images (cnn_mnist, the default, is
  sized for 28x28x1), else '' (the default)."""
  shape = common.npz_shape(dataset[len('npz:'):], 'x_train')
  return 'cnn_cifar' if shape is not None and tuple(shape[1:]) == (32, 32, 3) else ''


common.register_dataset(
    'npz:', 'any .npz with x_train, y_train, x_test, y_test (optional d_train, d_test, '
    'domain_names, <column>_train; x_val, y_val: its own validation split; '
    'vocab_size for int32 token data [N, 2, L])',
    load_file_npz, prefix=True, shown='npz:PATH', model=_npz_model,
    files=lambda dataset, data_dir: [dataset[len('npz:'):]])

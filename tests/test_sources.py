"""Dataset loaders: local IDX / npz / CIFAR JPEG files, TFDS (mocked), and their errors."""
import gzip
import io
import os
import tarfile

import numpy as np
import pytest

from fedjax_drift import registry
from fedjax_drift.data import sources
from fedjax_drift.errors import UserError


def _write_idx(path, array):
  header = bytes([0, 0, 8, array.ndim]) + b''.join(int(d).to_bytes(4, 'big') for d in array.shape)
  with gzip.open(path, 'wb') as f:
    f.write(header + array.astype(np.uint8).tobytes())


@pytest.fixture
def idx_dir(tmp_path):
  rng = np.random.default_rng(0)
  arrays = [rng.integers(0, 256, (20, 28, 28)), rng.integers(0, 10, 20),
            rng.integers(0, 256, (8, 28, 28)), rng.integers(0, 10, 8)]
  for name, a in zip(sources.IDX_FILES, arrays):
    _write_idx(tmp_path / name, a)
  return tmp_path, arrays


def test_idx_directory(idx_dir):
  path, arrays = idx_dir
  ds = sources.load('mnist', str(path))
  assert ds.x_train.shape == (20, 28, 28, 1) and ds.x_train.dtype == np.uint8
  np.testing.assert_array_equal(ds.x_train[..., 0], arrays[0])
  np.testing.assert_array_equal(ds.y_test, arrays[3])


def test_idx_truncated_and_missing(idx_dir):
  path, _ = idx_dir
  raw = gzip.open(path / sources.IDX_FILES[0]).read()
  with gzip.open(path / sources.IDX_FILES[0], 'wb') as f:
    f.write(raw[:-100])
  with pytest.raises(UserError, match='truncated'):
    sources.load('fashion_mnist', str(path))
  os.remove(path / sources.IDX_FILES[1])
  with pytest.raises(UserError, match='missing'):
    sources.load('mnist', str(path))
  with pytest.raises(UserError, match='--data_dir'):
    sources.load('mnist', None)


def test_npz_float_features_unchanged_uint8_kept(tmp_path):
  x = np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32)
  np.savez(tmp_path / 'f.npz', x_train=x, y_train=np.arange(10) % 2, x_test=x[:3],
           y_test=np.array([0, 1, 0]))
  ds = sources.load(f'npz:{tmp_path / "f.npz"}')
  np.testing.assert_array_equal(ds.x_train, x)
  assert ds.num_classes == 2
  img = np.random.default_rng(0).integers(0, 256, (10, 5, 5)).astype(np.uint8)
  np.savez(tmp_path / 'u.npz', x_train=img, y_train=np.arange(10) % 3, x_test=img[:2],
           y_test=np.array([0, 2]))
  ds = sources.load(f'npz:{tmp_path / "u.npz"}')
  assert ds.x_train.shape == (10, 5, 5, 1) and ds.x_train.dtype == np.uint8


@pytest.mark.parametrize('bad,match', [
    (dict(x_train=np.full((4, 2), np.nan, np.float32)), 'NaN'),
    (dict(y_train=np.array([0, 1, -1, 0])), 'labels must be >= 0'),
    (dict(y_train=np.array([0, 1, 0])), 'does not match'),
    (dict(x_test=np.zeros((2, 3), np.float32)), 'shape'),
    (dict(y_test=np.array([0, 7])), r'stray labels\? 7 \(0 train, 1 test\)'),
    (dict(y_test=np.array([0, 2])), 'outside the training labels'),
    (dict(x_train=np.zeros((4, 2), np.int64)), 'dtype'),
])
def test_npz_bad_content(tmp_path, bad, match):
  arrays = dict(x_train=np.zeros((4, 2), np.float32), y_train=np.array([0, 1, 0, 1]),
                x_test=np.zeros((2, 2), np.float32), y_test=np.array([0, 1]))
  arrays.update(bad)
  np.savez(tmp_path / 'b.npz', **arrays)
  with pytest.raises(UserError, match=match):
    sources.load(f'npz:{tmp_path / "b.npz"}')


def test_npz_missing_truncated_and_incomplete(tmp_path):
  with pytest.raises(UserError, match='does not exist'):
    sources.load(f'npz:{tmp_path / "nope.npz"}')
  np.savez(tmp_path / 'a.npz', x_train=np.zeros((2, 2)))
  with pytest.raises(UserError, match='lacks arrays'):
    sources.load(f'npz:{tmp_path / "a.npz"}')
  raw = open(tmp_path / 'a.npz', 'rb').read()
  open(tmp_path / 't.npz', 'wb').write(raw[:len(raw) // 2])
  with pytest.raises(UserError, match='cannot read'):
    sources.load(f'npz:{tmp_path / "t.npz"}')


def test_unknown_dataset():
  with pytest.raises(UserError, match='--dataset=nope'):
    sources.load('nope')


def test_embedded_is_balanced_real_data():
  ds = sources.load('embedded')
  assert ds.x_train.shape == (6000, 28, 28, 1) and ds.x_train.dtype == np.uint8
  assert np.all(np.bincount(ds.y_train) == 600) and np.all(np.bincount(ds.y_test) == 100)
  assert os.path.getsize(sources.EMBEDDED_PATH) < 5e6


def test_cifar10_jpeg_tarball_canonical_labels_and_cache(tmp_path, monkeypatch):
  from PIL import Image
  monkeypatch.setenv('FEDJAX_DRIFT_CACHE', str(tmp_path / 'cache'))
  tar_path = tmp_path / 'cifar10-jpeg.tar.gz'
  with tarfile.open(tar_path, 'w:gz') as tar:
    for split, n in (('train', 2), ('test', 1)):
      for cls in ('truck', 'airplane', 'cat'):
        for k in range(n):
          buf = io.BytesIO()
          shade = 20 * sources.CIFAR10_CLASSES.index(cls)
          Image.fromarray(np.full((32, 32, 3), shade, np.uint8)).save(buf, format='JPEG')
          info = tarfile.TarInfo(f'cifar10/{split}/{cls}/{k:04d}.jpg')
          info.size = len(buf.getvalue())
          tar.addfile(info, io.BytesIO(buf.getvalue()))
  ds = sources.load('cifar10', str(tmp_path))
  assert ds.x_train.shape == (6, 32, 32, 3) and ds.x_test.shape == (3, 32, 32, 3)
  assert sorted(set(ds.y_train.tolist())) == [0, 3, 9]  # airplane, cat, truck
  for x, y in zip(ds.x_train, ds.y_train):  # labels travel with their own image
    assert abs(int(x.mean()) - 20 * int(y)) <= 3
  assert len(os.listdir(tmp_path / 'cache')) == 1
  again = sources.load('cifar10', str(tmp_path))  # from the cache
  np.testing.assert_array_equal(again.x_train, ds.x_train)


def test_tfds_mock_data():
  import tensorflow_datasets as tfds
  with tfds.testing.mock_data(num_examples=12, policy=tfds.testing.MockPolicy.USE_CODE):
    ds = sources.load('tfds:mnist')
  assert ds.x_train.shape == (12, 28, 28, 1) and ds.x_train.dtype == np.uint8
  assert len(ds.y_test) == 12


def test_tests_never_see_the_users_cache(tmp_path):
  """The autouse hermetic fixture (conftest.py): each test has its own empty cache and home,
  so a user's imported MNIST cannot satisfy `sources.load('mnist', None)` (issue 25)."""
  cache = os.environ['FEDJAX_DRIFT_CACHE']
  assert str(tmp_path.parent.parent) in cache or 'hermetic' in cache
  assert not os.path.exists(sources.imported_path('mnist'))
  assert os.path.expanduser('~') == os.environ['HOME'] and 'hermetic' in os.environ['HOME']


@pytest.mark.parametrize('dataset', sorted(
    e.name for e in registry.entries('dataset').values()
    if e.info.importable and e.name != 'emnist_byclass') + ['emnist'])
def test_every_missing_import_names_its_files_and_source(dataset):
  """Issue 45 item 4: a run of an imported dataset without its files names the files and
  where to get them (CIFAR-10, MNIST, Fashion-MNIST had none), and the TFDS name where one
  exists; `fedjax-drift-data --help` lists the same sources."""
  with pytest.raises(UserError) as e:
    sources.load(dataset)
  message = str(e.value)
  assert '\n' not in message and 'fedjax-drift-data import DIR' in message
  assert '; get ' in message and ' from http' in message
  tfds = {'mnist': 'tfds:mnist', 'fashion_mnist': 'tfds:fashion_mnist', 'cifar10': 'tfds:cifar10',
          'cifar100': 'tfds:cifar100', 'svhn': 'tfds:svhn_cropped'}
  if dataset in tfds:
    assert f'--dataset={tfds[dataset]}' in message


def test_data_help_names_every_source(capsys):
  from fedjax_drift.data import prepare  # pylint: disable=import-outside-toplevel
  with pytest.raises(SystemExit):
    prepare.main(['--help'])
  out = capsys.readouterr().out
  for name in ('mnist', 'fashion_mnist', 'cifar10'):
    assert any(line.split()[:1] == [name] and 'http' in line for line in out.splitlines())

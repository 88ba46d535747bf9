"""CIFAR-100, Tiny-ImageNet, EMNIST and SVHN from their official download layouts: read in
place with --data_dir, imported with `fedjax-drift-data import` then loaded from the cache,
and bad files refused in one line naming the file."""
import gzip
import os
import subprocess
import sys
import tarfile
import warnings
import zipfile

import numpy as np
import pytest

import layouts
from fedjax_drift.data import prepare, sources
from fedjax_drift.errors import UserError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _imported(directory, *args):
  """Imports `directory` through the CLI entry point; returns its stdout lines."""
  assert prepare.main(['import', str(directory), *args]) == 0


# ---------------------------------------------------------------------------------------------
# CIFAR-100

def _check_cifar100(ds, labels='fine'):
  fine_train = np.repeat(np.arange(100), 2)  # class-major, as the writer lays them out
  assert ds.x_train.shape == (200, 32, 32, 3) and ds.x_train.dtype == np.uint8
  for i in (0, 1, 57, 199):
    np.testing.assert_array_equal(ds.x_train[i], layouts.cifar100_image(fine_train[i], i % 2))
  np.testing.assert_array_equal(ds.x_test[42], layouts.cifar100_image(42, 0))
  coarse = np.asarray(layouts.CIFAR100_COARSE_OF_FINE)
  expect = fine_train if labels == 'fine' else coarse[fine_train]
  np.testing.assert_array_equal(ds.y_train, expect)
  np.testing.assert_array_equal(ds.y_test, np.arange(100) if labels == 'fine' else coarse)
  assert ds.num_classes == (100 if labels == 'fine' else 20)


def test_cifar100_in_place_imported_fine_and_coarse(tmp_path, capsys):
  tar = layouts.write_cifar100_tar(str(tmp_path / 'dl'))
  _check_cifar100(sources.load('cifar100', str(tmp_path / 'dl')))
  _check_cifar100(sources.load('cifar100', tar, cifar100_labels='coarse'), 'coarse')
  with tarfile.open(tar) as t:
    t.extractall(tmp_path / 'extracted', filter='data')
  _check_cifar100(sources.load('cifar100', str(tmp_path / 'extracted')))
  _imported(tmp_path / 'dl')
  assert capsys.readouterr().out.startswith('cifar100: 200 train / 100 test, 32x32x3 uint8')
  _check_cifar100(sources.load('cifar100'))
  _check_cifar100(sources.load('cifar100', cifar100_labels='coarse'), 'coarse')
  with np.load(sources.imported_path('cifar100')) as f:  # the cache keeps both label sets
    assert {'y_train_coarse', 'y_test_coarse'} <= set(f.files)
  _imported(tmp_path / 'extracted')  # the extracted folder is found too
  _check_cifar100(sources.load('cifar100', cifar100_labels='coarse'), 'coarse')
  with tarfile.open(tar) as t:  # beside its archive, the extracted copy is not read again
    t.extractall(tmp_path / 'dl', filter='data')
  assert [name for name, _ in prepare.find(str(tmp_path / 'dl'))] == ['cifar100']


def test_cifar100_pickles_may_hold_only_arrays(tmp_path):
  raw = layouts._python2_pickle({b'data': os.system})  # pylint: disable=protected-access
  folder = tmp_path / 'cifar-100-python'
  folder.mkdir()
  for name in ('meta', 'train', 'test'):
    (folder / name).write_bytes(raw)
  with pytest.raises(UserError, match=r'cifar-100-python:meta is not CIFAR-100.*posix\.system'):
    sources.load('cifar100', str(folder))


# ---------------------------------------------------------------------------------------------
# Tiny-ImageNet

def _check_tiny(ds):
  assert ds.x_train.shape == (8, 64, 64, 3) and ds.x_test.shape == (4, 64, 64, 3)
  np.testing.assert_array_equal(ds.y_train, np.repeat(np.arange(4), 2))  # wnids.txt order
  np.testing.assert_array_equal(ds.y_test, np.arange(4))  # val_annotations.txt
  for x, y in list(zip(ds.x_train, ds.y_train))[:6] + list(zip(ds.x_test, ds.y_test)):
    colour = np.asarray(layouts.tiny_imagenet_colour(int(y)))
    assert np.abs(x.reshape(-1, 3).mean(0) - colour).max() < 4  # JPEG is lossy
  grey = ds.x_train[6]  # the greyscale JPEG, widened to RGB
  assert (grey[..., 0] == grey[..., 1]).all() and (grey[..., 1] == grey[..., 2]).all()


def test_tiny_imagenet_zip_folder_and_import(tmp_path, capsys):
  path = layouts.write_tiny_imagenet_zip(str(tmp_path / 'dl'), classes=4)
  wnids = layouts.TINY_IMAGENET_WNIDS[:4]
  assert list(wnids) != sorted(wnids)  # so the test tells wnids.txt order from sorted order
  _check_tiny(sources.load('tiny_imagenet', str(tmp_path / 'dl')))
  _check_tiny(sources.load('tiny_imagenet', path))
  with zipfile.ZipFile(path) as z:
    z.extractall(tmp_path / 'extracted')
  _check_tiny(sources.load('tiny_imagenet', str(tmp_path / 'extracted')))
  _imported(tmp_path / 'extracted')
  assert capsys.readouterr().out.startswith('tiny_imagenet: 8 train / 4 test, 64x64x3 uint8')
  _check_tiny(sources.load('tiny_imagenet'))
  os.remove(sources.imported_path('tiny_imagenet'))
  _imported(tmp_path / 'dl')
  _check_tiny(sources.load('tiny_imagenet'))


# ---------------------------------------------------------------------------------------------
# EMNIST

def _check_emnist(ds, classes):
  labels = np.repeat(np.arange(classes), 2)
  np.testing.assert_array_equal(ds.y_train, labels)
  np.testing.assert_array_equal(ds.y_test, np.arange(classes))
  assert ds.x_train.shape == (2 * classes, 28, 28, 1) and ds.num_classes == classes
  for i in (0, 3, 2 * classes - 1):
    np.testing.assert_array_equal(ds.x_train[i, ..., 0], layouts.emnist_image(labels[i], i % 2))


def test_emnist_glyphs_come_out_upright(tmp_path):
  """NIST stores images transposed; an 'L' must read as an L: stroke left, foot at the bottom."""
  path = layouts.write_emnist_zip(str(tmp_path), 'digits')
  x = sources.load('emnist', path, emnist_split='digits').x_train[0, ..., 0]
  column, row = (x > 0).sum(0), (x > 0).sum(1)
  assert column.argmax() < 14 and row.argmax() > 14  # the long stroke is left, the foot low
  assert x[4:20, 5:8].all() and not x[4:20, 20:].any()


def test_emnist_splits_letters_shift_and_import(tmp_path, capsys):
  path = layouts.write_emnist_zip(str(tmp_path / 'dl'), ('byclass', 'letters'))
  _check_emnist(sources.load('emnist', str(tmp_path / 'dl')), 62)
  _check_emnist(sources.load('emnist_letters', path), 26)  # NIST's 1..26 -> 0..25
  _check_emnist(sources.load('emnist', path, emnist_split='letters'), 26)
  with pytest.raises(UserError, match='--emnist_split=digits conflict'):
    sources.load('emnist_letters', path, emnist_split='digits')
  with zipfile.ZipFile(path) as z:  # the .gz files, extracted: folder or its gzip/
    z.extractall(tmp_path / 'extracted')
  _check_emnist(sources.load('emnist_letters', str(tmp_path / 'extracted')), 26)
  _check_emnist(sources.load('emnist', str(tmp_path / 'extracted' / 'gzip')), 62)
  _imported(tmp_path / 'dl')  # by default only the byclass split
  out = capsys.readouterr().out
  assert 'emnist_byclass: 124 train / 62 test, 28x28x1 uint8' in out
  assert 'emnist_letters: found, not imported (import it with --dataset=emnist_letters)' in out
  _check_emnist(sources.load('emnist'), 62)
  with pytest.raises(UserError, match='fedjax-drift-data import DIR --dataset=emnist_letters'):
    sources.load('emnist', emnist_split='letters')
  _imported(tmp_path / 'extracted', '--dataset=emnist_letters')
  _check_emnist(sources.load('emnist', emnist_split='letters'), 26)
  _check_emnist(sources.load('emnist_letters'), 26)


# ---------------------------------------------------------------------------------------------
# SVHN

def _check_svhn(ds):
  digits = np.arange(20) % 10
  np.testing.assert_array_equal(ds.y_train, digits)  # the files' 10 is digit 0
  np.testing.assert_array_equal(ds.y_test, np.arange(10))
  for i in (0, 7, 19):
    np.testing.assert_array_equal(ds.x_train[i], layouts.svhn_image(digits[i], i // 10))


def test_svhn_in_place_and_imported(tmp_path, capsys):
  folder = layouts.write_svhn_mat(str(tmp_path / 'dl'))
  _check_svhn(sources.load('svhn', folder))
  _check_svhn(sources.load('svhn', os.path.join(folder, 'train_32x32.mat')))
  _imported(folder)
  assert capsys.readouterr().out.startswith('svhn: 20 train / 10 test, 32x32x3 uint8')
  _check_svhn(sources.load('svhn'))


# ---------------------------------------------------------------------------------------------
# Missing, truncated and foreign files

def _truncate(path):
  with open(path, 'rb') as f:
    raw = f.read()
  with open(path, 'wb') as f:
    f.write(raw[:len(raw) // 2])


def _foreign_zip(path, member):
  with zipfile.ZipFile(path, 'w') as z:
    z.writestr(member, b'something else')


def _cifar10_instead(d):
  import fixtures  # pylint: disable=g-import-not-at-top
  fixtures.write_cifar10_python(os.path.join(d, 'cifar-100-python.tar.gz'))


def _broken_jpeg(d):
  path = os.path.join(d, 'tiny-imagenet-200.zip')
  with zipfile.ZipFile(path, 'a') as z, warnings.catch_warnings():
    warnings.simplefilter('ignore')  # 'Duplicate name': the later member wins on reading
    z.writestr('tiny-imagenet-200/val/images/val_1.JPEG', b'\xff\xd8 not really a jpeg')


def _gz_folder(d, split='byclass'):
  with zipfile.ZipFile(layouts.write_emnist_zip(d, split)) as z:
    z.extractall(d)
  os.remove(os.path.join(d, 'gzip.zip'))
  return os.path.join(d, 'gzip')


def _truncated_gz(d):
  path = os.path.join(_gz_folder(d), 'emnist-byclass-test-labels-idx1-ubyte.gz')
  with gzip.open(path) as f:
    raw = f.read()
  with gzip.open(path, 'wb') as f:
    f.write(raw[:-3])


def _foreign_mat(d):
  import scipy.io  # pylint: disable=g-import-not-at-top
  layouts.write_svhn_mat(d)
  scipy.io.savemat(os.path.join(d, 'test_32x32.mat'), {'images': np.zeros((4, 4), np.uint8)})


# (case, dataset, make(dir), the file name the one-line error must contain)
BAD = [
    ('cifar100-missing', 'cifar100', lambda d: None, 'cifar-100-python.tar.gz'),
    ('cifar100-truncated', 'cifar100', lambda d: _truncate(layouts.write_cifar100_tar(d)),
     'cifar-100-python.tar.gz'),
    ('cifar100-foreign', 'cifar100', _cifar10_instead, 'cifar-100-python.tar.gz'),
    ('tiny-missing', 'tiny_imagenet', lambda d: None, 'tiny-imagenet-200'),
    ('tiny-truncated', 'tiny_imagenet', lambda d: _truncate(layouts.write_tiny_imagenet_zip(d)),
     'tiny-imagenet-200.zip'),
    ('tiny-foreign', 'tiny_imagenet',
     lambda d: _foreign_zip(os.path.join(d, 'tiny-imagenet-200.zip'), 'readme.txt'),
     'tiny-imagenet-200.zip'),
    ('tiny-bad-jpeg', 'tiny_imagenet', lambda d: (layouts.write_tiny_imagenet_zip(d),
                                                  _broken_jpeg(d)), 'val/images/val_1.JPEG'),
    ('emnist-missing', 'emnist', lambda d: None, 'gzip.zip'),
    ('emnist-truncated', 'emnist', lambda d: _truncate(layouts.write_emnist_zip(d)), 'gzip.zip'),
    ('emnist-foreign', 'emnist', lambda d: _foreign_zip(os.path.join(d, 'gzip.zip'), 'x.gz'),
     'emnist-byclass-train-images-idx3-ubyte.gz'),
    ('emnist-missing-gz', 'emnist', lambda d: os.remove(os.path.join(
        _gz_folder(d), 'emnist-byclass-train-labels-idx1-ubyte.gz')),
     'emnist-byclass-train-labels-idx1-ubyte.gz'),
    ('emnist-truncated-gz', 'emnist', _truncated_gz, 'emnist-byclass-test-labels-idx1-ubyte.gz'),
    ('svhn-missing', 'svhn', lambda d: os.remove(os.path.join(layouts.write_svhn_mat(d),
                                                              'test_32x32.mat')),
     'test_32x32.mat'),
    ('svhn-truncated', 'svhn', lambda d: _truncate(os.path.join(layouts.write_svhn_mat(d),
                                                                'train_32x32.mat')),
     'train_32x32.mat'),
    ('svhn-foreign', 'svhn', _foreign_mat, 'test_32x32.mat'),
]


@pytest.mark.parametrize('case,dataset,make,name', BAD, ids=[b[0] for b in BAD])
def test_bad_files_are_refused_in_one_line_naming_the_file(tmp_path, capsys, case, dataset,
                                                           make, name):
  d = str(tmp_path / 'dl')
  os.makedirs(d)
  make(d)
  with pytest.raises(UserError) as e:
    sources.load(dataset, d)
  assert name in str(e.value) and '\n' not in str(e.value), str(e.value)
  if '-missing' not in case:  # the importer finds the file and refuses it the same way
    assert prepare.main(['import', d]) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and name in err, err


# ---------------------------------------------------------------------------------------------
# End to end

@pytest.mark.slow
def test_import_cifar100_then_train_one_round_with_the_cli(tmp_path):
  layouts.write_cifar100_tar(str(tmp_path / 'dl'), per_class=1, test_per_class=1)
  env = dict(os.environ, PYTHONPATH=ROOT)
  steps = [[sys.executable, '-m', 'fedjax_drift.data.prepare', 'import', str(tmp_path / 'dl')],
           [sys.executable, 'experiments/run.py', '--dataset=cifar100', '--model=mlp',
            '--rounds=1', '--num_clients=4', '--clients_per_round=2', '--partition=iid',
            '--batch_size=10', '--cifar100_labels=coarse', '--progress=false',
            f'--out={tmp_path / "run"}']]
  for argv in steps:
    result = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
  summary = open(tmp_path / 'run' / 'summary.json').read()
  assert '"cifar100"' in summary

"""`fedjax-drift-data import`: downloaded files in their real formats -> the cache -> load."""
import os
import subprocess
import sys
import tarfile

import numpy as np
import pytest

import fixtures
from fedjax_drift.data import formats, prepare, sources
from fedjax_drift.errors import UserError


@pytest.fixture
def cache(tmp_path, monkeypatch):
  monkeypatch.setenv('FEDJAX_DRIFT_CACHE', str(tmp_path / 'cache'))
  return tmp_path / 'cache'


def _assert_same(ds, arrays):
  x_train, y_train, x_test, y_test = arrays
  np.testing.assert_array_equal(ds.x_train.reshape(x_train.shape), x_train)
  np.testing.assert_array_equal(ds.y_train, y_train)
  np.testing.assert_array_equal(ds.x_test.reshape(x_test.shape), x_test)
  np.testing.assert_array_equal(ds.y_test, y_test)


def test_import_every_format_then_load_without_data_dir(tmp_path, cache, capsys):
  written = fixtures.write_downloads(str(tmp_path / 'downloads'))
  assert prepare.main(['import', str(tmp_path / 'downloads')]) == 0
  lines = capsys.readouterr().out.strip().splitlines()
  assert sorted(line.split(':')[0] for line in lines) == sorted(written)
  for name, arrays in written.items():
    ds = sources.load(name)
    assert ds.name == name
    _assert_same(ds, arrays)
  assert sources.load('mnist').x_train.shape == (200, 28, 28, 1)
  assert sources.load('cifar10').x_train.shape == (100, 32, 32, 3)
  assert sources.load('usps').x_train.dtype == np.float32


def test_digits_domains_from_imported_copies(tmp_path, cache):
  from fedjax_drift.data import domains
  root = tmp_path / 'downloads'
  fixtures.write_idx_dir(str(root / 'mnist'), n_train=60, n_test=30)
  fixtures.write_usps_libsvm(str(root / 'usps'))
  prepare.import_dir(str(root))
  ds = domains.load_digits_domains('')
  assert ds.x_train.shape[1:] == (28, 28, 1) and set(ds.domains_train.tolist()) == set(range(6))


def test_cifar10_formats_read_from_data_dir(tmp_path, cache):
  arrays = fixtures.write_cifar10_python(str(tmp_path / 'cifar-10-python.tar.gz'))
  _assert_same(sources.load('cifar10', str(tmp_path)), arrays)
  fixtures.write_cifar10_jpeg_dir(str(tmp_path / 'jpeg'))
  ds = sources.load('cifar10', str(tmp_path / 'jpeg'))
  assert ds.x_train.shape == (20, 32, 32, 3) and sorted(set(ds.y_train)) == list(range(10))
  for x, y in zip(ds.x_train, ds.y_train):  # canonical label order, image with its label
    assert abs(int(x.mean()) - 20 * int(y)) <= 3


def test_named_import_and_errors(tmp_path, cache, capsys):
  fixtures.write_idx_dir(str(tmp_path / 'plain'))
  assert prepare.main(['import', str(tmp_path / 'plain'), '--dataset=fashion_mnist']) == 0
  assert os.path.exists(sources.imported_path('fashion_mnist'))
  assert prepare.main(['import', str(tmp_path / 'empty_does_not_exist')]) == 2
  assert 'is not a directory' in capsys.readouterr().err
  (tmp_path / 'empty').mkdir()
  assert prepare.main(['import', str(tmp_path / 'empty')]) == 2
  assert 'found no dataset files' in capsys.readouterr().err
  with pytest.raises(UserError, match='fedjax-drift-data import'):
    sources.load('usps')  # not imported


def test_bad_files_name_the_file(tmp_path, cache):
  (tmp_path / 'usps.bz2').write_bytes(b'not bz2')
  (tmp_path / 'usps.t.bz2').write_bytes(b'not bz2')
  with pytest.raises(UserError, match='usps.bz2'):
    sources.load('usps', str(tmp_path))
  bad = tmp_path / 'cifar-10-python.tar.gz'
  bad.write_bytes(b'not a tarball')
  with pytest.raises(UserError, match='cifar-10-python.tar.gz'):
    formats.read_cifar10_python(str(bad))


def test_cifar_pickles_may_hold_only_arrays():
  import pickle
  evil = pickle.dumps({b'data': os.system, b'labels': []}, protocol=2)
  with pytest.raises(UserError, match='not a CIFAR-10 python batch'):
    formats._cifar_batch(evil, 'evil')  # pylint: disable=protected-access


def test_module_command_line(tmp_path):
  fixtures.write_usps_libsvm(str(tmp_path / 'dl'))
  env = dict(os.environ, FEDJAX_DRIFT_CACHE=str(tmp_path / 'cache'))
  result = subprocess.run([sys.executable, '-m', 'fedjax_drift.data.prepare', 'import',
                           str(tmp_path / 'dl')], capture_output=True, text=True, env=env,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  assert result.returncode == 0, result.stderr
  assert result.stdout.startswith('usps: 60 train / 20 test')


def test_import_of_the_cifar10_jpeg_tarball_leaves_no_second_copy(tmp_path):
  fixtures.write_cifar10_jpeg_dir(str(tmp_path / 'jpeg'), per_class=1)
  (tmp_path / 'in').mkdir()
  with tarfile.open(tmp_path / 'in' / 'cifar10-jpeg.tar.gz', 'w:gz') as tar:
    for split in ('train', 'test'):
      tar.add(tmp_path / 'jpeg' / split, arcname=split)
  assert prepare.main(['import', str(tmp_path / 'in')]) == 0
  cache = os.environ['FEDJAX_DRIFT_CACHE']  # the hermetic one (conftest.py)
  found = sorted(os.path.relpath(os.path.join(d, f), cache)
                 for d, _, files in os.walk(cache) for f in files)
  assert found == [os.path.join('datasets', 'cifar10.npz')]
  ds = sources.load('cifar10', None)
  assert ds.x_train.shape == (10, 32, 32, 3) and sorted(ds.y_train) == list(range(10))
  # A run straight from the tarball still caches its decode (that is the only copy then).
  sources.load_cifar10_jpeg(str(tmp_path / 'in'))
  assert any(f.startswith('cifar10-') for f in os.listdir(cache))


def test_importing_again_says_which_copy_it_replaces(tmp_path, cache, capsys):
  """issue 45 item 13: a second import of a dataset names the earlier copy it replaces."""
  fixtures.write_idx_dir(str(tmp_path / 'plain'))
  assert prepare.main(['import', str(tmp_path / 'plain'), '--dataset=mnist']) == 0
  assert 'replacing' not in capsys.readouterr().out
  assert prepare.main(['import', str(tmp_path / 'plain'), '--dataset=mnist']) == 0
  lines = capsys.readouterr().out.strip().splitlines()
  assert lines[0].startswith(f'mnist: replacing the earlier import '
                             f'{sources.imported_path("mnist")} (written '), lines

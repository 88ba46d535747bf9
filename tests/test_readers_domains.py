"""FedBN's multi-domain datasets (digits5, domainnet): official layouts (tests/layouts.py) ->
`fedjax-drift-data import` or --data_dir -> a Dataset with the right images, labels and
domain ids; bad files are refused with one line naming them."""
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

import layouts
from fedjax_drift import registry
from fedjax_drift.data import multidomain, prepare, sources
from fedjax_drift.errors import UserError

DIGITS_ORDER = ('MNIST', 'SVHN', 'USPS', 'SynthDigits', 'MNIST_M')


def _fedbn_digits(x):
  """FedBN's transforms, spelled out with PIL: Resize([28, 28]) then Grayscale(3)."""
  out = []
  for image in x:
    pil = Image.fromarray(image, 'L' if image.ndim == 2 else 'RGB')
    if pil.size != (28, 28):
      pil = pil.resize((28, 28), Image.BILINEAR)
    out.append(np.asarray(pil.convert('RGB')))
  return np.stack(out)


@pytest.fixture(scope='module')
def digits5_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp('fedbn') / 'data'
  return str(root), layouts.write_digits5(str(root))


def _check_digits5(ds, written, parts):
  assert ds.domain_names == ('mnist', 'svhn', 'usps', 'synth_digits', 'mnist_m')
  assert ds.x_train.shape[1:] == (28, 28, 3) and ds.x_train.dtype == np.uint8
  for d, folder in enumerate(DIGITS_ORDER):
    train, (x_test, y_test) = written[folder]
    mine = ds.domains_train == d
    np.testing.assert_array_equal(ds.x_train[mine],
                                  _fedbn_digits(np.concatenate([x for x, _ in train[:parts]])))
    np.testing.assert_array_equal(ds.y_train[mine], np.concatenate([y for _, y in train[:parts]]))
    np.testing.assert_array_equal(ds.groups['fedbn_part'][mine],
                                  np.repeat(np.arange(parts), len(train[0][1])))
    np.testing.assert_array_equal(ds.x_test[ds.domains_test == d], _fedbn_digits(x_test))
    np.testing.assert_array_equal(ds.y_test[ds.domains_test == d], y_test)
  # MNIST stays grey over three channels; SVHN is colour.
  assert np.all(ds.x_train[ds.domains_train == 0][..., 0] ==
                ds.x_train[ds.domains_train == 0][..., 2])


def test_digits5_import_and_data_dir(digits5_dir):
  root, written = digits5_dir
  assert prepare.import_dir(os.path.dirname(root)) == ['digits5']
  _check_digits5(sources.load('digits5'), written, parts=1)  # FedBN's --percent=0.1
  _check_digits5(sources.load('digits5', digits5_parts=3), written, parts=3)
  _check_digits5(sources.load('digits5', root, digits5_parts=2), written, parts=2)
  with pytest.raises(UserError, match='--digits5_parts=4: digits5 has 3 train parts'):
    sources.load('digits5', digits5_parts=4)
  with pytest.raises(UserError, match='import it again with'):
    sources.load('digits5', image_size=32)


def test_digits5_bad_files_name_the_file(tmp_path):
  root = tmp_path / 'data'
  layouts.write_digits5(str(root), parts=1, per_part=4, n_test=4)
  part = root / 'SVHN' / 'partitions' / 'train_part0.pkl'
  part.write_bytes(part.read_bytes()[:100])  # truncated download
  with pytest.raises(UserError, match=f'{part} is not a pickle of numpy arrays') as e:
    sources.load('digits5', str(root))
  assert '\n' not in str(e.value)
  # A pickle that would run code (os.system) is refused, not executed.
  class Evil:
    def __reduce__(self):
      return (os.system, ('touch pwned',))
  part.write_bytes(pickle.dumps((Evil(), np.zeros(3))))
  with pytest.raises(UserError, match='is not a pickle of numpy arrays'):
    sources.load('digits5', str(root))
  part.write_bytes(pickle.dumps({'images': np.zeros((2, 32, 32, 3), np.uint8)}))
  with pytest.raises(UserError, match=r'does not hold a pair \(images, labels\)'):
    sources.load('digits5', str(root))
  part.write_bytes(pickle.dumps((np.zeros((2, 32, 32, 3), np.float32), np.zeros(2, int))))
  with pytest.raises(UserError, match='expected uint8 images'):
    sources.load('digits5', str(root))
  part.write_bytes(pickle.dumps((np.zeros((2, 32, 32, 3), np.uint8), np.zeros(2, int))))
  os.remove(root / 'USPS' / 'test.pkl')
  with pytest.raises(UserError, match=f'missing {root / "USPS" / "test.pkl"}'):
    sources.load('digits5', str(root))
  with pytest.raises(UserError, match='holds no FedBN\'s digit folders'):
    sources.load('digits5', str(tmp_path / 'data' / 'MNIST' / 'partitions'))


@pytest.fixture(scope='module')
def domainnet_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp('fedbn_dn') / 'data'
  return str(root), layouts.write_domainnet(str(root))


def _check_domainnet(ds, written, size):
  assert ds.domain_names == layouts.DOMAINNET_SITES
  assert ds.x_train.shape[1:] == (size, size, 3) and ds.x_train.dtype == np.uint8
  for split, x, y, d in (('train', ds.x_train, ds.y_train, ds.domains_train),
                         ('test', ds.x_test, ds.y_test, ds.domains_test)):
    for k, site in enumerate(layouts.DOMAINNET_SITES):
      expected = written[split, site]
      np.testing.assert_array_equal(y[d == k], [c for c, _ in expected])
      colours = np.asarray([c for _, c in expected])
      # flat images survive JPEG and resizing within a few levels
      assert np.abs(x[d == k].astype(int) - colours[:, None, None, :]).max() <= 4


def test_domainnet_import_resizes_and_keeps_domains(domainnet_dir, capsys):
  root, written = domainnet_dir
  assert prepare.main(['import', root, '--image_size=12']) == 0
  assert 'domainnet: 24 train / 12 test, 12x12x3 uint8' in capsys.readouterr().out
  ds = sources.load('domainnet')
  _check_domainnet(ds, written, 12)
  with np.load(sources.imported_path('domainnet')) as f:  # the cache's structure arrays
    assert {'d_train', 'd_test', 'domain_names'} <= set(f.files)
  with pytest.raises(UserError, match=r'--image_size=16: the imported domainnet .* is 12x12'):
    sources.load('domainnet', image_size=16)
  _check_domainnet(sources.load('domainnet', root, image_size=9), written, 9)


def test_domainnet_bad_files_name_the_file(tmp_path):
  root = tmp_path / 'data'
  layouts.write_domainnet(str(root), per_split=(2, 1))
  base = root / 'DomainNet'
  image = base / 'clipart' / os.listdir(base / 'clipart')[0]
  victim = image / os.listdir(image)[0]
  victim.write_bytes(b'not a jpeg')
  with pytest.raises(UserError, match=f'cannot decode image {victim}'):
    sources.load('domainnet', str(root), image_size=8)
  os.remove(victim)
  with pytest.raises(UserError, match='missing DomainNet image .*download clipart.zip'):
    sources.load('domainnet', str(root), image_size=8)
  (base / 'sketch.zip').write_bytes(b'PK\x03\x04 truncated')
  split = base / 'painting_test.pkl'
  split.write_bytes(pickle.dumps((['DomainNet/painting/cat/x.jpg'], ['cat'])))
  with pytest.raises(UserError, match=f"{split}: class 'cat' is not one of FedBN's ten"):
    sources.load('domainnet', str(root), image_size=8)
  os.remove(split)
  with pytest.raises(UserError, match=f'missing {split}'):
    sources.load('domainnet', str(root), image_size=8)


def test_import_command_refuses_a_truncated_zip_in_one_line(tmp_path):
  root = tmp_path / 'data'
  layouts.write_domainnet(str(root), per_split=(1, 1))
  (root / 'DomainNet' / 'sketch.zip').write_bytes(b'PK\x03\x04 truncated')
  result = subprocess.run([sys.executable, '-m', 'fedjax_drift.data.prepare', 'import',
                           str(root), '--image_size=8'], capture_output=True, text=True,
                          check=False)
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1].startswith(
      f'error: cannot read {root / "DomainNet" / "sketch.zip"} as a zip')
  assert len(result.stderr.strip().splitlines()) == 1


def test_npz_with_domain_ids_and_groups(tmp_path):
  """npz:PATH (and every imported cache) carries d_train/d_test/domain_names/<col>_train."""
  path = tmp_path / 'd.npz'
  rng = np.random.default_rng(0)
  np.savez(path, x_train=rng.random((6, 3)), y_train=np.arange(6) % 2,
           x_test=rng.random((2, 3)), y_test=np.array([0, 1]),
           d_train=np.array([0, 0, 1, 1, 2, 2]), d_test=np.array([0, 2]),
           domain_names=np.array(['a', 'b', 'c']), writer_train=np.array([5, 5, 6, 6, 7, 7]))
  ds = sources.load(f'npz:{path}')
  assert ds.domain_names == ('a', 'b', 'c') and ds.domains_test.tolist() == [0, 2]
  assert ds.groups['writer'].tolist() == [5, 5, 6, 6, 7, 7]
  assert all(registry.find('dataset', n).info.load is multidomain.load
             for n in ('digits5', 'domainnet'))


def test_data_dir_inputs_are_fingerprinted(domainnet_dir, digits5_dir):
  """--resume refuses changed inputs: the pickles a --data_dir read opens are listed."""
  from fedjax_drift import inputs  # pylint: disable=g-import-not-at-top
  import fedjax_drift  # pylint: disable=g-import-not-at-top
  files = inputs.input_files(inputs.Flags('domainnet', domainnet_dir[0]))
  assert len(files) == 12 and all(p.endswith('.pkl') for _, p in files)
  files = inputs.input_files(inputs.Flags('digits5', digits5_dir[0]))
  assert len(files) == 5 * (3 + 1) and {f for f, _ in files} == {'--data_dir'}


@pytest.mark.slow
def test_digits5_run_end_to_end(tmp_path, digits5_dir):
  """Flags reach the loader through the Config (--digits5_parts), and a run completes."""
  import json  # pylint: disable=g-import-not-at-top
  import fedjax_drift  # pylint: disable=g-import-not-at-top
  config = fedjax_drift.Config(dataset='digits5', data_dir=digits5_dir[0], digits5_parts=2,
                               partition='iid', num_clients=5, clients_per_round=5,
                               model='logreg', rounds=1, local_steps=1, batch_size=4,
                               progress=False, eval_every=1, out=str(tmp_path / 'run'))
  summary = fedjax_drift.run(config)
  assert summary['status'] == 'ok', summary['status']
  assert summary['communication_floats_per_client']['up'] == (28 * 28 * 3 + 1) * 10  # logreg
  with open(tmp_path / 'run' / 'config.json') as f:
    assert len(json.load(f)['_resolved']['inputs']['files']) == 20

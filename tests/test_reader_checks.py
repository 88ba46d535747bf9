"""Every reader checks what it reads, as its file stores it (issue 45 items 1 and 2): labels
against the dataset's classes, values for NaN/inf and for the range the format defines, and a
corrupt record ends in one line naming the file and the record (client, user, example),
never a bare ValueError or UnicodeDecodeError. Empty clients follow one rule in every reader:
a client with no examples in a split is left out of that split. Tiny files in each format's
official layout (tests/layouts.py, tests/fixtures.py)."""
import json
import os
import pickle

import numpy as np
import pytest

import fixtures
import layouts
from fedjax_drift.data import common, formats, natural, prepare, sources
from fedjax_drift.errors import UserError

h5py = pytest.importorskip('h5py')


def _one_line(excinfo):
  message = str(excinfo.value)
  assert '\n' not in message, message
  return message


def _femnist_h5(tmp_path, change):
  """TFF's FEMNIST pair with change(clients) applied to the training split before writing."""
  folder = tmp_path / 'femnist'
  clients = layouts.femnist_clients(writers=3)
  change(clients['train'])
  os.makedirs(folder, exist_ok=True)
  for split, data in clients.items():
    with h5py.File(folder / f'fed_emnist_{split}.h5', 'w') as f:
      for uid, (pixels, labels) in data.items():
        g = f.create_group(f'examples/{uid}')
        g.create_dataset('pixels', data=pixels)
        g.create_dataset('label', data=np.asarray(labels).astype(np.int32))
  return str(folder), sorted(clients['train'])


def _set(uid_index, field, value, index=(2,)):
  def change(train):
    uid = sorted(train)[uid_index]
    pixels, labels = train[uid]
    pixels, labels = pixels.copy(), labels.copy()
    if field == 'label':
      labels[index] = value
    elif field == 'pixel':
      pixels[index + (3, 4)] = value
    else:
      pixels = value(pixels)
    train[uid] = (pixels, labels)
  return change


def test_a_femnist_h5_label_beyond_62_classes_names_file_client_and_example(tmp_path):
  folder, uids = _femnist_h5(tmp_path, _set(1, 'label', 99))
  with pytest.raises(UserError) as e:
    sources.load('femnist', folder)
  message = _one_line(e)
  assert (f'fed_emnist_train.h5: client {uids[1]}, example 2: label 99 is outside 0..61'
          in message), message


@pytest.mark.parametrize('value, says', [(np.nan, 'NaN or infinite'),
                                         (np.inf, 'NaN or infinite')])
def test_a_non_finite_femnist_pixel_is_refused(tmp_path, value, says):
  folder, uids = _femnist_h5(tmp_path, _set(0, 'pixel', value, index=(5,)))
  with pytest.raises(UserError) as e:
    sources.load('femnist', folder)
  message = _one_line(e)
  assert f'client {uids[0]}, example 5: holds {says}' in message, message


def test_femnist_pixels_scaled_0_to_255_are_refused(tmp_path):
  folder, uids = _femnist_h5(tmp_path, _set(2, 'scale', lambda p: p * 255))
  with pytest.raises(UserError) as e:
    sources.load('femnist', folder)
  message = _one_line(e)
  assert f'client {uids[2]}, example 0: value' in message and '0..1' in message, message
  assert 'scaled 0..255?' in message, message


def test_a_corrupt_femnist_h5_record_names_file_and_client(tmp_path):
  folder, uids = _femnist_h5(tmp_path, _set(1, 'shape', lambda p: p.reshape(len(p), 14, 56)))
  with pytest.raises(UserError) as e:
    sources.load('femnist', folder)
  message = _one_line(e)
  assert f'fed_emnist_train.h5: client {uids[1]}: pixels are float32 [' in message, message
  assert 'reshape' not in message


def test_a_shakespeare_h5_snippet_that_is_not_utf8_names_file_client_and_snippet(tmp_path):
  folder = tmp_path / 'shakespeare'
  layouts.write_shakespeare_h5(str(folder))
  with h5py.File(folder / 'shakespeare_train.h5', 'a') as f:
    role = sorted(f['examples'])[1]
    del f[f'examples/{role}/snippets']
    f[f'examples/{role}'].create_dataset(
        'snippets', data=np.array([b'fine text', b'bad \xff\xfe byte'], dtype=object),
        dtype=h5py.string_dtype('ascii'))
  with pytest.raises(UserError) as e:
    sources.load('shakespeare', str(folder))
  message = _one_line(e)
  assert f'shakespeare_train.h5: client {role}, snippet 1: not UTF-8' in message, message


# LEAF JSON.
def _leaf_femnist(tmp_path, change, which=0):
  root = tmp_path / 'leaf'
  layouts.write_femnist_leaf(str(root), writers=3)
  path = sorted((root / 'data' / 'train').glob('*.json'))[0]
  body = json.loads(path.read_text())
  change(body)
  path.write_text(json.dumps(body))
  return str(root), path, body['users'][which]


def test_leaf_femnist_labels_and_range_are_checked(tmp_path):
  def label(body):
    body['user_data'][body['users'][0]]['y'][1] = 99
  root, path, user = _leaf_femnist(tmp_path, label)
  with pytest.raises(UserError) as e:
    sources.load('femnist', root)
  assert f'{path}: user {user}, example 1: label 99 is outside 0..61' in _one_line(e)

  def scaled(body):
    x = body['user_data'][body['users'][0]]['x']
    x[0] = [v * 255 for v in x[0]]
  root, path, user = _leaf_femnist(tmp_path / 'b', scaled)
  with pytest.raises(UserError) as e:
    sources.load('femnist', root)
  assert f'user {user}, example 0: value' in _one_line(e)


def test_a_leaf_user_with_zero_samples_is_left_out_as_h5_leaves_it_out(tmp_path):
  def empty(body):  # not the first writer, whose labels are all 62 classes
    user = body['users'][1]
    body['user_data'][user] = {'x': [], 'y': []}
    body['num_samples'][1] = 0
  root, _, user = _leaf_femnist(tmp_path, empty, which=1)
  ds = sources.load('femnist', root)
  full = sources.load('femnist', layouts.write_femnist_leaf(str(tmp_path / 'full'), writers=3)
                      and str(tmp_path / 'full'))
  lost = len(layouts.femnist_clients(writers=3)['train'][user][1])
  assert len(ds.y_train) == len(full.y_train) - lost
  assert len(np.unique(ds.groups['writer'])) == 2  # that user is no training client


def test_a_leaf_num_samples_that_disagrees_with_y_is_refused(tmp_path):
  def truncated(body):
    user = body['users'][0]
    body['user_data'][user]['y'] = body['user_data'][user]['y'][:-1]
  root, path, user = _leaf_femnist(tmp_path, truncated)
  with pytest.raises(UserError) as e:
    sources.load('femnist', root)
  assert f'{path}: user {user}: num_samples says' in _one_line(e)


# Hugging Face folders.
def test_a_truncated_first_parquet_shard_is_named(tmp_path, monkeypatch, capsys):
  pytest.importorskip('datasets')
  import test_natural_hf  # pylint: disable=g-import-not-at-top
  monkeypatch.setenv('FEDJAX_DRIFT_CACHE', str(tmp_path / 'cache'))
  folder = tmp_path / 'downloads' / 'femnist'
  test_natural_hf.write_femnist_hub(str(folder))
  shards = sorted((folder / 'data').glob('*.parquet'))
  capsys.readouterr()  # the datasets library's progress bars
  for shard in shards[:1], shards:  # the first shard alone, then every shard
    for path in shard:
      path.write_bytes(path.read_bytes()[:200])
    assert prepare.main(['import', str(tmp_path / 'downloads')]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f'cannot read {shards[0]}' in err[0], err
    assert 'found no dataset files' not in err[0]


def test_a_femnist_hub_label_beyond_62_names_its_client_and_row(tmp_path):
  pytest.importorskip('datasets')
  import test_natural_hf  # pylint: disable=g-import-not-at-top
  rows = test_natural_hf._femnist_rows(np.random.default_rng(0), (3, 2, 2))  # pylint: disable=protected-access
  rows['character'][4] = 99
  table = natural.hubfiles.pa.table({
      'image': [{'bytes': test_natural_hf._png(p), 'path': None} for p in rows['image']],  # pylint: disable=protected-access
      'writer_id': rows['writer_id'], 'character': rows['character']})
  with pytest.raises(UserError) as e:
    natural.femnist_table(table, 'F (train)')
  assert (f'F (train), client {rows["writer_id"][4]}, example 4: label 99 is outside 0..61'
          in _one_line(e))


# Centralised formats.
def test_an_idx_label_beyond_10_names_the_label_file_and_example(tmp_path):
  folder = tmp_path / 'mnist'
  _, y_train, _, _ = fixtures.write_idx_dir(str(folder), n_train=40, n_test=10)
  y_train[7] = 10
  fixtures._write_idx(str(folder / 'train-labels-idx1-ubyte.gz'), y_train)  # pylint: disable=protected-access
  with pytest.raises(UserError) as e:
    sources.load('mnist', str(folder))
  assert 'train-labels-idx1-ubyte.gz, example 7: label 10 is outside 0..9' in _one_line(e)


def test_a_truncated_cifar10_batch_names_the_batch_not_a_reshape(tmp_path):
  import tarfile  # pylint: disable=g-import-not-at-top
  tar = str(tmp_path / 'cifar-10-python.tar.gz')
  fixtures.write_cifar10_python(tar, per_batch=4, n_test=4)
  with tarfile.open(tar) as f:
    f.extractall(tmp_path)
  batch = tmp_path / 'cifar-10-batches-py' / 'data_batch_2'
  with open(batch, 'rb') as f:
    body = pickle.load(f, encoding='bytes')
  body[b'data'] = np.asarray(body[b'data']).reshape(-1)[:-100]
  with open(batch, 'wb') as f:
    pickle.dump(body, f, protocol=2)
  with pytest.raises(UserError) as e:
    formats.read_cifar10_python(str(batch.parent))
  message = _one_line(e)
  assert 'data_batch_2' in message and 'reshape' not in message, message


def test_an_npz_nan_names_its_example(tmp_path):
  x = np.zeros((6, 4), np.float32)
  x[3, 1] = np.nan
  with pytest.raises(UserError, match=r'x_train holds NaN or infinite features \(first at '
                     r'example 3\)'):
    common.validate('npz:f', x, np.arange(6) % 2, np.zeros((2, 4), np.float32), np.arange(2))

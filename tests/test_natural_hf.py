"""FEMNIST and Shakespeare from Hugging Face folders (issue 35 item 1): tiny copies of the hub's
flwrlabs/femnist (data/train-0000k-of-00002.parquet: image, writer_id, hsf_id, character) and
flwrlabs/shakespeare (one shakespeare.csv: character_id, x, y), both one training split that
is split per client as LEAF's split_data.py does, and a save_to_disk folder with its own test
split; read by --dataset=femnist|shakespeare --data_dir=FOLDER and run with
--partition=natural."""
import csv
import io
import os

import numpy as np
import pytest

import fedjax_drift
from fedjax_drift.data import hubfiles, natural, partitions, prepare, sources

datasets = pytest.importorskip('datasets')
Image = pytest.importorskip('PIL.Image')

WRITERS = ('f0003_41', 'f0000_14', 'f0001_07')  # not in sorted order, as files may hold them


def _png(pixels):
  buf = io.BytesIO()
  Image.fromarray(pixels, 'L').save(buf, format='PNG')
  return buf.getvalue()


def _femnist_rows(rng, sizes):
  """Rows in the hub's order (grouped by writer), with the values a reader must give back."""
  rows = {'image': [], 'writer_id': [], 'hsf_id': [], 'character': []}
  for writer, n in zip(WRITERS, sizes):
    for _ in range(n):
      pixels = rng.integers(0, 256, (28, 28)).astype(np.uint8)
      rows['image'].append(pixels)
      rows['writer_id'].append(writer)
      rows['hsf_id'].append(int(rng.integers(0, 8)))
      rows['character'].append(int(rng.integers(0, 4)))  # few classes: none looks stray
  return rows


def _femnist_features():
  return datasets.Features({'image': datasets.Image(), 'writer_id': datasets.Value('string'),
                            'hsf_id': datasets.Value('int64'),
                            'character': datasets.ClassLabel(num_classes=62)})


def write_femnist_hub(folder, sizes=(7, 5, 2), seed=0):
  """flwrlabs/femnist as the hub holds it: README.md and data/train-*.parquet (two shards)."""
  rows = _femnist_rows(np.random.default_rng(seed), sizes)
  os.makedirs(os.path.join(folder, 'data'), exist_ok=True)
  with open(os.path.join(folder, 'README.md'), 'w') as f:
    f.write('---\nlicense: bsd-2-clause\n---\n')
  cut = sizes[0]  # the shard boundary falls between writers' rows, as in any sharding
  for k, part in enumerate((slice(0, cut), slice(cut, None))):
    shard = {c: [{'bytes': _png(v), 'path': None} if c == 'image' else v
                 for v in values[part]] for c, values in rows.items()}
    datasets.Dataset.from_dict(shard, features=_femnist_features()).to_parquet(
        os.path.join(folder, 'data', f'train-{k:05d}-of-00002.parquet'))
  return rows


def _leaf_sample_split(rows, rng):
  """LEAF's split_data.py --by sample, transcribed: per writer in sorted id order, k =
  max(1, int(0.9 n)) (1 when n = 2) drawn at random for training, the rest for testing."""
  ids = np.asarray(rows['writer_id'])
  x, y = np.stack(rows['image'])[..., None], np.asarray(rows['character'])
  out = {'x_train': [], 'y_train': [], 'x_test': [], 'y_test': [], 'writer': []}
  for w, writer in enumerate(sorted(set(rows['writer_id']))):
    mine = np.flatnonzero(ids == writer)
    n = len(mine)
    k = 1 if n == 2 else max(1, int(0.9 * n))
    train = np.sort(rng.choice(n, k, replace=False))
    test = np.array([i for i in range(n) if i not in set(train.tolist())])
    out['x_train'].append(x[mine[train]])
    out['y_train'].append(y[mine[train]])
    out['x_test'].append(x[mine[test]])
    out['y_test'].append(y[mine[test]])
    out['writer'].append(np.full(k, w))
  return {k: np.concatenate(v) for k, v in out.items()}


def test_femnist_hub_folder_is_split_per_writer_as_leaf_does(tmp_path):
  rows = write_femnist_hub(str(tmp_path / 'femnist'))
  ds = sources.load('femnist', str(tmp_path / 'femnist'))
  want = _leaf_sample_split(rows, np.random.default_rng(natural.SPLIT_SEED))
  for key in ('x_train', 'y_train', 'x_test', 'y_test'):
    np.testing.assert_array_equal(getattr(ds, key), want[key], err_msg=key)
  np.testing.assert_array_equal(ds.groups['writer'], want['writer'])
  assert ds.x_train.dtype == np.uint8 and ds.x_train.shape[1:] == (28, 28, 1)
  assert sorted(ds.groups) == ['writer']  # hsf_id is no client column
  assert sources.dataset_files('femnist', str(tmp_path / 'femnist')) == [
      str(tmp_path / 'femnist' / 'data' / f'train-0000{k}-of-00002.parquet') for k in (0, 1)]


def _shakespeare_rows(rng, sizes=(3, 820, 850)):
  """character_id, x (80 characters of LEAF's alphabet and one outside it), y."""
  roles = ('THE_TEMPEST_PROSPERO', 'HAMLET_HAMLET', 'KING_LEAR_EDGAR')
  rows = {'character_id': [], 'x': [], 'y': []}
  for role, n in zip(roles, sizes):
    text = ''.join(rng.choice(list(natural.LETTERS[1:] + '\u00e9'), n + 80))
    text = text.replace('"', ',')  # any character works; keep the CSV's quoting simple
    for i in range(n):
      rows['character_id'].append(role)
      rows['x'].append(text[i:i + 80])
      rows['y'].append(text[i + 80])
  return rows


def write_shakespeare_hub(folder, seed=0):
  """flwrlabs/shakespeare as the hub holds it: README.md and one shakespeare.csv."""
  rows = _shakespeare_rows(np.random.default_rng(seed))
  os.makedirs(folder, exist_ok=True)
  with open(os.path.join(folder, 'README.md'), 'w') as f:
    f.write('---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n'
            '    path: shakespeare.csv\n---\n')
  with open(os.path.join(folder, 'shakespeare.csv'), 'w', newline='', encoding='utf-8') as f:
    out = csv.writer(f)
    out.writerow(['character_id', 'x', 'y'])
    out.writerows(zip(rows['character_id'], rows['x'], rows['y']))
  return rows


def test_shakespeare_hub_csv_is_split_in_time_as_leaf_does(tmp_path):
  rows = write_shakespeare_hub(str(tmp_path / 'sh'))
  ds = sources.load('shakespeare', str(tmp_path / 'sh'))
  ids = lambda s: [natural.LETTERS.find(c) if c in natural.LETTERS else 1 for c in s]
  x_train, y_train, x_test, y_test, role = [], [], [], [], []
  kept = 0
  for r in sorted(set(rows['character_id'])):
    mine = [i for i, c in enumerate(rows['character_id']) if c == r]
    n = len(mine)
    k = max(1, int(0.9 * n))
    test = mine[k + 79:]  # LEAF: range(k + 80 - 1, n)
    if not test:  # the 3-window role: no test window left, so LEAF drops it
      continue
    x_train += [ids(rows['x'][i]) for i in mine[:k]]
    y_train += [ids(rows['y'][i])[0] for i in mine[:k]]
    x_test += [ids(rows['x'][i]) for i in test]
    y_test += [ids(rows['y'][i])[0] for i in test]
    role += [kept] * k
    kept += 1
  assert kept == 2
  np.testing.assert_array_equal(ds.x_train[:, 0], x_train)
  np.testing.assert_array_equal(ds.x_train[:, 1], 1)
  np.testing.assert_array_equal(ds.y_train, y_train)
  np.testing.assert_array_equal(ds.x_test[:, 0], x_test)
  np.testing.assert_array_equal(ds.y_test, y_test)
  np.testing.assert_array_equal(ds.groups['role'], role)
  assert ds.vocab_size == ds.num_classes == 80


def test_a_saved_folder_keeps_its_own_test_split(tmp_path):
  rng = np.random.default_rng(1)
  splits = {}
  for split, sizes in (('train', (4, 3, 2)), ('test', (1, 2, 1))):
    rows = _femnist_rows(rng, sizes)
    rows['image'] = [Image.fromarray(p, 'L') for p in rows['image']]
    splits[split] = datasets.Dataset.from_dict(rows, features=_femnist_features())
  datasets.DatasetDict(splits).save_to_disk(str(tmp_path / 'saved'))
  assert hubfiles.split_of('test/data-00000-of-00001.arrow') == 'test'
  ds = sources.load('femnist', str(tmp_path / 'saved'))
  order = np.argsort(np.asarray(splits['train']['writer_id']), kind='stable')
  np.testing.assert_array_equal(ds.y_train, np.asarray(splits['train']['character'])[order])
  assert len(ds.y_test) == 4 and len(np.unique(ds.groups['writer'])) == 3
  np.testing.assert_array_equal(ds.x_train[0, ..., 0], np.asarray(splits['train'][int(
      order[0])]['image']))


def test_hub_folders_with_other_columns_are_one_line(tmp_path):
  write_shakespeare_hub(str(tmp_path / 'sh'))
  with pytest.raises(fedjax_drift.UserError, match=r'femnist --data_dir=.*sh \(train\) '
                                                    r'lacks column writer_id, image, character '
                                                    r'\(it has character_id'):
    sources.load('femnist', str(tmp_path / 'sh'))
  (tmp_path / 'bad').mkdir()
  (tmp_path / 'bad' / 'train.parquet').write_text('not parquet')
  with pytest.raises(fedjax_drift.UserError, match='cannot read .*train.parquet'):
    sources.load('shakespeare', str(tmp_path / 'bad'))


@pytest.mark.parametrize('dataset,writer,kw', [
    ('femnist', write_femnist_hub, dict(model='mlp', num_clients=2)),
    ('shakespeare', write_shakespeare_hub, dict(model='char_lstm', num_clients=2))])
@pytest.mark.slow
def test_two_rounds_on_a_hub_folder(tmp_path, dataset, writer, kw):
  writer(str(tmp_path / 'data'))
  config = fedjax_drift.Config(
      dataset=dataset, data_dir=str(tmp_path / 'data'), partition='natural', rounds=2,
      local_steps=1, local_epochs=0, batch_size=4, clients_per_round=2, progress=False,
      eval_every=1, lr=0.05, out=str(tmp_path / 'run'), **kw)
  exp = fedjax_drift.prepare(config)
  every = sources.load(dataset, str(tmp_path / 'data'))  # the drawn clients: of these
  column = every.groups[natural.COLUMNS[dataset]]
  want = partitions.natural(column, kw['num_clients'], np.random.default_rng(config.seed))
  for got, part in zip(exp.train_parts, want):
    np.testing.assert_array_equal(exp.dataset.x_train[got], every.x_train[part])
  fedjax_drift.run(config, log=lambda *a, **k: None)
  assert os.path.isfile(tmp_path / 'run' / 'metrics.csv')


def test_import_finds_hub_folders_by_their_columns(tmp_path, monkeypatch):
  monkeypatch.setenv('FEDJAX_DRIFT_CACHE', str(tmp_path / 'cache'))
  write_femnist_hub(str(tmp_path / 'downloads' / 'femnist'))
  write_shakespeare_hub(str(tmp_path / 'downloads' / 'shakespeare'))
  assert natural.hf_kind(str(tmp_path / 'downloads' / 'femnist' / 'data')) == 'femnist'
  found = prepare.find(str(tmp_path / 'downloads'))
  assert sorted(name for name, _ in found) == ['femnist', 'shakespeare']  # once each
  assert prepare.main(['import', str(tmp_path / 'downloads')]) == 0
  for name in ('femnist', 'shakespeare'):
    in_place = sources.load(name, str(tmp_path / 'downloads' / name))
    imported = sources.load(name)
    for a, b in zip(imported[1:5], in_place[1:5]):
      np.testing.assert_array_equal(a, b)
    column = natural.COLUMNS[name]
    np.testing.assert_array_equal(imported.groups[column], in_place.groups[column])

"""Natural federated datasets (issue 35 item 1): FEMNIST by writer and Shakespeare by speaking
role, read from tiny files in TensorFlow Federated's h5 layout and LEAF's JSON layout (written
by tests/layouts.py), imported with `fedjax-drift-data import`, split by their own clients with
--partition=natural (the dataset's one group column) or natural:COLUMN, a seeded subset for a
smaller --num_clients, and run for two rounds; LEAF's character LSTM checked against a numpy
BasicLSTMCell."""
import json
import os

import jax
import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import models, registry
from fedjax_drift.data import common, natural, partitions, prepare, sources
from fedjax_drift.models import recurrent
import layouts

pytest.importorskip('h5py')


def _femnist_expected(clients):
  """The Dataset arrays the files should give: writers in sorted id order, pixels as uint8
  round(255 p), the test split pooled in sorted writer order."""
  out = {}
  for split, data in clients.items():
    ids = sorted(data)
    out[f'x_{split}'] = np.concatenate([np.round(data[u][0] * 255) for u in ids]).astype(
        np.uint8)[..., None]
    out[f'y_{split}'] = np.concatenate([data[u][1] for u in ids])
    out[f'w_{split}'] = np.concatenate([np.full(len(data[u][1]), k) for k, u in enumerate(ids)])
  return out


def _check_femnist(ds, expected):
  np.testing.assert_array_equal(ds.x_train, expected['x_train'])
  np.testing.assert_array_equal(ds.y_train, expected['y_train'])
  np.testing.assert_array_equal(ds.x_test, expected['x_test'])
  np.testing.assert_array_equal(ds.y_test, expected['y_test'])
  np.testing.assert_array_equal(ds.groups['writer'], expected['w_train'])
  assert ds.num_classes == 62 and ds.x_train.dtype == np.uint8


@pytest.mark.parametrize('kind', ['h5', 'leaf'])
def test_femnist_files_give_every_writer_and_example(tmp_path, kind):
  write = layouts.write_femnist_h5 if kind == 'h5' else layouts.write_femnist_leaf
  clients = write(str(tmp_path / kind), writers=5)
  ds = sources.load('femnist', str(tmp_path / kind))
  _check_femnist(ds, _femnist_expected(clients))
  assert len(np.unique(ds.groups['writer'])) == 5


def _leaf_ids(strings):
  return np.array([[natural.LETTERS.find(c) for c in s] for s in strings], np.int32)


@pytest.mark.parametrize('kind', ['h5', 'leaf'])
def test_shakespeare_files_give_leafs_windows_per_role(tmp_path, kind):
  if kind == 'h5':
    snippets = layouts.write_shakespeare_h5(str(tmp_path / kind))
    written = {s: {r: layouts.leaf_windows(' '.join(lines)) for r, lines in d.items()}
               for s, d in snippets.items()}
  else:
    written = layouts.write_shakespeare_leaf(str(tmp_path / kind))
  ds = sources.load('shakespeare', str(tmp_path / kind))
  roles = sorted(written['train'])
  x = np.concatenate([_leaf_ids(written['train'][r][0]) for r in roles])
  y = np.concatenate([_leaf_ids(written['train'][r][1])[:, 0] for r in roles])
  assert ds.x_train.shape == (len(y), 2, 80) and ds.x_train.dtype == np.int32
  np.testing.assert_array_equal(ds.x_train[:, 0], x)
  np.testing.assert_array_equal(ds.x_train[:, 1], 1)
  np.testing.assert_array_equal(ds.y_train, y)
  np.testing.assert_array_equal(
      ds.groups['role'], np.repeat(np.arange(len(roles)),
                                   [len(written['train'][r][1]) for r in roles]))
  test_y = np.concatenate([_leaf_ids(written['test'][r][1])[:, 0] for r in sorted(
      written['test'])])
  np.testing.assert_array_equal(ds.y_test, test_y)
  assert ds.num_classes == ds.vocab_size == len(natural.LETTERS) == 80


def test_characters_outside_leafs_alphabet_become_spaces():
  np.testing.assert_array_equal(natural.char_ids('a\u00e9{b\U0001F600'),
                                [natural.LETTERS.index(c) for c in 'a  b '])
  x, y = natural.windows(np.arange(83, dtype=np.int32))
  assert x.shape == (3, 80) and y.tolist() == [80, 81, 82] and x[2, 0] == 2
  assert natural.windows(np.arange(80, dtype=np.int32))[0].shape == (0, 80)


def test_import_finds_both_layouts_and_keeps_the_clients(tmp_path, monkeypatch):
  monkeypatch.setenv('FEDJAX_DRIFT_CACHE', str(tmp_path / 'cache'))
  clients = layouts.write_femnist_h5(str(tmp_path / 'downloads' / 'tff'))
  layouts.write_shakespeare_leaf(str(tmp_path / 'downloads' / 'leaf' / 'shakespeare'))
  in_place = sources.load('shakespeare', str(tmp_path / 'downloads' / 'leaf' / 'shakespeare'))
  assert prepare.main(['import', str(tmp_path / 'downloads')]) == 0
  _check_femnist(sources.load('femnist'), _femnist_expected(clients))
  imported = sources.load('shakespeare')
  for a, b in zip(imported[1:6], in_place[1:6]):
    np.testing.assert_array_equal(a, b)
  np.testing.assert_array_equal(imported.groups['role'], in_place.groups['role'])
  assert imported.vocab_size == 80
  assert sources.dataset_files('femnist', None) == [common.imported_path('femnist')]


def test_a_text_of_few_symbols_imports_with_leafs_80_classes(tmp_path, monkeypatch):
  """Issue 45 item 11: a Shakespeare text using few of LEAF's 80 symbols (its highest label
  'z', 78) was refused as "would make 79 classes, ... stray labels?"; the task's classes are
  LEAF's fixed 80, so it imports and loads with 80 classes."""
  monkeypatch.setenv('FEDJAX_DRIFT_CACHE', str(tmp_path / 'cache'))
  text = 'to be or not to be that is the question whether tis nobler in the mind ' * 3
  xs, ys = layouts.leaf_windows(text)
  folder = tmp_path / 'downloads' / 'shakespeare'
  role = {'THE_TEMPEST_PROSPERO': {'x': xs, 'y': ys}}
  layouts._write_leaf(str(folder), {'train': role, 'test': role}, files=1)  # pylint: disable=W0212
  assert prepare.main(['import', str(folder)]) == 0
  ds = sources.load('shakespeare')
  assert ds.num_classes == 80 and ds.vocab_size == 80 and len(set(ds.y_train.tolist())) < 20


def test_bad_folders_are_one_line(tmp_path):
  with pytest.raises(fedjax_drift.UserError, match='holds neither TFF'):
    sources.load('femnist', str(tmp_path))
  (tmp_path / 'train').mkdir()
  (tmp_path / 'test').mkdir()
  (tmp_path / 'train' / 'a.json').write_text(json.dumps({'users': ['u'], 'user_data': {}}))
  (tmp_path / 'test' / 'a.json').write_text('{}')
  with pytest.raises(fedjax_drift.UserError, match="a.json is not in LEAF's layout"):
    sources.load('femnist', str(tmp_path))
  layouts.write_shakespeare_leaf(str(tmp_path / 'lines'))
  with pytest.raises(fedjax_drift.UserError, match=r"x are not FEMNIST images \(784 floats"):
    sources.load('femnist', str(tmp_path / 'lines'))
  import h5py  # pylint: disable=g-import-not-at-top
  h5 = tmp_path / 'h5'
  h5.mkdir()
  for split in ('train', 'test'):
    with h5py.File(h5 / f'fed_emnist_{split}.h5', 'w') as f:
      f.create_group('examples/w0').create_dataset('label', data=[1])
  with pytest.raises(fedjax_drift.UserError, match='client w0 lacks pixels'):
    sources.load('femnist', str(h5))


def _config(dataset, data_dir, **kw):
  base = dict(dataset=dataset, data_dir=data_dir, partition='natural',
              rounds=2, local_steps=2, local_epochs=0, batch_size=4, clients_per_round=2,
              progress=False, eval_every=1, lr=0.05)
  return fedjax_drift.Config(**dict(base, **kw))


@pytest.mark.parametrize('dataset,writer,kw', [
    ('femnist', layouts.write_femnist_leaf, dict(model='cnn_emnist', num_clients=3,
                                                 partition='natural:writer')),
    ('shakespeare', layouts.write_shakespeare_h5, dict(model='char_lstm', num_clients=2))])
@pytest.mark.slow
def test_two_rounds_on_the_files_own_clients(tmp_path, dataset, writer, kw):
  writer(str(tmp_path / 'data'))
  ds = sources.load(dataset, str(tmp_path / 'data'))  # every client
  column = ds.groups[natural.COLUMNS[dataset]]
  assert common.usual_model(dataset) == kw['model']
  config = _config(dataset, str(tmp_path / 'data'), out=str(tmp_path / 'run'), **kw)
  exp = fedjax_drift.prepare(config)
  # --num_clients below the files' clients: the seeded subset partitions.natural draws from
  # all of them, each a whole client of the files, and only their test examples.
  want = partitions.natural(column, kw['num_clients'], np.random.default_rng(config.seed))
  assert len(np.unique(column)) > kw['num_clients'] == len(exp.train_parts)
  for got, part in zip(exp.train_parts, want):
    np.testing.assert_array_equal(exp.dataset.x_train[got], ds.x_train[part])
    np.testing.assert_array_equal(exp.dataset.y_train[got], ds.y_train[part])
    assert len(set(column[part])) == 1
  picked = [column[p[0]] for p in want]
  test_ids = ds.groups_test[natural.COLUMNS[dataset]]
  np.testing.assert_array_equal(exp.dataset.y_test, ds.y_test[np.isin(test_ids, picked)])
  np.testing.assert_array_equal(exp.dataset.x_test, ds.x_test[np.isin(test_ids, picked)])
  summary = fedjax_drift.run(config, log=lambda *a, **k: None)
  with open(tmp_path / 'run' / 'summary.json') as f:
    assert json.load(f) is not None
  assert summary is not None
  assert os.path.isfile(tmp_path / 'run' / 'metrics.csv')


@pytest.mark.parametrize('kind', ['h5', 'leaf'])
def test_the_test_split_is_the_chosen_writers(tmp_path, kind, monkeypatch):
  """--num_clients=3 of 7 writers under --partition=natural: the training and test splits
  hold the drawn writers' examples only (the writers partitions.natural draws from all),
  from the files, the imported copy alike; all writers, or another partition: unchanged."""
  monkeypatch.setenv('FEDJAX_DRIFT_CACHE', str(tmp_path / 'cache'))
  write = layouts.write_femnist_h5 if kind == 'h5' else layouts.write_femnist_leaf
  clients = write(str(tmp_path / kind), writers=7)
  uids = sorted(clients['train'])
  every = sources.load('femnist', str(tmp_path / kind))
  for seed in (0, 5):
    drawn = partitions.natural(every.groups['writer'], 3, np.random.default_rng(seed))
    picked = [uids[int(every.groups['writer'][p[0]])] for p in drawn]
    want = _femnist_expected({s: {u: clients[s][u] for u in picked} for s in clients})
    for data_dir in (str(tmp_path / kind), None):
      ds = sources.load('femnist', data_dir, num_clients=3, seed=seed, partition='natural')
      _check_femnist(ds, want)
      np.testing.assert_array_equal(ds.groups_test['writer'], want['w_test'])
      if data_dir:
        assert prepare.main(['import', str(tmp_path / kind)]) == 0
  for options in (dict(num_clients=7, partition='natural:writer'),
                  dict(num_clients=3, partition='iid'), {}):
    same = sources.load('femnist', str(tmp_path / kind), seed=1, **options)
    for a, b in zip(same[1:5], every[1:5]):
      np.testing.assert_array_equal(a, b)
  np.testing.assert_array_equal(every.y_test, _femnist_expected(clients)['y_test'])


def test_a_cache_without_test_ids_refuses_a_subset(tmp_path, monkeypatch):
  monkeypatch.setenv('FEDJAX_DRIFT_CACHE', str(tmp_path / 'cache'))
  layouts.write_femnist_h5(str(tmp_path / 'tff'), writers=4)
  assert prepare.main(['import', str(tmp_path / 'tff')]) == 0
  path = common.imported_path('femnist')
  with np.load(path) as f:
    arrays = {k: f[k] for k in f.files if k != 'writer_test'}
  np.savez(path, **arrays)  # as an import before test ids were kept wrote it
  assert len(sources.load('femnist', num_clients=4, partition='natural').y_test)
  with pytest.raises(fedjax_drift.UserError, match='import the files again'):
    sources.load('femnist', num_clients=2, partition='natural')


def test_bare_natural_needs_exactly_one_group_column():
  assert partitions.natural_column('natural', ['writer'], 'femnist') == 'writer'
  assert partitions.natural_column('natural:role', ['writer'], 'x') == 'role'
  assert partitions.natural_column('iid', [], 'x') is None
  with pytest.raises(fedjax_drift.UserError, match='--dataset=embedded has no group column'):
    fedjax_drift.prepare(fedjax_drift.Config(partition='natural', num_clients=2,
                                             clients_per_round=2))
  with pytest.raises(fedjax_drift.UserError, match='group columns a, b; name one, e.g. '
                                                    '--partition=natural:a'):
    partitions.natural_column('natural', ['b', 'a'], 'npz:x.npz')


def test_another_seed_draws_other_writers(tmp_path):
  layouts.write_femnist_h5(str(tmp_path), writers=6)
  column = sources.load('femnist', str(tmp_path)).groups['writer']
  draws = {tuple(int(column[p[0]]) for p in partitions.natural(
      column, 2, np.random.default_rng(s))) for s in range(10)}
  assert len(draws) > 1 and all(len(set(d)) == 2 for d in draws)


# --- LEAF's character LSTM --------------------------------------------------------------------

def _sigmoid(z):
  return 1 / (1 + np.exp(-z))


def _numpy_char_lstm(p, ids, last):
  """LEAF's stacked_lstm.py forward in numpy: embedding lookup, two TF BasicLSTMCells (gates
  i, j, f, o from one kernel over [x, h]; forget bias 1), Dense on the output at `last`."""
  h_seq = np.asarray(p['embed']['embedding'])[ids]
  for k in range(2):
    w, b = (np.asarray(p[f'lstm{k}']['gates'][n], np.float64) for n in ('kernel', 'bias'))
    c = h = np.zeros((ids.shape[0], w.shape[1] // 4))
    outs = []
    for t in range(ids.shape[1]):
      i, j, f, o = np.split(np.concatenate([h_seq[:, t], h], 1) @ w + b, 4, axis=1)
      c = _sigmoid(f + 1.0) * c + _sigmoid(i) * np.tanh(j)
      h = np.tanh(c) * _sigmoid(o)
      outs.append(h)
    h_seq = np.stack(outs, 1)
  z = h_seq[np.arange(len(ids)), last]
  return z @ np.asarray(p['head']['kernel']) + np.asarray(p['head']['bias'])


def test_char_lstm_is_leafs_model():
  model = models.get('char_lstm', 80, (2, 80), vocab_size=80)
  params = model.init(jax.random.key(0))
  shapes = jax.tree.map(lambda a: a.shape, params)
  assert shapes == {'embed': {'embedding': (80, 8)},
                    'lstm0': {'gates': {'kernel': (8 + 256, 1024), 'bias': (1024,)}},
                    'lstm1': {'gates': {'kernel': (256 + 256, 1024), 'bias': (1024,)}},
                    'head': {'kernel': (256, 80), 'bias': (80,)}}
  assert registry.get('model', 'char_lstm').info.family == 'text'
  # TF's Glorot-uniform kernels, zero biases: |W| <= sqrt(6 / (fan_in + fan_out)).
  kernel = np.asarray(params['lstm1']['gates']['kernel'])
  assert np.abs(kernel).max() <= np.sqrt(6 / (512 + 1024)) and kernel.std() > 0.01
  assert not np.any(np.asarray(params['lstm0']['gates']['bias']))
  torch = models.get('char_lstm', 80, (2, 80), vocab_size=80, init='torch').init(
      jax.random.key(0))
  assert np.abs(np.asarray(torch['lstm0']['gates']['bias'])).max() <= 1 / 16  # 1/sqrt(256)
  # The forward pass, on short windows (one padded to its last real token), against numpy.
  rng = np.random.default_rng(0)
  ids = rng.integers(0, 80, (3, 6)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, 4:] = 0
  short = models.get('char_lstm', 80, (2, 6), vocab_size=80)
  logits = np.asarray(short.apply(params, np.stack([ids, mask], 1)))
  assert logits.shape == (3, 80)
  np.testing.assert_allclose(logits, _numpy_char_lstm(params, ids, mask.sum(1) - 1),
                             rtol=2e-4, atol=2e-5)
  assert recurrent.FORGET_BIAS == 1.0

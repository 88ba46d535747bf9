"""--val_source=dataset: the dataset's own validation split (SST-5's dev.txt, a text: validation
file, an npz's x_val/y_val) is the run's validation split. It sits after the training examples
on the device, no client trains on it, every evaluation scores it, and a sweep selects on it."""
import csv
import dataclasses

import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import applies, evaluation, stats, study
from fedjax_drift.data import sources
from helpers import tiny_config


def _npz_with_val(path, n_val=12, drop=None):
  """The conftest problem (60 train / 30 test, 3 classes, 6 features) plus n_val validation
  examples drawn the same way; drop: leave out 'x_val' or 'y_val'."""
  rng = np.random.default_rng(0)
  centers = rng.normal(size=(3, 6)) * 2

  def split(n):
    y = rng.integers(0, 3, n)
    return (centers[y] + rng.normal(size=(n, 6))).astype(np.float32), y.astype(np.int64)

  arrays = {}
  for name, n in (('train', 60), ('test', 30), ('val', n_val)):
    arrays[f'x_{name}'], arrays[f'y_{name}'] = split(n)
  arrays.pop(drop, None)
  np.savez(path, **arrays)
  return str(path), arrays


@pytest.fixture(scope='module')
def val_npz(tmp_path_factory):
  return _npz_with_val(tmp_path_factory.mktemp('val') / 'with_val.npz')


def test_npz_reader_carries_the_validation_split(val_npz):
  path, arrays = val_npz
  ds = sources.load(f'npz:{path}')
  assert np.array_equal(ds.x_val, arrays['x_val']) and ds.y_val.dtype == np.int32
  assert np.array_equal(ds.y_val, arrays['y_val'])
  assert ds.x_train.shape == (60, 6)  # the training set is untouched


def test_split_is_appended_after_the_training_examples(val_npz, unequal_partition):
  path, arrays = val_npz
  exp = study.prepare(tiny_config(path, unequal_partition, val_source='dataset'))
  assert exp.validation.index.tolist() == list(range(60, 72))
  assert (exp.validation.owner == -1).all()  # the server's: scored by the global model
  assert np.concatenate(exp.train_parts).max() < 60  # clients index the training rows only
  assert np.array_equal(np.asarray(exp.data.x)[60:], arrays['x_val'])
  assert np.array_equal(np.asarray(exp.data.y)[60:], arrays['y_val'])
  plain = study.prepare(tiny_config(path, unequal_partition))
  assert all(np.array_equal(a, b) for a, b in zip(exp.train_parts, plain.train_parts))
  assert plain.validation is None


def test_auto_selection_picks_the_dataset_split():
  config = fedjax_drift.Config(val_source='dataset')
  assert config.has_validation and config.resolved_select_on() == 'validation'
  assert not fedjax_drift.Config().has_validation
  assert not applies.warning(config)  # --val_source=dataset is read without --val_fraction


@pytest.mark.parametrize('flags,match', [
    (dict(val_source='dataset', val_fraction=0.1),
     '--val_source=dataset .*--val_fraction=0.1'),
    (dict(val_source='dataset', scenario='longtail_stateless'),
     '--val_source=dataset: --scenario=longtail_stateless'),
])
def test_bad_flags_are_one_line(flags, match):
  with pytest.raises(fedjax_drift.UserError, match=match) as e:
    fedjax_drift.Config(**flags).validate()
  assert '\n' not in str(e.value)


def test_a_dataset_without_its_own_split_is_named(tiny_npz, unequal_partition):
  with pytest.raises(fedjax_drift.UserError,
                     match=r'--val_source=dataset: --dataset=npz:.*tiny.npz has no validation'):
    study.prepare(tiny_config(tiny_npz, unequal_partition, val_source='dataset'))


def test_client_protocols_are_refused():
  config = fedjax_drift.Config(algo='local_only', val_source='dataset')
  with pytest.raises(fedjax_drift.UserError, match='--val_source=dataset: --eval_protocol=local'):
    evaluation.check_validation(study.eval_protocol(config), config.val_source,
                                config.val_fraction)


def test_half_a_split_is_one_line(tmp_path):
  path, _ = _npz_with_val(tmp_path / 'half.npz', drop='y_val')
  with pytest.raises(fedjax_drift.UserError, match='needs both x_val and y_val'):
    sources.load(f'npz:{path}')


def test_label_names_the_dataset_split():
  text = stats.selection_label('validation', 0.0, 'dataset', 'final',
                               stats.own_split_name('sst5'))
  assert "SST-5's official dev split" in text and '0 of' not in text


@pytest.mark.slow
def test_sweep_scores_and_selects_on_the_split_and_resumes(val_npz, unequal_partition, tmp_path):
  from fedjax_drift import simulation
  path, arrays = val_npz
  config = tiny_config(path, unequal_partition, val_source='dataset', rounds=2,
                       grid='lr:0.001,0.5', out=str(tmp_path / 'whole'))
  summary = fedjax_drift.run(config, log=lambda *_: None)
  rows = list(csv.DictReader(open(tmp_path / 'whole' / 'metrics.csv')))
  exp = study.prepare(dataclasses.replace(config, grid=''))
  logits = np.asarray(exp.model.apply(exp.state.params, arrays['x_val']))  # round 0
  for r in (r for r in rows if r['round'] == '0'):
    assert float(r['val_accuracy']) == pytest.approx(
        np.mean(logits.argmax(-1) == arrays['y_val']), abs=1e-6)
  runs = list(csv.DictReader(open(tmp_path / 'whole' / 'runs.csv')))
  by_lr = {float(r['lr']): float(r['val_last10_mean_accuracy']) for r in runs}
  assert summary['selected']['select_on'] == 'validation'
  assert summary['selected']['grid_point'] == {'lr': max(by_lr, key=by_lr.get)}
  part = dataclasses.replace(config, rounds=1, out=str(tmp_path / 'part'))
  fedjax_drift.run(part, log=lambda *_: None)
  simulation.resume(str(tmp_path / 'part'), log=lambda *_: None, rounds=2)
  read = lambda d: [{k: v for k, v in r.items() if k != 'elapsed_s'}
                    for r in csv.DictReader(open(tmp_path / d / 'metrics.csv'))]
  assert read('part') == read('whole')


def test_tables_name_each_rows_split():
  from fedjax_drift import tables
  row = lambda dataset, fraction, source: {
      'method': 'fedavg', 'select_on': 'validation',
      'config': {'dataset': dataset, 'val_fraction': fraction, 'val_source': source}}
  results = {'metric': 'final', 'selection': {'select_on': 'validation', 'val_fraction': 0.1,
                                              'val_source': 'clients'},
             'scenarios': {'AG News': [row('ag_news', 0.1, 'clients')],
                           'SST-5': [row('sst5', 0.0, 'dataset')]}}
  lines = tables.protocol_lines(results)
  assert sum("SST-5's official dev split" in l for l in lines) == 1
  assert sum("0.1 of each client's training examples" in l for l in lines) == 1


def test_sst5_dev_is_the_split(tmp_path):
  import layouts  # pylint: disable=g-import-not-at-top
  expected = layouts.write_sst5_zip(str(tmp_path))
  config = fedjax_drift.Config(dataset='sst5', data_dir=str(tmp_path), model='text_bag',
                               num_clients=2, clients_per_round=2, partition='iid',
                               max_seq_len=16, vocab_size=200, val_source='dataset',
                               progress=False)
  exp = study.prepare(config)
  n, m = len(exp.dataset.y_train), len(expected['val'][1])
  assert exp.validation.index.tolist() == list(range(n, n + m))
  assert np.array_equal(np.asarray(exp.data.x)[n:], exp.dataset.x_val)
  assert np.asarray(exp.data.y)[n:].tolist() == list(expected['val'][1])
  with pytest.raises(fedjax_drift.UserError, match='--dataset=sst5 has no validation split'):
    layouts.write_sst5_zip(str(tmp_path / 'no_dev'), dev=False)
    study.prepare(dataclasses.replace(config, data_dir=str(tmp_path / 'no_dev')))

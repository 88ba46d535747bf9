"""Validation splits (--val_fraction, --val_source), selection (--select_on) and statistics over
seeds (fedjax_drift/stats.py): the split is seeded and paired across methods, scored at every
evaluation, and a sweep picks its point by it; intervals and paired differences match a hand
computation."""
import csv
import dataclasses
import json
import math

import jax
import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import stats, study
from fedjax_drift.data import partitions
from helpers import tiny_config

# Student's t quantiles t_{0.975, df}, from a printed table (not from scipy).
T975 = {1: 12.7062047, 2: 4.3026527, 3: 3.1824463}


def test_client_holdout_is_disjoint_seeded_and_sized():
  parts = [np.arange(0, 10), np.arange(10, 13), np.arange(13, 14)]
  train, val = partitions.client_holdout(parts, 0.25, seed=4)
  for p, t, v in zip(parts, train, val):
    assert sorted(np.concatenate([t, v]).tolist()) == p.tolist()
    assert not set(t) & set(v) and len(t) >= 1
  assert [len(v) for v in val] == [2, 1, 0]  # round(2.5) = 2, round(0.75) = 1, one stays
  again, _ = partitions.client_holdout(parts, 0.25, seed=4)
  other, _ = partitions.client_holdout(parts, 0.25, seed=5)
  assert all(np.array_equal(a, b) for a, b in zip(train, again))
  assert not all(np.array_equal(a, b) for a, b in zip(train, other))


def test_server_holdout_slices_the_pool():
  labels = np.arange(60) % 3
  val, rest = partitions.server_holdout(np.arange(20, 60), 0.1, seed=0, labels=labels)
  assert len(val) == 4 and len(rest) == 36
  assert sorted(np.concatenate([val, rest]).tolist()) == list(range(20, 60))


def test_server_holdout_tail_is_the_last_share_of_each_class_in_file_order():
  pool = np.arange(20, 60)
  labels = (np.arange(60) >= 40).astype(int)  # class-ordered: the pool's 20 0s, then 20 1s
  val, rest = partitions.server_holdout(pool, 0.1, seed=0, order='tail', labels=labels)
  assert val.tolist() == [38, 39, 58, 59] and rest.tolist() == list(range(20, 38)) + list(
      range(40, 58))
  again, _ = partitions.server_holdout(pool, 0.1, seed=7, order='tail', labels=labels)
  assert np.array_equal(val, again)  # file order: the seed plays no part


def test_vote_draws_from_the_tail_split_and_clients_keep_the_rest():
  config = fedjax_drift.Config(model='logreg', num_clients=8, clients_per_round=2, rounds=1,
                               partition='dirichlet', val_fraction=0.1, val_source='server',
                               val_order='tail', algo='fedgkd_vote', vote_val_size=100,
                               seed=3, progress=False)
  run = study.prepare(config)
  y = run.dataset.y_train
  n = len(y)
  tail = []
  for c in range(run.dataset.num_classes):  # the last 10% of each class in file order
    mine = np.flatnonzero(y == c)
    tail += mine[len(mine) - round(0.1 * len(mine)):].tolist()
  assert run.validation.index.tolist() == sorted(tail)
  assert sorted(np.concatenate(run.train_parts).tolist()) == sorted(set(range(n)) - set(tail))
  assert run.server_data['y_val'].shape == (100,)
  assert set(run.vote_index) <= set(tail)
  with pytest.raises(fedjax_drift.UserError, match='--vote_val_size=9999 exceeds'):
    study.prepare(dataclasses.replace(config, vote_val_size=9999))


@pytest.mark.parametrize('source', ['clients', 'server'])
def test_split_is_the_same_for_every_method_at_a_seed(source):
  base = fedjax_drift.Config(model='logreg', num_clients=8, clients_per_round=2, rounds=1,
                             partition='dirichlet', val_fraction=0.1, val_source=source,
                             seed=3, progress=False)
  runs = [study.prepare(dataclasses.replace(base, algo=a)) for a in ('fedavg', 'fedprox')]
  a, b = runs
  assert np.array_equal(a.validation.index, b.validation.index)
  assert np.array_equal(a.validation.owner, b.validation.owner)
  assert all(np.array_equal(p, q) for p, q in zip(a.train_parts, b.train_parts))
  trained = np.concatenate(a.train_parts)
  assert not set(trained) & set(a.validation.index)  # no client trains on it
  n = len(a.dataset.y_train)
  if source == 'server':
    assert len(a.validation.index) == round(0.1 * n) and (a.validation.owner == -1).all()
  else:  # each client's own share, owned by it
    for i, part in enumerate(a.train_parts):
      held = a.validation.index[a.validation.owner == i]
      assert len(held) == partitions.holdout_count(len(part) + len(held), 0.1)
  other = study.prepare(dataclasses.replace(base, seed=4))
  assert not np.array_equal(other.validation.index, a.validation.index)


def test_without_val_fraction_nothing_changes():
  base = fedjax_drift.Config(model='logreg', num_clients=8, clients_per_round=2, rounds=1,
                             progress=False)
  exp = study.prepare(base)
  assert exp.validation is None
  assert sum(len(p) for p in exp.train_parts) == len(exp.dataset.y_train)


@pytest.mark.parametrize('flags,match', [
    (dict(val_fraction=1.0), '--val_fraction=1.0 must be in'),
    (dict(select_on='validation'), '--select_on=validation needs a validation split'),
    (dict(val_fraction=0.1, scenario='longtail_stateless'), 'longtail_stateless'),
    (dict(val_fraction=0.1, val_source='server', partition='file:x.json'),
     '--val_source=clients'),
])
def test_bad_selection_flags_are_one_line(flags, match):
  with pytest.raises(fedjax_drift.UserError, match=match):
    fedjax_drift.Config(**flags).validate()


@pytest.mark.slow
def test_val_accuracy_is_the_global_model_on_the_split(tiny_npz, unequal_partition, tmp_path):
  config = tiny_config(tiny_npz, unequal_partition, val_fraction=0.3, rounds=2,
                       out=str(tmp_path / 'run'))
  fedjax_drift.run(config, log=lambda *_: None)
  with open(tmp_path / 'run' / 'metrics.csv') as f:
    rows = list(csv.DictReader(f))
  assert [r['round'] for r in rows] == ['0', '1', '2']
  exp = study.prepare(config)
  x = exp.dataset.x_train[exp.validation.index]
  y = exp.dataset.y_train[exp.validation.index]
  logits = np.asarray(exp.model.apply(exp.state.params, x))  # round 0: the initial model
  assert float(rows[0]['val_accuracy']) == pytest.approx(np.mean(logits.argmax(-1) == y),
                                                         abs=1e-6)
  with open(tmp_path / 'run' / 'runs.csv') as f:
    run = next(csv.DictReader(f))
  vals = [float(r['val_accuracy']) for r in rows]
  assert float(run['val_final_accuracy']) == pytest.approx(vals[-1])
  peak = int(np.argmax(vals))
  assert float(run['test_at_best_val_accuracy']) == pytest.approx(
      float(rows[peak]['test_accuracy']))


def test_interval_and_paired_difference_by_hand():
  a = {0: 0.70, 1: 0.74, 2: 0.75}
  b = {0: 0.66, 1: 0.71, 2: 0.69, 3: 0.9}  # seed 3 has no partner: left out of the pairs
  ci = stats.interval(list(a.values()))
  mean = (0.70 + 0.74 + 0.75) / 3
  sd = math.sqrt(sum((v - mean) ** 2 for v in a.values()) / 2)
  assert ci['mean'] == pytest.approx(mean) and ci['n'] == 3
  assert ci['hi'] - mean == pytest.approx(T975[2] * sd / math.sqrt(3), rel=1e-6)
  d = stats.paired_difference(a, b)
  diffs = [0.04, 0.03, 0.06]
  dm = sum(diffs) / 3
  dsd = math.sqrt(sum((x - dm) ** 2 for x in diffs) / 2)
  assert d['seeds'] == [0, 1, 2] and d['mean'] == pytest.approx(dm)
  assert d['lo'] == pytest.approx(dm - T975[2] * dsd / math.sqrt(3), rel=1e-6)
  assert d['within_noise'] is False  # [0.0070, 0.0797]: above 0
  noisy = stats.paired_difference({0: 0.7, 1: 0.6}, {0: 0.65, 1: 0.62})
  assert noisy['within_noise'] is True and 'within noise' in stats.fmt_difference(noisy)
  one = stats.paired_difference({0: 0.7}, {0: 0.6})
  assert one['lo'] is None and one['within_noise'] is None
  assert stats.fmt_difference(one) == '+0.1000 (1 seed: no interval)'
  assert stats.fmt_interval(stats.interval([0.5])) == '0.5000 (1 seed)'


def test_sweep_selects_on_validation_and_reports_intervals(tiny_npz, unequal_partition,
                                                           tmp_path):
  config = tiny_config(tiny_npz, unequal_partition, val_fraction=0.3, rounds=1, seeds=2,
                       grid='lr:0.001,0.5', out=str(tmp_path / 'sweep'))
  summary = fedjax_drift.run(config, log=lambda *_: None)
  with open(tmp_path / 'sweep' / 'runs.csv') as f:
    runs = list(csv.DictReader(f))
  by_point = {}
  for r in runs:
    by_point.setdefault(float(r['lr']), []).append(r)
  for g in summary['grid_points']:
    mine = by_point[g['grid_point']['lr']]
    finals = [float(r['final_accuracy']) for r in mine]
    m = sum(finals) / 2
    half = T975[1] * abs(finals[0] - finals[1]) / math.sqrt(2) / math.sqrt(2)  # sd/√n, n=2
    assert g['final_accuracy']['mean'] == pytest.approx(m)
    assert g['final_accuracy']['ci95'] == pytest.approx([max(m - half, 0), min(m + half, 1)],
                                                    rel=1e-5)  # clipped to [0, 1]
  val_means = {lr: np.mean([float(r['val_last10_mean_accuracy']) for r in rs])
               for lr, rs in by_point.items()}
  chosen = summary['selected']
  assert chosen['select_on'] == 'validation' and chosen['by'] == 'val_last10_mean_accuracy'
  assert chosen['grid_point'] == {'lr': max(val_means, key=val_means.get)}
  point = next(g for g in summary['grid_points'] if g['grid_point'] == chosen['grid_point'])
  assert chosen['last10_mean_accuracy'] == point['last10_mean_accuracy']  # its test numbers
  written = json.loads((tmp_path / 'sweep' / 'summary.json').read_text())
  assert written['selected'] == chosen


# A preset whose test set disagrees with its training data: the test labels follow the
# training rule flipped (y = [x0 + noise > 0] in training, [x0 + noise <= 0] in test). A model
# that learns the training rule (lr=1) scores high on the validation split and low on test;
# one that barely moves from its random start (lr=1e-4) scores near chance on both. So
# selection on validation picks lr=1 and selection on test picks lr=1e-4, by construction.
def _flipped_npz(path, n_train=400, n_test=200, dim=4, seed=0):
  rng = np.random.default_rng(seed)
  x_train = rng.normal(size=(n_train, dim)).astype(np.float32)
  x_test = rng.normal(size=(n_test, dim)).astype(np.float32)
  rule = lambda x: x[:, 0] + 0.5 * rng.normal(size=len(x)) > 0  # label noise: no 100%
  np.savez(path, x_train=x_train, y_train=rule(x_train).astype(np.int64),
           x_test=x_test, y_test=(~rule(x_test)).astype(np.int64))
  return str(path)


def _tiny_preset(presets, npz):
  cited = lambda v: {'v': v, 'src': 'test'}
  raw = {'title': 'tiny', 'paper': 'FedProx (test)', 'metric': 'final', 'pipeline': 'none',
         'seeds': cited(2), 'grid': {'lr': cited([1e-4, 1.0])},
         'short': {'rounds': 2, 'seeds': 2, 'why': 'test'},
         'setting': {'dataset': cited(f'npz:{npz}'), 'model': cited('logreg'),
                     'partition': cited('iid'), 'num_clients': cited(4),
                     'clients_per_round': cited(4), 'rounds': cited(2), 'eval_every': cited(1),
                     'local_steps': cited(5), 'local_epochs': cited(0),
                     'batch_size': cited(32), 'target_accuracy': cited(0.9)},
         'scenarios': {'flipped': {}},
         'methods': {'fedavg': {'algo': 'fedavg'},
                     'fedprox': {'algo': 'fedprox', 'set': {'prox_mu': cited(1.0)}}}}
  return presets._normalise('tiny', raw)


@pytest.fixture
def presets_module(monkeypatch, tmp_path):
  import os
  import sys
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), 'experiments'))
  import presets  # pylint: disable=g-import-not-at-top
  monkeypatch.setitem(presets.PRESETS, 'tiny',
                      _tiny_preset(presets, _flipped_npz(tmp_path / 'flipped.npz')))
  return presets


def _by_hand_interval(values):
  m = sum(values) / len(values)
  sd = math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))
  half = T975[len(values) - 1] * sd / math.sqrt(len(values))
  return m, m - half, m + half


@pytest.mark.slow
def test_preset_selects_on_validation_and_reports_intervals(presets_module, tmp_path):
  presets = presets_module
  results = presets.run_preset('tiny', 'full', out_root=str(tmp_path / 'val'),
                               log=lambda *_: None)
  rows = {r['method']: r for r in results['scenarios']['flipped']}
  assert results['selection']['select_on'] == 'validation'
  assert results['references'] == ['fedavg', 'fedprox']  # FedAvg and the paper's own method
  for label, r in rows.items():
    assert r['select_on'] == 'validation'
    assert r['chosen'] == {'lr': 1.0} and r['chosen_on_test'] == {'lr': 1e-4}, label
    assert r['config']['val_fraction'] == 0.1
  # Intervals by hand from the chosen point's runs.csv.
  run_dir = tmp_path / 'val' / 'runs' / 'flipped-fedavg'
  with open(run_dir / 'runs.csv') as f:
    chosen = [r for r in csv.DictReader(f) if float(r['lr']) == 1.0]
  finals = {int(r['seed']): float(r['final_accuracy']) for r in chosen}
  m, lo, hi = _by_hand_interval(list(finals.values()))
  fedavg = rows['fedavg']['final']
  assert (fedavg['mean'], fedavg['lo'], fedavg['hi']) == pytest.approx((m, lo, hi), rel=1e-6)
  # The paired difference by hand, over the shared seeds.
  with open(tmp_path / 'val' / 'runs' / 'flipped-fedprox' / 'runs.csv') as f:
    prox = {int(r['seed']): float(r['final_accuracy']) for r in csv.DictReader(f)
            if float(r['lr']) == 1.0}
  d = [prox[s] - finals[s] for s in sorted(finals)]
  dm, dlo, dhi = _by_hand_interval(d)
  table = (tmp_path / 'val' / 'table.md').read_text()
  assert stats.fmt_difference({'mean': dm, 'lo': dlo, 'hi': dhi,
                               'within_noise': dlo <= 0 <= dhi}) in table
  assert 'Selection on validation' in table and 'last-10% mean' in table
  assert 'final = final accuracy (at the last round)' in table
  assert '| fedavg | lr=1 | validation | lr=0.0001 | 2 |' in table
  assert '− fedavg' in table and '− fedprox' in table
  # results.json alone rebuilds the same tables (what a RESULTS.md rebuild reads).
  from fedjax_drift import tables
  assert tables.markdown(json.loads((tmp_path / 'val' / 'results.json').read_text())) in table

  test = presets.run_preset('tiny', 'full', out_root=str(tmp_path / 'test'), select_on='test',
                            log=lambda *_: None)
  for r in test['scenarios']['flipped']:
    assert r['select_on'] == 'test' and r['chosen'] == {'lr': 1e-4}
    assert r['config']['val_fraction'] == 0.0  # the papers' protocol: no split held out
  table = (tmp_path / 'test' / 'table.md').read_text()
  assert 'Selection on test (the papers\' protocol)' in table


@pytest.mark.slow
def test_local_only_validation_is_each_clients_own_model(tmp_path):
  config = fedjax_drift.Config(model='logreg', algo='local_only', test_partition='like_train',
                               rounds=0, num_clients=5, clients_per_round=5, val_fraction=0.2,
                               out=str(tmp_path / 'local'), progress=False)
  fedjax_drift.run(config, log=lambda *_: None)
  with open(tmp_path / 'local' / 'metrics.csv') as f:
    row = next(csv.DictReader(f))
  exp = study.prepare(config)
  models = exp.state.clients['local_only']['params']
  accs = []
  for c in range(5):
    idx = exp.validation.index[exp.validation.owner == c]
    params = jax.tree.map(lambda a, c=c: a[c], models)
    logits = np.asarray(exp.model.apply(params, exp.dataset.x_train[idx]))
    accs.append(np.mean(logits.argmax(-1) == exp.dataset.y_train[idx]))
  assert float(row['val_accuracy']) == pytest.approx(np.mean(accs), abs=1e-6)


@pytest.mark.slow
def test_resume_continues_the_validation_columns(tiny_npz, unequal_partition, tmp_path):
  from fedjax_drift import simulation
  whole = tiny_config(tiny_npz, unequal_partition, val_fraction=0.3, rounds=2, seeds=2,
                      out=str(tmp_path / 'whole'))
  fedjax_drift.run(whole, log=lambda *_: None)
  part = dataclasses.replace(whole, rounds=1, out=str(tmp_path / 'part'))
  fedjax_drift.run(part, log=lambda *_: None)
  simulation.resume(str(tmp_path / 'part'), log=lambda *_: None, rounds=2)
  read = lambda d: [{k: v for k, v in r.items() if k != 'elapsed_s'}
                    for r in csv.DictReader(open(tmp_path / d / 'metrics.csv'))]
  assert read('part') == read('whole') and 'val_accuracy' in read('whole')[0]


def test_compare_table_gives_intervals_and_says_what_it_reports(tmp_path):
  from fedjax_drift import compare
  (tmp_path / 'config.json').write_text(
      '{"algo": "fedavg", "dataset": "embedded", "_resolved": {"runs": ['
      '{"run": 0, "seed": 0}, {"run": 1, "seed": 1}, {"run": 2, "seed": 2}]}}')
  (tmp_path / 'runs.csv').write_text('run,seed,status,final_accuracy,best_accuracy\n'
                                     '0,0,ok,0.5,0.6\n1,1,ok,0.7,0.8\n2,2,ok,0.6,0.7\n')
  (tmp_path / 'metrics.csv').write_text('run,round,test_accuracy\n0,1,0.5\n1,1,0.7\n2,1,0.6\n')
  rows = compare.groups([compare.read_run_dir(str(tmp_path))])
  half = T975[2] * 0.1 / math.sqrt(3)  # the sample sd of 0.5, 0.7, 0.6 is 0.1
  assert rows[0]['final_accuracy_ci95_lo'] == pytest.approx(0.6 - half)
  text = compare.markdown(rows)
  assert f'[{100 * (0.6 - half):.2f}, {100 * (0.6 + half):.2f}]' in text
  assert 'final = at the last round' in text and '95% t-interval' in text


def test_val_source_without_a_split_is_named_unread():
  from fedjax_drift import applies
  assert '--val_source=server' in applies.warning(fedjax_drift.Config(val_source='server'))
  assert not applies.warning(fedjax_drift.Config(val_source='server', val_fraction=0.1))


@pytest.mark.slow
def test_fedbn_validation_is_each_clients_norms_mean_over_domains(tmp_path):
  from fedjax_drift.algorithms import fedbn
  from fedjax_drift.checkpoint import Checkpointer
  from test_domains import write_domain_npz
  npz = write_domain_npz(tmp_path / 'd.npz')
  config = fedjax_drift.Config(dataset=f'npz:{npz}', partition='domains', num_clients=4,
                               clients_per_round=2, model='mlp_bn', algo='fedbn', rounds=1,
                               eval_every=1, local_steps=2, local_epochs=0, batch_size=4,
                               lr=0.1, val_fraction=0.3, progress=False,
                               out=str(tmp_path / 'run'))
  fedjax_drift.run(config, log=lambda *_: None)
  exp = study.prepare(config)
  state, _ = Checkpointer(str(tmp_path / 'run')).restore(study.build(config).state)
  rows = state.clients['fedbn']['norms']
  params = jax.tree.map(lambda a: a[0], state.params)
  domains = exp.dataset.domains_train
  correct, count = np.zeros(3), np.zeros(3)
  for c in range(4):
    idx = exp.validation.index[exp.validation.owner == c]
    own = fedbn.with_norm_leaves(params, [r[0, c] for r in rows])
    pred = np.asarray(exp.model.apply(own, exp.dataset.x_train[idx])).argmax(-1)
    np.add.at(correct, domains[idx], pred == exp.dataset.y_train[idx])
    np.add.at(count, domains[idx], 1)
  with open(tmp_path / 'run' / 'metrics.csv') as f:
    last = list(csv.DictReader(f))[-1]
  present = count > 0
  assert float(last['val_accuracy']) == pytest.approx(
      np.mean(correct[present] / count[present]), abs=1e-6)

"""Held-out splits that cover every class, and splits.csv (fedjax_drift/splits.py).

--val_order=tail holds out the last share of each class in file order, so that readers that
order images class by class (CIFAR-10's JPEG folders, the Tiny-ImageNet zip) hold out 10% of
every class, as the pickled CIFAR-10 tarball (random order) does; hold-outs that would miss a
class, or take all of one, are refused in one line naming --val_order; a partition that gives
no client some test class is said in one line; every run directory records what each split
holds (splits.csv), for single runs, sweeps and resumes.
"""
import csv
import dataclasses
import json

import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import splits, study
from fedjax_drift.data import partitions
import fixtures
import layouts

# FedGKD's presets: 10% of the training set held out on the server, in file order.
FEDGKD = dict(val_fraction=0.1, val_source='server', val_order='tail', algo='fedgkd_vote',
              vote_val_size=5, model='logreg', num_clients=4, clients_per_round=2, rounds=1,
              partition='iid', progress=False, batch_size=10, local_steps=1, local_epochs=0)


def _stand_in(kind, root):
  """(--dataset, --data_dir) of a 10-class stand-in with 10 training images of each class."""
  if kind == 'cifar10_jpeg':  # {train,test}/<class>/*.jpg: read class by class
    fixtures.write_cifar10_jpeg_dir(str(root / 'jpeg'), per_class=10)
    return 'cifar10', str(root / 'jpeg')
  if kind == 'tiny_imagenet_zip':  # train/<wnid>/images/*.JPEG: read class by class
    layouts.write_tiny_imagenet_zip(str(root / 'tiny'), classes=10, per_class=10)
    return 'tiny_imagenet', str(root / 'tiny')
  ordered = kind == 'cifar10_tar_ordered'
  fixtures.write_cifar10_python(str(root / 'cifar-10-python.tar.gz'), class_ordered=ordered)
  return 'cifar10', str(root)


def _is_class_ordered(y):
  return bool(np.all(np.diff(y) >= 0))


@pytest.mark.parametrize('kind,ordered', [('cifar10_jpeg', True), ('tiny_imagenet_zip', True),
                                          ('cifar10_tar_ordered', True),
                                          ('cifar10_tar', False)])
def test_fedgkd_holds_out_ten_percent_of_each_class_on_every_reader(tmp_path, kind, ordered):
  dataset, data_dir = _stand_in(kind, tmp_path)
  exp = study.prepare(fedjax_drift.Config(dataset=dataset, data_dir=data_dir, **FEDGKD))
  y = exp.dataset.y_train
  assert _is_class_ordered(y) == ordered  # the stand-in is in the order the test names
  assert np.bincount(y).tolist() == [10] * 10
  held = y[exp.validation.index]
  assert np.bincount(held, minlength=10).tolist() == [1] * 10  # 10% of each class
  for c in range(10):  # the last one of each class in file order
    assert exp.validation.index[held == c][0] == np.flatnonzero(y == c)[-1]
  trained = np.concatenate(exp.train_parts)
  assert np.bincount(y[trained], minlength=10).tolist() == [9] * 10  # clients: 9 of each
  assert not set(trained) & set(exp.validation.index)
  assert set(exp.vote_index) <= set(exp.validation.index)  # the vote's examples: from it
  # splits.csv's rows sum to each split's size, and name the right labels
  rows = list(csv.DictReader(splits.csv_text([exp]).splitlines()))
  total = {}
  for r in rows:
    total[r['split']] = total.get(r['split'], 0) + int(r['count'])
  assert total == {'train': 90, 'server_val': 10, 'vote_val': 5, 'test': len(exp.dataset.y_test)}
  server = {int(r['label']): int(r['count']) for r in rows if r['split'] == 'server_val'}
  assert server == {c: 1 for c in range(10)}
  assert {int(r['client']) for r in rows if r['split'] == 'server_val'} == {-1}
  assert splits.coverage_warning(exp.config.partition, [exp]) == ''


def test_the_stratified_tail_is_close_to_the_code_s_tail_on_a_random_order():
  """On a shuffle of CIFAR-10's labels, the class-covering tail has the plain tail's size and
  nearly all of its examples (the plain tail's class counts spread around 500)."""
  for seed in range(3):
    y = np.random.default_rng(seed).permutation(np.repeat(np.arange(10), 5000))
    val, rest = partitions.server_holdout(np.arange(50_000), 0.1, 0, 'tail', y)
    assert np.bincount(y[val]).tolist() == [500] * 10 and len(rest) == 45_000
    assert len(np.intersect1d(val, np.arange(45_000, 50_000))) >= 0.97 * 5000


def test_a_class_of_one_example_is_refused_naming_val_order():
  y = np.array([0] * 10 + [1] * 10 + [2])
  with pytest.raises(fedjax_drift.UserError, match=r'--val_order=tail .*class\(es\) 2 have a '
                     'single training example'):
    partitions.server_holdout(np.arange(21), 0.1, 0, 'tail', y)
  # a random draw either misses the class or takes its only example: refused either way
  with pytest.raises(fedjax_drift.UserError, match='--val_order=random') as e:
    partitions.server_holdout(np.arange(21), 0.1, 0, 'random', y)
  assert '\n' not in str(e.value) and '--val_order=tail' in str(e.value)


def test_a_random_draw_that_misses_a_class_is_refused():
  y = np.array([0] * 50 + [1] * 50 + [2] * 2)
  refused = 0
  for seed in range(10):
    try:
      val, rest = partitions.server_holdout(np.arange(len(y)), 0.1, seed, 'random', y)
    except fedjax_drift.UserError as e:
      assert 'holds out no example of class(es) 2' in str(e) and '--val_order' in str(e)
      refused += 1
    else:
      assert set(y[val]) == set(y[rest]) == {0, 1, 2}
  assert refused  # class 2's 2 of 102 examples: most draws of 10 miss it


def _npz_and_partition(tmp_path, y, parts):
  rng = np.random.default_rng(0)
  path = tmp_path / 'data.npz'
  np.savez(path, x_train=rng.normal(size=(len(y), 4)).astype(np.float32), y_train=y,
           x_test=rng.normal(size=(6, 4)).astype(np.float32), y_test=np.arange(6) % 3)
  part = tmp_path / 'parts.json'
  part.write_text(json.dumps(parts))
  return f'npz:{path}', f'file:{part}'


def test_client_hold_outs_that_drop_a_class_are_refused_naming_val_order(tmp_path):
  # class 2 has one example, on client 0: its own 10% either holds it out (no client trains
  # on class 2) or keeps it (validation never scores class 2)
  y = np.array([0, 1] * 10 + [2])
  dataset, partition = _npz_and_partition(tmp_path, y, [list(range(0, 10)) + [20],
                                                         list(range(10, 20))])
  config = fedjax_drift.Config(dataset=dataset, partition=partition, num_clients=2,
                               clients_per_round=2, model='logreg', val_fraction=0.1,
                               progress=False)
  for seed in range(3):
    with pytest.raises(fedjax_drift.UserError, match=r'--val_source=clients .*class\(es\) [0-9, ]*2 '
                       r'.*--val_order=tail') as e:
      study.prepare(dataclasses.replace(config, seed=seed))
    assert '\n' not in str(e.value)


SHARDS = dict(model='logreg', num_clients=3, clients_per_round=3, rounds=1, partition='shards',
              classes_per_client=1, seeds=2, progress=False, eval_every=1, local_steps=1,
              local_epochs=0, batch_size=10)


def test_a_partition_without_some_test_class_is_one_warning_line():
  config = fedjax_drift.Config(**SHARDS)
  experiments = study.build(config).experiments
  missing = splits.untrained_test_classes(experiments[0])
  assert len(missing) == 7  # three single-class clients of 10 classes
  line = splits.coverage_warning(config.partition, experiments)
  assert line.startswith('warning: --partition=shards gives no client class(es) '
                         f'{", ".join(map(str, missing))} of the test set (')
  assert '2 of 2 runs; seed 0' in line and 'the run continues' in line and '\n' not in line
  assert '(700 of its 1000 examples; seed 0)' in splits.coverage_warning(config.partition,
                                                                         experiments[:1])
  # splits.csv: one set of rows per run of the sweep, each run's own partition
  rows = list(csv.DictReader(splits.csv_text(experiments).splitlines()))
  for k, exp in enumerate(experiments):
    own = splits.tables(exp)
    assert {s: [(int(r['client']), int(r['label']), int(r['count'])) for r in rows
                if r['run'] == str(k) and r['split'] == s] for s in own} == own
    trained = {label for _, label, _ in own['train']}
    assert len(trained) == 3 and not set(missing) & trained
    assert sum(n for _, _, n in own['test']) == len(exp.dataset.y_test)
    assert sum(n for _, _, n in own['train']) == sum(len(p) for p in exp.train_parts)


@pytest.mark.slow
def test_runs_write_splits_csv_warn_and_resume_whole(tmp_path):
  """A sweep writes every run's rows and says, once, that its partitions leave test classes
  to no client (and summary.json's warnings say it); --resume rewrites splits.csv with the same rows (none lost, none twice), also
  in a run directory from before splits.csv."""
  logs = []
  config = fedjax_drift.Config(**SHARDS, out=str(tmp_path / 'run'))
  fedjax_drift.run(config, log=logs.append)
  warned = [line for line in logs if line.startswith('warning: --partition')]
  assert len(warned) == 1 and warned[0] == splits.coverage_warning(
      config.partition, study.build(config).experiments)
  summary = json.loads((tmp_path / 'run' / 'summary.json').read_text())
  assert summary['warnings'][0] == warned[0].removeprefix('warning: ')  # and in summary.json
  path = tmp_path / 'run' / 'splits.csv'
  rows = splits.read(path)
  assert {r['run'] for r in rows} == {0, 1}
  assert len({(r['run'], r['split'], r['client'], r['label']) for r in rows}) == len(rows)
  record = json.loads((tmp_path / 'run' / '.fedjax-drift.json').read_text())
  assert 'splits.csv' in record['entries']  # the run's own: --overwrite removes it
  before = path.read_bytes()
  path.unlink()  # as a run from before splits.csv
  fedjax_drift.run(dataclasses.replace(config, rounds=2, resume=True), log=lambda *_: None)
  assert path.read_bytes() == before


def test_client_splits_are_rows_per_client(tmp_path):
  config = fedjax_drift.Config(model='logreg', num_clients=4, clients_per_round=2,
                               partition='dirichlet', val_fraction=0.1, progress=False,
                               test_partition='like_train')
  exp = study.prepare(config)
  per_split = splits.tables(exp)
  assert set(per_split) == {'train', 'client_val', 'test'}
  for i, part in enumerate(exp.train_parts):
    assert sum(n for c, _, n in per_split['train'] if c == i) == len(part)
    held = exp.validation.index[exp.validation.owner == i]
    assert sum(n for c, _, n in per_split['client_val'] if c == i) == len(held)
    assert sum(n for c, _, n in per_split['test'] if c == i) == len(exp.test_parts[i])
  assert sum(n for c, _, n in per_split['test'] if c == -1) == len(exp.dataset.y_test)
  labels = {(c, label) for c, label, _ in per_split['client_val']}
  assert all(0 <= c < 4 for c, _ in labels)


def test_the_dataset_s_own_validation_split_is_server_val(tmp_path):
  rng = np.random.default_rng(0)
  path = tmp_path / 'val.npz'
  np.savez(path, x_train=rng.normal(size=(30, 4)).astype(np.float32), y_train=np.arange(30) % 3,
           x_test=rng.normal(size=(6, 4)).astype(np.float32), y_test=np.arange(6) % 3,
           x_val=rng.normal(size=(5, 4)).astype(np.float32), y_val=np.array([2, 2, 1, 2, 0]))
  exp = study.prepare(fedjax_drift.Config(dataset=f'npz:{path}', val_source='dataset',
                                          model='logreg', num_clients=3, clients_per_round=3,
                                          progress=False))
  assert splits.tables(exp)['server_val'] == [(-1, 0, 1), (-1, 1, 1), (-1, 2, 3)]

import json
import types

import numpy as np
import pytest

from fedjax_drift.data import partitions
from fedjax_drift.errors import UserError

LABELS = np.random.default_rng(0).integers(0, 10, 2000)


@pytest.mark.parametrize('name', ['iid', 'shards', 'dirichlet', 'dirichlet_client', 'quantity'])
def test_disjoint_nonempty_and_deterministic(name):
  a = partitions.partition(name, LABELS, 20, seed=3, classes_per_client=2, dirichlet_alpha=0.3)
  b = partitions.partition(name, LABELS, 20, seed=3, classes_per_client=2, dirichlet_alpha=0.3)
  c = partitions.partition(name, LABELS, 20, seed=4, classes_per_client=2, dirichlet_alpha=0.3)
  flat = np.concatenate(a)
  assert len(a) == 20 and all(len(p) > 0 for p in a)
  assert len(np.unique(flat)) == len(flat), 'an example was assigned twice'
  assert all(np.array_equal(x, y) for x, y in zip(a, b)), 'not deterministic per seed'
  assert not all(np.array_equal(x, y) for x, y in zip(a, c)), 'seed has no effect'


@pytest.mark.parametrize('name', ['iid', 'dirichlet', 'quantity'])
def test_complete(name):
  parts = partitions.partition(name, LABELS, 20, seed=0, dirichlet_alpha=0.5)
  assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(len(LABELS)))


@pytest.mark.parametrize('s', [1, 2, 3])
def test_shards_at_most_s_labels_equal_sizes(s):
  parts = partitions.partition('shards', LABELS, 25, seed=0, classes_per_client=s)
  assert all(len(np.unique(LABELS[p])) <= s for p in parts)
  assert len({len(p) for p in parts}) == 1
  # Most data is used: only per-class remainders and surplus shards are dropped.
  assert sum(len(p) for p in parts) >= 0.8 * len(LABELS)


def test_dirichlet_reproducible_and_skewed():
  a = partitions.dirichlet(LABELS, 10, np.random.default_rng(5), alpha=0.1)
  b = partitions.dirichlet(LABELS, 10, np.random.default_rng(5), alpha=0.1)
  assert all(np.array_equal(x, y) for x, y in zip(a, b))
  hist = np.stack([np.bincount(LABELS[p], minlength=10) for p in a])
  share = hist.max(axis=1) / hist.sum(axis=1)
  assert share.mean() > 0.4  # alpha=0.1 concentrates each client on few labels


def test_impossible_splits_are_clear_errors(tmp_path):
  with pytest.raises(UserError, match='--classes_per_client'):
    partitions.partition('shards', LABELS, 10, 0, classes_per_client=11)
  with pytest.raises(UserError, match='--num_clients'):
    partitions.partition('iid', LABELS[:5], 10, 0)
  with pytest.raises(UserError, match='--partition=bogus'):
    partitions.partition('bogus', LABELS, 10, 0)
  path = tmp_path / 'p.json'

  def from_file():  # built through the registry, as a run builds it
    config = types.SimpleNamespace(partition=f'file:{path}', num_clients=2, seed=0,
                                   dataset='x')
    return partitions.client_parts(config, types.SimpleNamespace(y_train=LABELS),
                                   np.arange(len(LABELS)))

  path.write_text(json.dumps([[0, 1], [1, 2]]))
  with pytest.raises(UserError, match='more than once'):
    from_file()
  path.write_text(json.dumps([[0, 1], []]))
  with pytest.raises(UserError, match='empty'):
    from_file()
  path.write_text(json.dumps([[0, 99999]]))
  with pytest.raises(UserError, match=r'indices must lie'):
    from_file()
  with pytest.raises(UserError, match='does not split by labels'):
    partitions.partition(f'file:{path}', LABELS, 1, 0)


def test_test_split_follows_train_label_mix():
  train = partitions.partition('shards', LABELS, 10, 0, classes_per_client=2)
  test_labels = np.random.default_rng(1).integers(0, 10, 500)
  test = partitions.partition_like(train, LABELS, test_labels, 0, 10)
  flat = np.concatenate(test)
  assert len(np.unique(flat)) == len(flat) == 500
  for tr, te in zip(train, test):
    assert set(np.unique(test_labels[te])) <= set(np.unique(LABELS[tr]))

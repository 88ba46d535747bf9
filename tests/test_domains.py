"""Multi-domain data and natural partitions: --partition=domains for any dataset with domain
ids and any N >= the number of domains, --partition=natural:COLUMN, and the npz columns that
carry them (d_train, d_test, domain_names, <column>_train)."""
import numpy as np
import pytest

import fedjax_drift
from fedjax_drift.data import domains, partitions, sources


def write_domain_npz(path, num_domains=3, n_train=90, n_test=45, seed=0, writers=0):
  """A small learnable problem whose domains shift the inputs; optional writer ids."""
  rng = np.random.default_rng(seed)
  centers = rng.normal(size=(3, 6)) * 2

  def split(n):
    d = np.arange(n) % num_domains  # every domain present in both splits
    y = rng.integers(0, 3, n)
    x = centers[y] + rng.normal(size=(n, 6)) + 1.5 * d[:, None]
    return x.astype(np.float32), y, d

  (xtr, ytr, dtr), (xte, yte, dte) = split(n_train), split(n_test)
  extra = {'writer_train': rng.integers(0, writers, n_train)} if writers else {}
  np.savez(path, x_train=xtr, y_train=ytr, x_test=xte, y_test=yte, d_train=dtr, d_test=dte,
           domain_names=np.array([f'site {d}' for d in range(num_domains)]), **extra)
  return str(path)


@pytest.mark.parametrize('num_domains,num_clients', [(5, 7), (5, 10), (6, 7), (6, 10)])
def test_domain_partition_any_count(num_domains, num_clients):
  rng = np.random.default_rng(3)
  # Unequal domains: domain d has 20 + 7d training and 8 + d test examples.
  d_train = rng.permutation(np.repeat(np.arange(num_domains), 20 + 7 * np.arange(num_domains)))
  d_test = rng.permutation(np.repeat(np.arange(num_domains), 8 + np.arange(num_domains)))
  train, test, owner = domains.domain_partition(d_train, d_test, num_clients,
                                                np.random.default_rng(0))
  assert len(train) == len(test) == len(owner) == num_clients
  counts = np.bincount(owner, minlength=num_domains)
  base = num_clients // num_domains
  # floor(N/D) each; the N mod D extra clients go to the largest domains (the last ids here).
  extra = num_clients % num_domains
  np.testing.assert_array_equal(counts, [base + (d >= num_domains - extra)
                                         for d in range(num_domains)])
  np.testing.assert_array_equal(owner, np.sort(owner))  # numbered domain by domain
  for c in range(num_clients):
    assert set(d_train[train[c]]) == {owner[c]} and set(d_test[test[c]]) <= {owner[c]}
  for parts, n in ((train, len(d_train)), (test, len(d_test))):  # each example exactly once
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(n))
  # A domain's shares are near-equal.
  for d in range(num_domains):
    sizes = [len(train[c]) for c in np.flatnonzero(owner == d)]
    assert max(sizes) - min(sizes) <= 1


def test_one_client_per_domain_gets_the_whole_domain_test_set():
  d_train, d_test = np.array([0, 1, 2, 0, 1, 2]), np.array([2, 2, 0, 1])
  train, test, owner = domains.domain_partition(d_train, d_test, 3, np.random.default_rng(0))
  assert [t.tolist() for t in test] == [[2], [3], [0, 1]] and owner.tolist() == [0, 1, 2]


def test_domain_partition_errors(tmp_path):
  with pytest.raises(fedjax_drift.UserError, match='--num_clients=4 is fewer than the 5 domains'):
    domains.domain_partition(np.arange(10) % 5, np.arange(5), 4, np.random.default_rng(0))
  plain = tmp_path / 'plain.npz'
  np.savez(plain, x_train=np.zeros((6, 2), np.float32), y_train=np.arange(6) % 2,
           x_test=np.zeros((2, 2), np.float32), y_test=np.arange(2))
  with pytest.raises(fedjax_drift.UserError, match='--partition=domains needs a dataset with '
                                                    'domain ids'):
    fedjax_drift.prepare(fedjax_drift.Config(dataset=f'npz:{plain}', partition='domains',
                                             num_clients=2, clients_per_round=2, model='mlp'))


def test_npz_domains_reach_the_dataset_and_the_clients(tmp_path):
  path = write_domain_npz(tmp_path / 'd.npz', writers=4)
  ds = sources.load(f'npz:{path}')
  assert ds.domain_names == ('site 0', 'site 1', 'site 2') and ds.domains_test.dtype == np.int32
  assert set(ds.groups) == {'writer'}
  exp = fedjax_drift.prepare(fedjax_drift.Config(
      dataset=f'npz:{path}', partition='domains', num_clients=4, clients_per_round=2,
      model='mlp', seed=1))
  # Equal domains: the extra client goes to the lowest id.
  assert [set(ds.domains_train[p]) for p in exp.train_parts] == [{0}, {0}, {1}, {2}]
  for train, test in zip(exp.train_parts, exp.test_parts):
    assert set(ds.domains_test[test]) == set(ds.domains_train[train])


def test_digits_domains_is_a_dataset_with_domain_ids(tmp_path):
  from test_scenarios import write_digits  # pylint: disable=g-import-not-at-top
  write_digits(tmp_path)
  ds = sources.load('digits_domains', str(tmp_path))
  assert ds.domain_names == domains.DOMAINS
  assert set(ds.domains_train.tolist()) == set(ds.domains_test.tolist()) == set(range(6))


def test_natural_partition_ids_and_subset():
  ids = np.array([7, 3, 7, 9, 3, 3, 12, 9])
  everyone = partitions.natural(ids, 4, np.random.default_rng(0), 'writer')
  assert [p.tolist() for p in everyone] == [[1, 4, 5], [0, 2], [3, 7], [6]]  # id order 3,7,9,12
  a = partitions.natural(ids, 2, np.random.default_rng(5), 'writer')
  b = partitions.natural(ids, 2, np.random.default_rng(5), 'writer')
  assert [p.tolist() for p in a] == [p.tolist() for p in b]
  assert all(any(np.array_equal(p, q) for q in everyone) for p in a)  # whole writers only
  draws = {tuple(map(tuple, partitions.natural(ids, 2, np.random.default_rng(s), 'w')))
           for s in range(20)}
  assert len(draws) > 1  # the subset is seeded, not fixed
  with pytest.raises(fedjax_drift.UserError, match='--num_clients=5 exceeds the 4 clients of '
                                                    '--partition=natural:writer'):
    partitions.natural(ids, 5, np.random.default_rng(0), 'writer')


def test_natural_partition_through_a_run_config(tmp_path):
  path = write_domain_npz(tmp_path / 'w.npz', writers=5)
  ds = sources.load(f'npz:{path}')
  exp = fedjax_drift.prepare(fedjax_drift.Config(
      dataset=f'npz:{path}', partition='natural:writer', num_clients=3, clients_per_round=2,
      model='mlp'))
  assert len(exp.train_parts) == 3
  for p in exp.train_parts:  # one writer each, all of its examples
    (w,) = set(ds.groups['writer'][p])
    np.testing.assert_array_equal(p, np.flatnonzero(ds.groups['writer'] == w))
  with pytest.raises(fedjax_drift.UserError, match="no group column 'user'; it has writer"):
    fedjax_drift.prepare(fedjax_drift.Config(dataset=f'npz:{path}', partition='natural:user',
                                             num_clients=3, clients_per_round=2, model='mlp'))
  with pytest.raises(fedjax_drift.UserError, match='needs a group column'):
    fedjax_drift.Config(partition='natural:').validate()

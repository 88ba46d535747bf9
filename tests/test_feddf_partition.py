"""--partition=feddf against a numpy transcription of the FedDF/FedGKD authors' dealer.

The transcription below follows pcode/datasets/partition_data.py of CGCL-codes/FedGKD (the
same as FedDF's epfml code) step by step, in its own control flow (a while loop on the minimum
size, ratio-based group cuts, a flat concatenation cut by partition sizes), with the same
numpy RandomState draws, so equal output means the same partition for the same seed.
"""
import math

import numpy as np
import pytest

from fedjax_drift.data import partitions
from fedjax_drift.errors import UserError


def authors_steps(targets, n_workers, alpha, random_state):
  """The code's build_non_iid_by_dirichlet + partition_indices, transcribed."""
  num_indices = len(targets)
  num_classes = len(np.unique(targets))
  indices2targets = np.array([(i, t) for i, t in enumerate(targets)])
  random_state.shuffle(indices2targets)
  auxi = 10
  num_splits = math.ceil(n_workers / auxi)
  split_n = [auxi if i < num_splits - 1 else n_workers - auxi * (num_splits - 1)
             for i in range(num_splits)]
  pieces, start = [], 0
  for i in range(len(split_n)):
    stop = start + int(auxi / n_workers * num_indices)
    pieces.append(indices2targets[start:(num_indices if i == num_splits - 1 else stop)])
    start = stop
  idx_batch, left = [], n_workers
  for piece in pieces:
    piece_size = len(piece)
    k = min(auxi, left)
    left -= auxi
    min_size = 0
    while min_size < int(0.50 * piece_size / k):
      batch = [[] for _ in range(k)]
      for c in range(num_classes):
        members = piece[np.where(piece[:, 1] == c)[0], 0]
        p = random_state.dirichlet(np.repeat(alpha, k))
        p = np.array([q * (len(b) < piece_size / k) for q, b in zip(p, batch)])
        p = p / p.sum()
        p = (np.cumsum(p) * len(members)).astype(int)[:-1]
        batch = [b + m.tolist() for b, m in zip(batch, np.split(members, p))]
        min_size = min(len(b) for b in batch)
    idx_batch += batch
  flat = []
  for b in idx_batch:
    flat = flat + b
  parts, start = [], 0
  for size in [1.0 / n_workers] * n_workers:
    stop = start + int(size * num_indices)
    parts.append(flat[start:stop])
    start = stop
  return parts


@pytest.mark.parametrize('n_clients,n,alpha', [(20, 1003, 0.1), (25, 800, 1.0), (10, 300, 0.5)])
def test_matches_the_authors_steps_draw_for_draw(n_clients, n, alpha):
  labels = np.random.default_rng(n).integers(0, 10, n)
  ours = partitions.feddf(labels, n_clients, np.random.RandomState(7), alpha)
  theirs = authors_steps(labels, n_clients, alpha, np.random.RandomState(7))
  assert len(ours) == len(theirs) == n_clients
  for a, b in zip(ours, theirs):
    assert np.array_equal(a, np.sort(np.asarray(b)))


def test_equal_sizes_skewed_labels_and_registered():
  labels = np.random.default_rng(0).integers(0, 10, 10000)
  parts = partitions.partition('feddf', labels, 20, seed=3, dirichlet_alpha=0.1)
  assert {len(p) for p in parts} == {500}  # FedGKD's "500 each"; dirichlet gives 21..1,413
  flat = np.concatenate(parts)
  assert len(np.unique(flat)) == len(flat) == 10000
  top = [np.bincount(labels[p], minlength=10).max() / len(p) for p in parts]
  assert np.mean(top) > 0.3  # alpha=0.1: skewed (an IID split gives about 0.12)
  again = partitions.partition('feddf', labels, 20, seed=3, dirichlet_alpha=0.1)
  assert all(np.array_equal(a, b) for a, b in zip(parts, again))


def test_remainder_is_dropped_and_errors_name_the_flag():
  labels = np.random.default_rng(1).integers(0, 10, 1005)
  parts = partitions.feddf(labels, 20, np.random.RandomState(0), 0.5)
  assert sum(len(p) for p in parts) == 20 * 50
  with pytest.raises(UserError, match='--dirichlet_alpha'):
    partitions.feddf(labels, 20, np.random.RandomState(0), 0.0)
  with pytest.raises(UserError, match='--partition=feddf'):
    partitions.feddf(labels[:30], 20, np.random.RandomState(0), 0.5)

"""FedDistill+ (algorithms/feddistill.py) against a numpy computation of its update rule.

Same tiny setting as test_algorithms.py: logistic regression, four clients of sizes 5, 9, 14
and 20, minibatches of 4, one local epoch (so the per-label logit pass covers exactly the
training batches), two clients per round.
"""
import chex
import numpy as np
import pytest

import fedjax_drift
from fedjax_drift.algorithms.feddistill import aggregate_table
from reference import softmax
from test_algorithms import LR, _fedavg_params, flat, local_sgd, make, run_lockstep, weights
from helpers import check_sweep_equals_single_runs_and_resumes, run_rounds


class FedDistillPlus:
  """docs/algorithms.md, FedDistill+: CE + lambda * seen[y] KL(softmax(G[y]/tau) || softmax(z/tau))
  locally; n_i/n parameter averaging; G[c] = mean over holders of their per-label averages of
  the final local model's raw logits; unheld labels keep their row."""

  def __init__(self, lam, tau, num_classes=3):
    self.lam, self.tau, self.c = lam, tau, num_classes
    self.table = np.zeros((num_classes, num_classes))
    self.seen = np.zeros(num_classes)

  def __call__(self, model, theta, ids, counts, batches, exp):
    def grad(w, x, y, mask):
      z = model.logits(w, x)
      target = softmax(self.table[y] / self.tau)
      kd = (softmax(z / self.tau) - target) / self.tau * self.seen[y][:, None]
      return model.grad(w, x, model.ce_dlogits(w, x, y) + self.lam * kd, mask)

    finals, averages = [], []
    for i in ids:
      w = local_sgd(model, theta, batches[i], grad)
      finals.append(w)
      sums, n = np.zeros((self.c, self.c)), np.zeros(self.c)
      for x, y, mask in batches[i]:
        z = model.logits(w, x)
        for row in range(len(y)):
          sums[y[row]] += mask[row] * z[row]
          n[y[row]] += mask[row]
      averages.append({c: sums[c] / n[c] for c in range(self.c) if n[c] > 0})
    for c in range(self.c):
      held = [a[c] for a in averages if c in a]
      if held:
        self.table[c] = np.mean(held, axis=0)
        self.seen[c] = 1.0
    p = weights(ids, counts)  # n_i / n, as FedAvg
    return sum(pi * w for pi, w in zip(p, finals))


def test_feddistill_plus_matches_numpy(tiny_npz, unequal_partition):
  exp = make(tiny_npz, unequal_partition, 'feddistill_plus', clients_per_round=2,
             distill_lambda=0.7, kd_temperature=2.0)
  reference = FedDistillPlus(0.7, 2.0)
  state = run_lockstep(exp, reference, rounds=3)
  np.testing.assert_allclose(np.asarray(state.server['feddistill']['table']), reference.table,
                             atol=2e-5, rtol=1e-4)
  np.testing.assert_array_equal(np.asarray(state.server['feddistill']['seen']), reference.seen)
  assert reference.seen.all() and np.abs(reference.table).max() > 0.1  # the term was live


def test_table_averages_only_holders_and_keeps_unheld_rows():
  old = np.full((3, 3), 7.0, np.float32)
  sums = np.zeros((2, 3, 3), np.float32)
  counts = np.zeros((2, 3), np.float32)
  sums[0, 0], counts[0, 0] = [2.0, 4.0, 6.0], 2.0    # client 0: label 0 average (1, 2, 3)
  sums[1, 0], counts[1, 0] = [3.0, 3.0, 3.0], 1.0    # client 1: label 0 average (3, 3, 3)
  sums[1, 1], counts[1, 1] = [-4.0, 0.0, 8.0], 4.0   # client 1 alone holds label 1
  table, seen = aggregate_table(old, np.array([0.0, 0.0, 1.0], np.float32), sums, counts)
  np.testing.assert_allclose(table, [[2.0, 2.5, 3.0], [-1.0, 0.0, 2.0], [7.0, 7.0, 7.0]])
  np.testing.assert_array_equal(seen, [1.0, 1.0, 1.0])


def test_lambda_zero_is_fedavg(tiny_npz, unequal_partition):
  exp = make(tiny_npz, unequal_partition, 'feddistill_plus', clients_per_round=2,
             distill_lambda=0.0)
  reference = _fedavg_params(tiny_npz, unequal_partition, clients_per_round=2,
                             weighting=fedjax_drift.algorithms.weighting(exp.config))
  chex.assert_trees_all_close(run_rounds(exp, 3).params, reference, atol=1e-6, rtol=1e-6)


@pytest.mark.slow
def test_two_seed_sweep_equals_single_runs_and_resumes(tiny_npz, tmp_path):
  """The table lives in the server state: vmapped over seeds, and checkpointed (round 2 of a
  run resumed after round 1 distils from the table round 1 built)."""
  check_sweep_equals_single_runs_and_resumes(tiny_npz, tmp_path, algo='feddistill_plus',
                                             model='logreg', distill_lambda=0.5)

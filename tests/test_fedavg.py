"""One FedAvg round against a numpy computation of McMahan et al.'s update, on logreg."""
import chex
import jax
import numpy as np
import pytest

import fedjax_drift
from helpers import cohort_and_batches, one_round, tiny_config
from reference import logreg_grad, to_numpy_params


def numpy_fedavg_round(W, b, ids, counts, batches, lr, weighting, server_lr=1.0):
  deltas, weights = [], []
  for cid in ids:
    w, c = W.copy(), b.copy()
    for x, y, mask in batches[int(cid)]:
      gw, gc = logreg_grad(w, c, x, y, mask)
      w, c = w - lr * gw, c - lr * gc
    deltas.append((W - w, b - c))
    weights.append(counts[cid] if weighting == 'examples' else 1.0)
  p = np.asarray(weights, np.float64) / np.sum(weights)
  dW = sum(pi * d[0] for pi, d in zip(p, deltas))
  db = sum(pi * d[1] for pi, d in zip(p, deltas))
  return W - server_lr * dW, b - server_lr * db


@pytest.mark.parametrize('weighting', ['examples', 'uniform'])
def test_full_batch_round_matches_numpy(tiny_npz, unequal_partition, weighting):
  exp = fedjax_drift.prepare(tiny_config(tiny_npz, unequal_partition, weighting=weighting))
  W, b = to_numpy_params(exp.state.params)
  ids, counts, batches = cohort_and_batches(exp)
  assert sorted(ids) == [0, 1, 2, 3]
  state, _ = one_round(exp)
  W1, b1 = numpy_fedavg_round(W, b, ids, counts, batches, 0.1, weighting)
  chex.assert_trees_all_close(to_numpy_params(state.params), (W1, b1), atol=1e-5, rtol=1e-5)


def test_minibatch_epochs_partial_cohort_matches_numpy(tiny_npz, unequal_partition):
  """Unequal clients, epochs with a partial last batch, K=2 of 4, local steps differing."""
  config = tiny_config(tiny_npz, unequal_partition, local_steps=0, local_epochs=2,
                       batch_size=4, clients_per_round=2, server_lr=0.7, lr=0.2)
  exp = fedjax_drift.prepare(config)
  state = exp.state
  for _ in range(2):  # check the second round too (fresh cohort, fresh shuffles)
    W, b = to_numpy_params(state.params)
    ids, counts, batches = cohort_and_batches(exp, state)
    assert {len(batches[int(c)]) for c in ids} == {2 * -(-int(counts[c]) // 4) for c in ids}
    new_state, _ = one_round(exp, state)
    W1, b1 = numpy_fedavg_round(W, b, ids, counts, batches, 0.2, 'examples', server_lr=0.7)
    chex.assert_trees_all_close(to_numpy_params(new_state.params), (W1, b1), atol=1e-5,
                                rtol=1e-5)
    state = new_state


def test_batches_cover_each_epoch_once(tiny_npz, unequal_partition):
  exp = fedjax_drift.prepare(tiny_config(tiny_npz, unequal_partition, local_steps=0,
                                         local_epochs=2, batch_size=4))
  _, counts, batches = cohort_and_batches(exp)
  for cid, steps in batches.items():
    spe = -(-int(counts[cid]) // 4)
    for epoch in range(2):
      seen = np.concatenate([x[m > 0] for x, _, m in steps[epoch * spe:(epoch + 1) * spe]])
      assert len(seen) == counts[cid]
      expected = np.asarray(exp.dataset.x_train)[exp.train_parts[cid]]
      assert np.allclose(np.sort(seen, axis=0), np.sort(expected, axis=0))

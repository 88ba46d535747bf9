"""Byzantine-robust aggregators: coordinate-wise median, trimmed mean and (multi-)Krum.

Papers: Yin, Chen, Ramchandran, Bartlett, "Byzantine-Robust Distributed Learning: Towards
Optimal Statistical Rates" (ICML 2018): the coordinate-wise median (Option I) and the
coordinate-wise beta-trimmed mean (Option II, Definition 2); Blanchard, El Mhamdi, Guerraoui,
Stainer, "Machine Learning with Adversaries: Byzantine Tolerant Gradient Descent" (NeurIPS
2017): Krum and Multi-Krum (§4-5).

Each replaces the weighted mean of the cohort's updates delta_i (state.py's sign) with:
  median:        g_j = median_i delta_ij                                  for every coordinate j
  trimmed mean:  b = floor(beta K); per coordinate, drop the b largest and b smallest values
                 and average the K - 2b left: g_j = 1/(K - 2b) sum_{i = b+1}^{K-b} delta_(i)j
  Krum:          s(i) = sum of the K - f - 2 smallest ||delta_i - delta_j||^2 over j != i
                 (f: the Byzantine clients assumed); Multi-Krum averages the m updates of the
                 lowest scores, Krum (m = 1) takes the lowest one's update.
As in the papers, the clients count alike: --weighting does not enter any of them. With the
knob off (--trim_beta=0, --krum_select >= K) nothing is left out and the aggregate is the
weighted mean itself (cohort.mean_delta, FedAvg's, bit for bit); under --weighting=uniform that
is the papers' plain mean of all K.
"""
import math

import jax
import jax.numpy as jnp

from fedjax_drift import registry
from fedjax_drift.algorithms.parts import Part
from fedjax_drift.errors import UserError


def _flatten(tree):
  """[K, ...] leaves -> [K, P]."""
  return jnp.concatenate([a.reshape(a.shape[0], -1) for a in jax.tree.leaves(tree)], axis=1)


def coordinate_median(deltas):
  """The coordinate-wise median of the [K, ...] leaves of `deltas` (the mean of the middle two
  for even K, numpy's convention) -> one update of the leaves' shape."""
  return jax.tree.map(lambda d: jnp.median(d, axis=0), deltas)


def trimmed_mean(deltas, trimmed):
  """The coordinate-wise mean of `deltas` ([K, ...] leaves) after dropping, per coordinate, the
  `trimmed` largest and `trimmed` smallest values (static int, 2 trimmed < K)."""
  def one(d):
    k = d.shape[0]
    kept = jnp.sort(d, axis=0)[trimmed:k - trimmed]
    return jnp.mean(kept, axis=0)
  return jax.tree.map(one, deltas)


def krum_scores(deltas, byzantine):
  """[K] Krum scores: for each update, the sum of its K - f - 2 smallest squared distances to
  the others (f = byzantine, static; K - f - 2 >= 1)."""
  flat = _flatten(deltas)
  k = flat.shape[0]
  sq = jnp.sum(flat * flat, axis=1)
  dist = jnp.maximum(sq[:, None] + sq[None, :] - 2.0 * (flat @ flat.T), 0.0)
  dist = jnp.where(jnp.eye(k, dtype=bool), jnp.inf, dist)  # j != i
  return jnp.sum(jnp.sort(dist, axis=1)[:, :k - byzantine - 2], axis=1)


def krum(deltas, byzantine, select=1):
  """Multi-Krum: the plain mean of the `select` updates of the lowest krum_scores (Krum when
  select = 1; ties go to the lower cohort position). Returns (update, [K] 0/1 selection)."""
  scores = krum_scores(deltas, byzantine)
  chosen = jnp.argsort(scores)[:select]  # stable: equal scores keep cohort order
  mask = jnp.zeros(scores.shape[0], jnp.float32).at[chosen].set(1.0)
  update = jax.tree.map(lambda d: jnp.tensordot(mask, d, axes=1) / select, deltas)
  return update, mask


def _check_cohort(flag, value, k, need):
  if need > k:
    raise UserError(f'--{flag}={value} needs a cohort of at least {need} clients; '
                    f'--clients_per_round is {k}')


def median_part():
  """The coordinate-wise median as an aggregator Part."""
  def aggregate(deltas, weights, cohort, buffer):
    del weights, cohort, buffer  # unweighted, as Yin et al.
    return coordinate_median(deltas), None
  return Part('median', aggregate=aggregate)


def trimmed_mean_part(beta):
  """The beta-trimmed mean as an aggregator Part (beta = 0: the weighted mean, streamed)."""
  def aggregate(deltas, weights, cohort, buffer):
    del weights, buffer
    k = cohort.ids.shape[0]
    trimmed = math.floor(beta * k)
    if trimmed == 0:  # nothing trimmed: the weighted mean, FedAvg's own sum
      return cohort.mean_delta, None
    _check_cohort('trim_beta', beta, k, 2 * trimmed + 1)
    return trimmed_mean(deltas, trimmed), None
  return Part('trimmed_mean', aggregate=aggregate, aggregate_streams=beta == 0)


def krum_part(byzantine, select, cohort_size):
  """(Multi-)Krum as an aggregator Part (cohort_size K: select >= K is the weighted mean,
  streamed)."""
  def aggregate(deltas, weights, cohort, buffer):
    del weights, buffer
    k = cohort.ids.shape[0]
    if select >= k:  # every client selected: the weighted mean, FedAvg's own sum
      return cohort.mean_delta, None
    _check_cohort('krum_byzantine', byzantine, k, byzantine + 3)
    update, _ = krum(deltas, byzantine, select)
    return update, None
  return Part('krum', aggregate=aggregate, aggregate_streams=select >= cohort_size)


# --- Registration -----------------------------------------------------------------------------
registry.register('aggregator', 'median', 'coordinate-wise median of the updates (Yin et al. '
                  '2018)', build=lambda v, **_: median_part())
registry.register('aggregator', 'trimmed_mean', 'coordinate-wise mean without the --trim_beta '
                  'fraction at each end (Yin et al. 2018)', reads=('trim_beta',),
                  build=lambda v, **_: trimmed_mean_part(v.trim_beta))
registry.register('aggregator', 'krum', '(Multi-)Krum: the mean of the --krum_select updates '
                  'closest to their neighbours, --krum_byzantine assumed bad (Blanchard et al. '
                  '2017)', reads=('krum_byzantine', 'krum_select'),
                  build=lambda v, **_: krum_part(v.krum_byzantine, v.krum_select,
                                                     v.clients_per_round))

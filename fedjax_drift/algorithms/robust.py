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

Unreliable clients (--dropout_prob > 0): the median and the trimmed mean are taken over the m
clients that reported (those with a non-zero weight: unreliable.renormalize zeroes the
others), with b = floor(beta m) trimmed at each end; the zero update a dropped client leaves
(or its compressor's residual) never enters them, and with none reporting the update is zero.
Krum is refused with it (one line naming both flags): its score needs m - f - 2 >= 1
neighbours, which a random m cannot promise. With --dropout_prob=0 the unmasked rules above
run unchanged.
"""
import math

import jax
import jax.numpy as jnp

from fedjax_drift import registry
from fedjax_drift.algorithms import local
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


def _sorted_reported(d, reports):
  """d [K, ...] sorted along the cohort axis with the non-reporting rows made +inf (last)."""
  mask = reports.reshape(reports.shape + (1,) * (d.ndim - 1))
  return jnp.sort(jnp.where(mask, d, jnp.inf), axis=0)


def masked_median(deltas, reports):
  """The coordinate-wise median of the rows of `deltas` ([K, ...] leaves) where `reports`
  ([K] bool) holds (numpy's mean of the middle two for an even count); zero when none."""
  m = jnp.sum(reports.astype(jnp.int32))
  lo, hi = jnp.maximum((m - 1) // 2, 0), m // 2

  def one(d):
    s = _sorted_reported(d, reports)
    mid = (jnp.take(s, lo, axis=0) + jnp.take(s, jnp.minimum(hi, d.shape[0] - 1), axis=0)) / 2
    return jnp.where(m > 0, mid, 0.0)
  return jax.tree.map(one, deltas)


def masked_trimmed_mean(deltas, reports, beta):
  """The beta-trimmed mean over the m rows where `reports` holds: per coordinate the
  b = floor(beta m) largest and smallest dropped, the m - 2b left averaged (beta < 1/2, so
  at least one is left); zero when none reports."""
  m = jnp.sum(reports.astype(jnp.int32))
  b = jnp.floor(beta * m).astype(jnp.int32)
  count = jnp.maximum(m - 2 * b, 1)

  def one(d):
    s = _sorted_reported(d, reports)
    pos = jnp.arange(d.shape[0]).reshape((-1,) + (1,) * (d.ndim - 1))
    kept = jnp.where((pos >= b) & (pos < m - b), s, 0.0)
    return jnp.where(m > 0, jnp.sum(kept, axis=0) / count, 0.0)
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


def median_part(masked=False):
  """The coordinate-wise median as an aggregator Part; masked (--dropout_prob > 0): over the
  clients that reported (masked_median)."""
  def aggregate(deltas, weights, cohort, buffer):
    del cohort, buffer  # unweighted, as Yin et al.; a zero weight marks a dropped client
    if masked:
      return masked_median(deltas, weights > 0), None
    return coordinate_median(deltas), None
  return Part('median', aggregate=aggregate)


def trimmed_mean_part(beta, masked=False):
  """The beta-trimmed mean as an aggregator Part (beta = 0: the weighted mean, streamed);
  masked (--dropout_prob > 0): over the clients that reported (masked_trimmed_mean)."""
  def aggregate(deltas, weights, cohort, buffer):
    del buffer
    k = cohort.ids.shape[0]
    trimmed = math.floor(beta * k)
    if trimmed == 0:  # nothing trimmed: the weighted mean, FedAvg's own sum
      return cohort.mean_delta, None
    _check_cohort('trim_beta', beta, k, 2 * trimmed + 1)
    if masked:
      return masked_trimmed_mean(deltas, weights > 0, beta), None
    return trimmed_mean(deltas, trimmed), None
  return Part('trimmed_mean', aggregate=aggregate, aggregate_streams=beta == 0)


def check_krum_dropout(select, cohort_size, dropout_prob):
  """Refuses Krum (select < K) with dropped clients, in one line naming both flags."""
  if select < cohort_size and not local.is_off(dropout_prob):
    raise UserError(f'--aggregator=krum cannot take --dropout_prob={dropout_prob}: Krum\'s '
                    'score needs K - f - 2 reporting neighbours, which random dropouts cannot '
                    'promise; use --aggregator=median or trimmed_mean, or --dropout_prob=0')


def krum_part(byzantine, select, cohort_size, dropout_prob=0.0):
  """(Multi-)Krum as an aggregator Part (cohort_size K: select >= K is the weighted mean,
  streamed); refused with --dropout_prob (check_krum_dropout)."""
  check_krum_dropout(select, cohort_size, dropout_prob)

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
def _masked(v):
  """Whether dropped clients can occur (--dropout_prob not a static 0; gridded: traced)."""
  return not local.is_off(v.dropout_prob)


registry.register('aggregator', 'median', 'coordinate-wise median of the updates (Yin et al. '
                  '2018)', build=lambda v, **_: median_part(_masked(v)))
registry.register('aggregator', 'trimmed_mean', 'coordinate-wise mean without the --trim_beta '
                  'fraction at each end (Yin et al. 2018)', reads=('trim_beta',),
                  build=lambda v, **_: trimmed_mean_part(v.trim_beta, _masked(v)))
registry.register('aggregator', 'krum', '(Multi-)Krum: the mean of the --krum_select updates '
                  'closest to their neighbours, --krum_byzantine assumed bad (Blanchard et al. '
                  '2017)', reads=('krum_byzantine', 'krum_select'),
                  build=lambda v, **_: krum_part(v.krum_byzantine, v.krum_select,
                                                     v.clients_per_round, v.dropout_prob))

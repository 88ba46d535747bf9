"""IGFL: group-aware local steps (IGFL-C) and attention aggregation at the server (IGFL-S).

Paper: "Behavior Mimics Distribution: Combining Individual and Group Behaviors for Federated
Learning": Algorithms 1-3, eq. 11, §4.1-4.3. The plain mean is 1/|S| (Alg. 3 l.1, l.7).

Updates here are in the paper's sign, Delta_w = w - w_ps = -delta (state.py's delta).

IGFL-C, each of the client's T local steps:
    Delta_I = -eta g
    Delta_G = (1/K)(Delta_I - Delta_w_i / T) + Delta_w_ps / T
    w <- w + Delta_I + Delta_G
with Delta_w_i the client's own previous update (per-client state, zeros until it first
participates) and Delta_w_ps = w_ps^r - w_ps^{r-1} (server state). As a gradient correction for
the local SGD step w <- w - eta g':
    g' = (1 + 1/K) g + (Delta_w_i / (K T) - Delta_w_ps / T) / eta.

IGFL-S (eq. 11, Algorithm 3): alpha_ij = softmax_j(psi(q_i, Delta_w_j) / temperature),
Delta_w_hat_i = sum_j alpha_ij Delta_w_j, w_ps <- w_ps + (1/K) sum_i Delta_w_hat_i, with
  self (§4.1):   q_i = Delta_w_i;
  global (§4.2): one query, the plain mean update, so w_ps <- w_ps + sum_j alpha_j Delta_w_j;
  time (§4.3):   alpha_j = exp psi(Delta_w_j^prev, Delta_w_j) / sum_tau exp psi(Delta_w_j^prev,
                 Delta_w_tau) and w_ps <- w_ps + sum_j alpha_j Delta_w_j: client j's weight is the
                 diagonal entry of the softmax whose query is j's own previous update. As printed,
                 the alpha_j are not normalised: their sum lies in (0, K] (recorded each round as
                 the metric `attention_weight_sum`). A client seen for the first time has a zero
                 query, a uniform row, so alpha_j = 1/K;
  time_rows:     the other reading of Algorithm 3's option III (q_i = client i's previous
                 update, then the rows averaged): (1/K) sum_i softmax_j psi(Delta_w_i^prev,
                 Delta_w_j). Weights sum to 1. Not the paper's default.
psi is the dot product (the paper's) or cosine similarity. The softmax subtracts its max and
infinite scores are clipped to the float range, so huge dot products stay finite.
"""
import jax
import jax.numpy as jnp

from fedjax_drift.algorithms.local import is_off
from fedjax_drift.algorithms.parts import Part
from fedjax_drift import registry
from fedjax_drift.algorithms.recipes import Recipe, algorithm
from fedjax_drift.errors import UserError

ATTENTIONS = ('self', 'global', 'time', 'time_rows')


def _zeros_like(params):
  return jax.tree.map(jnp.zeros_like, params)


def group_correction(group_scale=1.0):
  """IGFL-C as a Part: per-client Delta_w_i, server Delta_w_ps.

  group_scale multiplies Delta_G: 1 is the paper, 0 turns IGFL-C into plain local SGD.
  """

  def correct(grads, ctx):
    k = ctx.cohort_size
    t = jnp.maximum(ctx.num_steps, 1).astype(jnp.float32)
    return jax.tree.map(
        lambda g, own, ps: g + group_scale * (g / k + (own / (k * t) - ps / t) / ctx.lr),
        grads, ctx.state['igfl_c'], ctx.payload['igfl_c'])

  def client_final(ctx, delta):
    del ctx
    return jax.tree.map(jnp.negative, delta)  # Delta_w_i = w^T - w_ps

  def server_update(params, buffer, sctx):
    del buffer
    return params, jax.tree.map(jnp.subtract, params, sctx.old_params)

  return Part('igfl_c', init=_zeros_like, payload=lambda buffer, params, server: buffer,
              init_client=_zeros_like, correct=correct, client_final=client_final,
              server_update=server_update)


def _flatten(tree):
  """[K, ...] leaves -> [K, P]."""
  return jnp.concatenate([a.reshape(a.shape[0], -1) for a in jax.tree.leaves(tree)], axis=1)


def _unit_rows(a):
  """Rows scaled to unit norm, without overflow (scale by the max entry first)."""
  a = a / jnp.maximum(jnp.max(jnp.abs(a), axis=1, keepdims=True), 1e-30)
  return a / jnp.maximum(jnp.linalg.norm(a, axis=1, keepdims=True), 1e-30)


def attention_weights(queries, keys, similarity='dot', temperature=1.0):
  """[Q, P] x [K, P] -> [Q, K] row-stochastic attention weights, computed stably.

  Whole-model dot products can exceed float32: the operands are scaled to max-abs 1 before
  the matmul (no inf - inf inside it), the scale is multiplied back, scores are clipped to the
  finite range and the softmax subtracts its max.
  """
  big = jnp.finfo(queries.dtype).max
  if similarity == 'cosine':
    scores = _unit_rows(queries) @ _unit_rows(keys).T
  else:
    sq = jnp.maximum(jnp.max(jnp.abs(queries)), 1e-30)
    sk = jnp.maximum(jnp.max(jnp.abs(keys)), 1e-30)
    scores = jnp.clip((queries / sq) @ (keys / sk).T * sq, -big, big) * sk
  scores = jnp.clip(scores / temperature, -big, big)
  return jax.nn.softmax(scores, axis=1)


def attention_matrix(kind, values, previous, similarity='dot', temperature=1.0):
  """The attention weights of `kind`, row i the softmax of query i over the keys Delta_w_j:
  self [K, K] (q_i = Delta_w_i, IGFL Fig. 2's matrix), global [1, K] (q = the mean update),
  time and time_rows [K, K] (q_i = client i's previous update). Arguments as mixing_weights."""
  if kind == 'self':
    return attention_weights(values, values, similarity, temperature)
  if kind == 'global':
    query = jnp.mean(values, axis=0, keepdims=True)
    return attention_weights(query, values, similarity, temperature)
  return attention_weights(previous, values, similarity, temperature)  # row j: q_j


def mixing_from_matrix(kind, matrix):
  """[K] weights a_j from attention_matrix(kind, ...)."""
  if kind == 'global':
    return matrix[0]
  if kind == 'time':
    return jnp.diagonal(matrix)  # §4.3: alpha_j = softmax_tau(psi(q_j, Delta_w_tau))[j]
  return jnp.mean(matrix, axis=0)  # self (the mean of the K outputs), time_rows


def mixing_weights(kind, values, previous, similarity='dot', temperature=1.0):
  """[K] weights a_j of the pseudo-update sum_j a_j Delta_w_j, for attention `kind`.

  values: [K, P] this round's updates Delta_w_j (paper sign); previous: [K, P] each client's
  previous update (zeros if none), read by the time attentions only.
  """
  return mixing_from_matrix(kind, attention_matrix(kind, values, previous, similarity,
                                                   temperature))


def attention(kind='self', similarity='dot', temperature=1.0, previous_update_key=None):
  """IGFL-S as a Part with an aggregator; time attention keeps previous updates per client.

  previous_update_key: the part whose per-client state already holds each client's previous
  update in the paper's sign (IGFL-C's 'igfl_c'); if None, this part keeps its own copy.
  The server buffer holds the last round's sum of weights (`attention_weight_sum`).
  """
  if kind not in ATTENTIONS:
    raise ValueError(f'attention kind must be one of {ATTENTIONS}, got {kind}')
  name = f'attention_{kind}'
  uses_previous = kind.startswith('time')
  own_state = uses_previous and previous_update_key is None
  state_key = name if own_state else previous_update_key

  def aggregate(deltas, weights, cohort, buffer):
    del weights, buffer  # IGFL weighs by attention, whatever --weighting says
    values = -_flatten(deltas)  # Delta_w_j, paper sign
    previous = _flatten(cohort.old_states[state_key]) if uses_previous else None
    matrix = attention_matrix(kind, values, previous, similarity, temperature)
    mixing = mixing_from_matrix(kind, matrix)
    pseudo_gradient = jax.tree.map(lambda d: jnp.tensordot(mixing, d, axes=1), deltas)
    # aux: the round's attention matrix in cohort order (--diag_attention; dropped otherwise)
    return pseudo_gradient, {'weight_sum': jnp.sum(mixing)}, {'attention': matrix}

  return Part(name, init=lambda params: {'weight_sum': jnp.ones((), jnp.float32)},
              aggregate=aggregate,
              diagnostics=lambda buffer: {'attention_weight_sum': buffer['weight_sum']},
              init_client=_zeros_like if own_state else None,
              client_final=(lambda ctx, delta: jax.tree.map(jnp.negative, delta))
              if own_state else None)


# --- Registration -----------------------------------------------------------------------------
@registry.registers('part', 'igfl_c', 'group-aware local steps (IGFL-C)', reads=('igfl_group',))
def _group(v, **_):
  return group_correction(v.igfl_group)


def _attention_entry(kind):
  def build(v, parts=(), **_):
    if not is_off(v.dropout_prob):
      # The attention weighs every update of the cohort, a dropped client's zero one included;
      # IGFL defines no attention over a cohort that shrinks.
      raise UserError(f'--aggregator=attention_{kind} cannot take --dropout_prob='
                      f'{v.dropout_prob}: IGFL\'s attention is over the whole cohort\'s updates '
                      '(a dropped client would enter it as a zero update); use --dropout_prob=0')
    return attention(kind, v.attention_similarity, v.attention_temperature,
                     'igfl_c' if 'igfl_c' in parts else None)
  registry.register('aggregator', f'attention_{kind}', f'IGFL-S attention over the cohort\'s '
                    f'updates, query {kind}', reads=('attention_similarity',
                                                     'attention_temperature'), build=build)


for _kind in ATTENTIONS:
  _attention_entry(_kind)

_IGFL = 'IGFL paper, Alg. 3 l.1, l.7'
algorithm('igfl_c', Recipe(('igfl_c',), weighting='uniform', weighting_source=_IGFL,
                           summary='group-aware local steps'))
# The aggregator attention_<--attention>: these recipes read --attention, which picks it.
algorithm('igfl_s', Recipe((), 'attention', weighting='uniform',
                           weighting_source=_IGFL + ' (attention: §4)',
                           summary='attention aggregation', aggregator_flag='attention'),
          reads=('attention',))
algorithm('igfl', Recipe(('igfl_c',), 'attention', weighting='uniform',
                         weighting_source=_IGFL + ' (attention: §4)', summary='IGFL-C + IGFL-S',
                         aggregator_flag='attention'), reads=('attention',))

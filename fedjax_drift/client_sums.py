"""What a round sums over its clients, and the drift measures read from those sums.

`map_reduce_clients` runs the cohort `chunk` clients at a time (vmapped inside a chunk, the
chunks one after another) and adds each chunk's summands to a running total, so the K
model-sized deltas never exist at once. `client_summands` is what each client adds: its
weighted delta (the aggregate), its plain and its unit-norm delta, from which
`drift_diagnostics` reads the round's drift without a [K, P] stack. Norms are computed so that
no finite tree overflows (`safe_norm`).
"""
import jax
import jax.numpy as jnp
from optax.tree_utils import tree_norm, tree_vdot


def tree_all_finite(tree):
  """True when every value of every leaf is finite (checked on the values, so a finite update
  can never count as diverged because a norm of it overflows)."""
  return jnp.all(jnp.stack([jnp.all(jnp.isfinite(a)) for a in jax.tree.leaves(tree)]))


def safe_norm(tree):
  """The global L2 norm, scaled by the largest magnitude before squaring so that it cannot
  overflow for any finite tree (a plain sum of squares overflows float32 above ~1.8e19)."""
  scale = jnp.max(jnp.stack([jnp.max(jnp.abs(a)) for a in jax.tree.leaves(tree)]))
  safe = jnp.where(scale > 0, scale, 1.0)
  return safe * tree_norm(jax.tree.map(lambda a: a / safe, tree))


def client_summands(delta, weight, reported=None):
  """What the round sums over clients: the weighted delta (the aggregate), the plain delta
  and the unit-norm delta (for the drift diagnostics). Returns (summands, |delta|).
  reported (--dropout_prob; None: every client reports): False leaves this client out of the
  diagnostics' sums (a dropped client's delta is zero, or its compressor's residual)."""
  norm = safe_norm(delta)
  inv_norm = 1.0 / jnp.maximum(norm, 1e-30)
  plain = delta if reported is None else jax.tree.map(
      lambda d: jnp.where(reported, d, 0.0), delta)
  summands = {'weighted': jax.tree.map(lambda d: weight * d, delta), 'plain': plain,
              'unit': jax.tree.map(lambda d: inv_norm * d, plain)}
  return summands, norm


def drift_diagnostics(sums, norms, losses, weights, reports=None):
  """Per-round measures of client drift, from sums over the cohort (one pass, no [K, P]).

  client_update_norm_mean = mean_i |d_i|; mean_update_norm = |m|, with m the plain mean of
  the deltas; update_cosine = mean_i <d_i, m> / (|d_i| |m|) = <sum_i d_i / |d_i|, m> / (K |m|).
  reports [K] bool (--dropout_prob): the means and the loss std over the clients that
  reported only (sums from client_summands with their `reported`); NaN when none did.
  """
  if reports is not None:
    return _reported_diagnostics(sums, norms, losses, weights, reports)
  k = norms.shape[0]
  mean = jax.tree.map(lambda s: s / k, sums['plain'])
  mean_norm = safe_norm(mean)
  return {
      'client_update_norm_mean': jnp.mean(norms),
      'mean_update_norm': mean_norm,
      'update_cosine': tree_vdot(sums['unit'], mean) / jnp.maximum(k * mean_norm, 1e-30),
      'client_loss_std': jnp.std(losses),
      'train_loss': jnp.sum(weights * losses),
  }


def _reported_diagnostics(sums, norms, losses, weights, reports):
  """drift_diagnostics over the m clients that reported (the rest masked out)."""
  m = jnp.sum(reports.astype(jnp.float32))
  safe_m = jnp.maximum(m, 1.0)
  mean = jax.tree.map(lambda s: s / safe_m, sums['plain'])
  mean_norm = safe_norm(mean)
  loss_mean = jnp.sum(jnp.where(reports, losses, 0.0)) / safe_m
  loss_var = jnp.sum(jnp.where(reports, (losses - loss_mean) ** 2, 0.0)) / safe_m
  nan_if_none = lambda v: jnp.where(m > 0, v, jnp.nan)
  return {
      'client_update_norm_mean': nan_if_none(jnp.sum(jnp.where(reports, norms, 0.0)) / safe_m),
      'mean_update_norm': nan_if_none(mean_norm),
      'update_cosine': nan_if_none(tree_vdot(sums['unit'], mean)
                                   / jnp.maximum(m * mean_norm, 1e-30)),
      'client_loss_std': nan_if_none(jnp.sqrt(loss_var)),
      'train_loss': jnp.sum(jnp.where(reports, weights * losses, 0.0)),
  }


def map_reduce_clients(fn, args, chunk):
  """fn(args_i) -> (summand_i, output_i) over the leading (cohort) axis of args.

  Returns (sum_i summand_i, outputs stacked on [K]). Chunks of `chunk` clients are vmapped
  and run one after another; each chunk's summands are added to a running total as it ends,
  so K model-sized summands never exist at once (memory is bounded by the chunk, not K).
  """
  size = jax.tree.leaves(args)[0].shape[0]
  if chunk >= size:
    return _sum_leading(jax.vmap(fn)(args))
  fn = jax.jit(fn)  # traced once, for the total's shapes here and for the loop's body below
  # chunk 1 is plain sequential: no vmap of width 1, so convs stay unbatched.
  run = fn if chunk == 1 else lambda a: _sum_leading(jax.vmap(fn)(a))
  first = jax.tree.map(lambda a: a[0], args)
  zero = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(fn, first)[0])
  full = size // chunk * chunk

  def body(total, chunk_args):
    summand, outputs = run(chunk_args)
    return jax.tree.map(jnp.add, total, summand), outputs

  if chunk == 1:
    total, outputs = jax.lax.scan(body, zero, args)
  else:
    chunks = jax.tree.map(lambda a: a[:full].reshape((size // chunk, chunk) + a.shape[1:]),
                          args)
    total, outputs = jax.lax.scan(body, zero, chunks)
    outputs = jax.tree.map(lambda o: o.reshape((full,) + o.shape[2:]), outputs)
  if full < size:  # the last, narrower chunk
    rest_sum, rest_out = _sum_leading(jax.vmap(fn)(jax.tree.map(lambda a: a[full:], args)))
    total = jax.tree.map(jnp.add, total, rest_sum)
    outputs = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), outputs, rest_out)
  return total, outputs


def _sum_leading(result):
  summands, outputs = result
  return jax.tree.map(lambda s: jnp.sum(s, axis=0), summands), outputs

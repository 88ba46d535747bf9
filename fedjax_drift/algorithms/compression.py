"""Compressed uploads with error feedback: top-k sparsification and QSGD quantisation.

Papers: Stich, Cordonnier, Jaggi, "Sparsified SGD with Memory" (NeurIPS 2018): top-k with the
residual kept (error feedback); Alistarh, Grubic, Li, Tomioka, Vojnovic, "QSGD:
Communication-Efficient SGD via Gradient Quantization and Encoding" (NeurIPS 2017): the
stochastic quantiser Q_s; Karimireddy, Rebjock, Stich, Jaggi, "Error Feedback Fixes SignSGD and
other Gradient Compression Schemes" (ICML 2019): error feedback for any compressor.

Client i, after local training (delta_i in state.py's sign, e_i its residual, zeros at first):
    v = delta_i + e_i;   sends C(v);   e_i <- v - C(v)           (without error feedback: e_i = 0)
  top-k:  C(v) keeps, in each parameter array, the k = ceil(--topk_fraction * size) entries of
          largest magnitude (ties to the lower index) and zeroes the rest;
  QSGD:   per parameter array, C(v)_j = ||v|| sign(v_j) xi_j / s with s = --qsgd_levels and
          xi_j = l + 1 with probability |v_j| s / ||v|| - l, else l, where l = floor(|v_j| s /
          ||v||) (unbiased: E C(v) = v). The draws come from the client's key of the round.
The residual e_i is per-client state ([N, ...], like SCAFFOLD's c_i), so a client's error
waits for its next round. The server aggregates the sent C(v) as it would the deltas.

Bytes a client sends per round (the metric upload_bytes sums them over the cohort): top-k
k * (4 + 4) per array (float32 value + int32 index); QSGD 4 (the norm) + ceil(size (1 + b) / 8)
per array with b = ceil(log2(s + 1)) bits for the level and one for the sign (fixed-width,
no Elias coding); uncompressed 4 per entry. --topk_fraction=1 sends the delta itself, so the
run equals FedAvg bit for bit.
"""
import math

import jax
import jax.numpy as jnp

from fedjax_drift import registry
from fedjax_drift.algorithms.parts import Part

# Folded into the client's key for QSGD's draws, apart from the batches' fold_ins.
_QSGD_TAG = 0x5153


def topk_compress(v, fraction):
  """v with all but the k = ceil(fraction * size) entries of largest |v| zeroed, per array
  (fraction static, in (0, 1])."""
  def one(a):
    flat = a.reshape(-1)
    k = max(1, math.ceil(fraction * flat.size))
    if k >= flat.size:
      return a
    _, idx = jax.lax.top_k(jnp.abs(flat), k)
    return jnp.zeros_like(flat).at[idx].set(flat[idx]).reshape(a.shape)
  return jax.tree.map(one, v)


def qsgd_compress(v, levels, key):
  """QSGD's Q_s(v) per array with s = levels, the uniform draws from `key` (one fold_in per
  array, in leaf order)."""
  leaves, treedef = jax.tree.flatten(v)
  out = []
  for i, a in enumerate(leaves):
    norm = jnp.sqrt(jnp.sum(a * a))
    scaled = jnp.abs(a) * levels / jnp.where(norm > 0, norm, 1.0)
    low = jnp.floor(scaled)
    u = jax.random.uniform(jax.random.fold_in(key, i), a.shape, a.dtype)
    xi = low + (u < scaled - low).astype(a.dtype)
    out.append(norm * jnp.sign(a) * xi / levels)
  return jax.tree.unflatten(treedef, out)


def topk_bytes(params, fraction):
  """Bytes one client's top-k upload takes: k (value, index) pairs of 4 + 4 bytes per array,
  or the dense 4 per entry where top-k keeps every entry (topk_compress sends it as it is)."""
  total = 0
  for a in jax.tree.leaves(params):
    k = max(1, math.ceil(fraction * a.size))
    total += 8 * k if k < a.size else 4 * a.size
  return total


def qsgd_bytes(params, levels):
  """Bytes one client's QSGD upload takes: a float32 norm and sign + level bits per entry."""
  bits = 1 + math.ceil(math.log2(levels + 1))
  return sum(4 + math.ceil(a.size * bits / 8) for a in jax.tree.leaves(params))


def compressor(name, compress, bytes_per_client, error_feedback=True):
  """A Part that uploads compress(delta + e, ctx) in place of delta, keeping the residual e per
  client when error_feedback; its metric upload_bytes is the round's bytes from the cohort.

  compress(v, ctx) -> C(v); bytes_per_client(params) -> int (static).
  """
  zeros = lambda params: jax.tree.map(jnp.zeros_like, params)

  def send(ctx, delta):
    v = jax.tree.map(jnp.add, delta, ctx.state[name]) if error_feedback else delta
    sent = compress(v, ctx)
    residual = jax.tree.map(jnp.subtract, v, sent) if error_feedback else None
    return sent, residual

  def init(params):
    return {'bytes_per_client': jnp.float32(bytes_per_client(params)),
            'upload_bytes': jnp.zeros((), jnp.float32)}

  def server_update(params, buffer, sctx):
    k = sctx.cohort.ids.shape[0]
    return params, {**buffer, 'upload_bytes': buffer['bytes_per_client'] * k}

  return Part(name, init=init, init_client=zeros if error_feedback else None, send=send,
              server_update=server_update,
              diagnostics=lambda buffer: {'upload_bytes': buffer['upload_bytes']})


def topk(fraction, error_feedback=True):
  """Top-k sparsification of the upload (--topk_fraction), with error feedback."""
  return compressor('topk', lambda v, ctx: topk_compress(v, fraction),
                    lambda params: topk_bytes(params, fraction), error_feedback)


def qsgd(levels, error_feedback=True):
  """QSGD stochastic quantisation of the upload to --qsgd_levels levels, with error feedback."""
  return compressor('qsgd',
                    lambda v, ctx: qsgd_compress(v, levels, jax.random.fold_in(ctx.key,
                                                                               _QSGD_TAG)),
                    lambda params: qsgd_bytes(params, levels), error_feedback)


# --- Registration -----------------------------------------------------------------------------
@registry.registers('part', 'topk', 'upload only the --topk_fraction largest entries of each '
                    'array, residual kept per client (Stich et al. 2018)',
                    reads=('topk_fraction', 'error_feedback'))
def _topk(v, **_):
  return topk(v.topk_fraction, v.error_feedback)


@registry.registers('part', 'qsgd', 'QSGD stochastic quantisation of the upload to '
                    '--qsgd_levels levels, residual kept per client (Alistarh et al. 2017)',
                    reads=('qsgd_levels', 'error_feedback'))
def _qsgd(v, **_):
  return qsgd(v.qsgd_levels, v.error_feedback)

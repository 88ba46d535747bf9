"""FedFOR: a first-order rectification against the last global move.

Paper: "FedFOR: Stateless Heterogeneous Federated Learning with First-Order Regularization"
(Tian, Smith and Kira), eq. 7 and Algorithm 1. Clients receive W^{t-1} (the model) and W^{t-2}
(the one before) and minimise

    L_k(W) + c sum_j U((w_j^{t-2} - w_j^{t-1}) (w_j - w_j^{t-1})),   U = relu,

whose gradient is c (w^{t-2} - w^{t-1}) where the product is strictly positive and 0 elsewhere:
moving against the previous global update is penalised. The scale c is
  paper     c = alpha / eta          (eq. 7 as printed; App. C: alpha = 5);
  per_step  c = alpha / (eta H_i)    (H_i = the client's own number of local steps).
Why per_step exists: with c = alpha / eta, one SGD step on a coordinate where the term is
active moves it by alpha (W^{t-1} - W^{t-2}), a jump of alpha times the previous global move,
and a coordinate can take such a jump at several of its H_i steps, so the global update can
grow up to alpha-fold per round and diverge (alpha = 5 does on small models at any lr). The
paper's own derivation treats a round of H steps as one SGD step (grad L(W^{t-1}) =
(W^{t-1} - W^t) / eta), which suggests the printed scale is H times too large; per_step spreads
the correction over the H_i steps instead.

jax.nn.relu has derivative 0 at 0 (U'(0) = 0), so the term is inactive at the first local step,
where w = w^{t-1}. In round 1 there is no W^{t-2}; storing W^{t-2} = W^{t-1} makes the term
exactly zero there (plain FedAvg). The server averages (1/K, Algorithm 1); FedFOR keeps no
per-client state.
"""
import jax
import jax.numpy as jnp

from fedjax_drift.algorithms.parts import Part
from fedjax_drift import registry
from fedjax_drift.algorithms.recipes import Recipe, algorithm

SCALES = ('paper', 'per_step')


def rectified_term(alpha, scale='paper'):
  """The FedFOR local term as a Part; its server buffer is W^{t-2}.

  scale: 'paper' (alpha / eta, eq. 7) or 'per_step' (alpha / (eta H_i)).
  """
  if scale not in SCALES:
    raise ValueError(f'scale must be one of {SCALES}, got {scale}')

  def coefficient(ctx):
    if scale == 'paper':
      return alpha / ctx.lr
    return alpha / (ctx.lr * jnp.maximum(ctx.num_steps, 1).astype(jnp.float32))

  def loss(params, logits, batch, ctx):
    del logits, batch
    older, previous = ctx.payload['fedfor'], ctx.global_params
    terms = jax.tree.map(lambda w, p, o: jnp.sum(jax.nn.relu((o - p) * (w - p))),
                         params, previous, older)
    return coefficient(ctx) * sum(jax.tree.leaves(terms))

  def server_update(params, buffer, sctx):
    del buffer
    return params, sctx.old_params  # W^{t-1} becomes next round's W^{t-2}

  return Part('fedfor', init=lambda params: jax.tree.map(jnp.array, params),
              payload=lambda buffer, params, server: buffer, loss=loss,
              server_update=server_update)


# --- Registration -----------------------------------------------------------------------------
@registry.registers('part', 'for', 'rectified first-order term alpha/eta (FedFOR eq. 7)',
                    reads=('for_alpha', 'for_scale'))
def _rectified(v, **_):
  return rectified_term(v.for_alpha, v.for_scale)


algorithm('fedfor', Recipe(('for',), weighting='uniform',
                           weighting_source='FedFOR paper, Alg. 1: W^t = (1/K) sum_k W_k^t',
                           summary='rectified first-order term (--for_alpha, --for_scale)'))

"""FedFOR (eq. 7 and Algorithm 1): a first-order rectification against the last global move.

Clients receive W^{t-1} (the model) and W^{t-2} (the one before) and minimise

    L_k(W) + (alpha / eta) sum_j U((w_j^{t-2} - w_j^{t-1}) (w_j - w_j^{t-1})),   U = relu

whose gradient is (alpha/eta)(w^{t-2} - w^{t-1}) where the product is strictly positive and 0
elsewhere: moving against the previous global update is penalised. jax.nn.relu has
derivative 0 at 0 (U'(0) = 0), so the term is inactive at the first local step, where
w = w^{t-1}. In round 1 there is no W^{t-2}; storing W^{t-2} = W^{t-1} makes the term exactly
zero there (plain FedAvg). The server averages; FedFOR is stateless across clients.
"""
import jax
import jax.numpy as jnp

from fedjax_drift.algorithms.parts import Part


def rectified_term(alpha):
  """The FedFOR local term as a Part; its server buffer is W^{t-2}."""

  def loss(params, logits, batch, ctx):
    del logits, batch
    older, previous = ctx.payload['fedfor'], ctx.global_params
    terms = jax.tree.map(lambda w, p, o: jnp.sum(jax.nn.relu((o - p) * (w - p))),
                         params, previous, older)
    return (alpha / ctx.lr) * sum(jax.tree.leaves(terms))

  def server_update(params, buffer, sctx):
    del buffer
    return params, sctx.old_params  # W^{t-1} becomes next round's W^{t-2}

  return Part('fedfor', init=lambda params: jax.tree.map(jnp.array, params),
              payload=lambda buffer, params, server: buffer, loss=loss,
              server_update=server_update)

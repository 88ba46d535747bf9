"""FedCurv (Shoham et al., 2019): an EWC penalty towards the other clients' models.

    client k:  + lambda sum_{j != k} (w - w_j)^T diag(I_j) (w - w_j)

with w_j and I_j (diagonal empirical Fisher: mean of squared per-example gradients) taken at
the end of client j's last round, and I_j = 0 for clients not yet seen. The server keeps
the sums U = sum_j I_j, V = sum_j I_j w_j, S = sum_j I_j w_j^2, so client k's penalty is

    lambda sum [ (U - I_k) w^2 - 2 (V - I_k w_k) w + (S - I_k w_k^2) ]

and the per-client state is (I_k, w_k). The Fisher is estimated on the batch after the
client's last local step (its whole data with --batch_size=0).
"""
import jax
import jax.numpy as jnp

from fedjax_drift.algorithms.local import cross_entropy
from fedjax_drift.algorithms.parts import Part


def _zeros(params):
  return jax.tree.map(jnp.zeros_like, params)


def diagonal_fisher(params, batch, apply_fn):
  """Mean over the batch's valid examples of squared per-example log-likelihood gradients."""

  def example_loss(p, x, y):
    return cross_entropy(apply_fn(p, x[None]), y[None])[0]

  grads = jax.vmap(jax.grad(example_loss), in_axes=(None, 0, 0))(params, batch.x, batch.y)
  weights = batch.mask / jnp.maximum(jnp.sum(batch.mask), 1.0)
  return jax.tree.map(lambda g: jnp.tensordot(weights, g * g, axes=1), grads)


def ewc_penalty(curv_lambda):
  def loss(params, logits, batch, ctx):
    del logits, batch
    sums, own = ctx.payload['fedcurv'], ctx.state['fedcurv']
    total = 0.0
    for w, u, v, s, fisher, anchor in zip(*(jax.tree.leaves(t) for t in (
        params, sums['U'], sums['V'], sums['S'], own['fisher'], own['params']))):
      others_u = u - fisher
      others_v = v - fisher * anchor
      others_s = s - fisher * anchor * anchor
      total = total + jnp.sum(others_u * w * w - 2 * others_v * w + others_s)
    return curv_lambda * total

  def client_final(ctx, delta):
    final = jax.tree.map(jnp.subtract, ctx.global_params, delta)
    fisher = diagonal_fisher(final, ctx.batch(ctx.num_steps), ctx.apply)
    return {'fisher': fisher, 'params': final}

  def server_update(params, sums, sctx):
    new, old = sctx.cohort.new_states['fedcurv'], sctx.cohort.old_states['fedcurv']

    def change(f):
      return jax.tree.map(lambda a, b: jnp.sum(a - b, axis=0), f(new), f(old))

    du = change(lambda st: st['fisher'])
    dv = change(lambda st: jax.tree.map(jnp.multiply, st['fisher'], st['params']))
    ds = change(lambda st: jax.tree.map(lambda i, w: i * w * w, st['fisher'], st['params']))
    add = lambda a, b: jax.tree.map(jnp.add, a, b)
    return params, {'U': add(sums['U'], du), 'V': add(sums['V'], dv), 'S': add(sums['S'], ds)}

  return Part('fedcurv', init=lambda p: {'U': _zeros(p), 'V': _zeros(p), 'S': _zeros(p)},
              payload=lambda sums, params, server: sums,
              init_client=lambda p: {'fisher': _zeros(p), 'params': _zeros(p)},
              loss=loss, client_final=client_final, server_update=server_update,
              upload=lambda params: sum(int(p.size) for p in jax.tree.leaves(params)))

"""FedDyn: dynamic regularisation.

Paper: Acar et al., "Federated Learning Based on Dynamic Regularization" (ICLR 2021), Algorithm 1.

    client:  min L_k(theta) - <grad_prev_k, theta> + (alpha/2) ||theta - theta_t||^2
             grad_prev_k <- grad_prev_k - alpha (theta_k - theta_t)   (= + alpha delta_k)
    server:  h <- h - alpha (1/N) sum_{k in S} (theta_k - theta_t)    (= + (alpha/N) sum delta_k)
             theta_{t+1} = mean_k theta_k - h / alpha

grad_prev_k is per-client state; h is a server buffer (not sent). The mean is the cohort
average (uniform by default, --weighting overrides).
"""
import jax
import jax.numpy as jnp

from fedjax_drift.algorithms.parts import Part
from fedjax_drift import registry
from fedjax_drift.algorithms.recipes import Recipe, algorithm


def dynamic_regularizer(alpha):
  def loss(params, logits, batch, ctx):
    del logits, batch
    linear = sum(jnp.sum(g * p) for g, p in zip(jax.tree.leaves(ctx.state['feddyn']),
                                                 jax.tree.leaves(params)))
    prox = sum(jnp.sum((p - q) ** 2) for p, q in zip(jax.tree.leaves(params),
                                                      jax.tree.leaves(ctx.global_params)))
    return -linear + 0.5 * alpha * prox

  def client_final(ctx, delta):
    return jax.tree.map(lambda g, d: g + alpha * d, ctx.state['feddyn'], delta)

  def server_update(params, h, sctx):
    cohort = sctx.cohort
    h = jax.tree.map(lambda h_, d: h_ + (alpha / cohort.num_clients) * jnp.sum(d, axis=0),
                     h, cohort.deltas)
    # alpha = 0 is FedAvg: h stays 0 and the h / alpha correction is dropped.
    on = alpha > 0
    safe = jnp.where(on, alpha, 1.0)
    return jax.tree.map(lambda p, h_: jnp.where(on, p - h_ / safe, p), params, h), h

  zeros = lambda params: jax.tree.map(jnp.zeros_like, params)
  return Part('feddyn', init=zeros, init_client=zeros, loss=loss, client_final=client_final,
              server_update=server_update, needs_client_deltas=True)  # the unweighted sum


# --- Registration -----------------------------------------------------------------------------
@registry.registers('part', 'dyn', 'dynamic regularisation (FedDyn)', reads=('dyn_alpha',))
def _dynamic(v, **_):
  return dynamic_regularizer(v.dyn_alpha)


algorithm('feddyn', Recipe(('dyn',), weighting='uniform',
                           weighting_source='Acar et al. 2021, Alg. 1: (1/|P_t|) sum',
                           summary='dynamic regularisation'))

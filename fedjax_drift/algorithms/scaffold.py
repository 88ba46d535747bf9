"""SCAFFOLD, option II.

Paper: Karimireddy et al., "SCAFFOLD: Stochastic Controlled Averaging for Federated Learning"
(ICML 2020), Algorithm 1 with control-variate option II; server mean 1/|S|.

    client:  y <- y - eta (g - c_i + c)                      for H_i steps
             c_i+ = c_i - c + (theta_t - y) / (H_i eta)       (= c_i - c + delta_i / (H_i eta))
    server:  theta <- theta - eta_g sum p_i delta_i            (--server_lr; p_i uniform by default)
             c <- c + (K/N) mean_{i in S} (c_i+ - c_i)

c_i is per-client state stacked [N, ...]; c is a server buffer sent with the model. A client
uploads its delta and its control-variate change.
"""
import jax
import jax.numpy as jnp

from fedjax_drift.algorithms.parts import Part
from fedjax_drift import registry
from fedjax_drift.algorithms.recipes import Recipe, algorithm


def control_variates():
  def correct(grads, ctx):
    return jax.tree.map(lambda g, ci, c: g - ci + c, grads, ctx.state['scaffold'],
                        ctx.payload['scaffold'])

  def client_final(ctx, delta):
    steps = jnp.maximum(ctx.num_steps, 1).astype(jnp.float32)
    return jax.tree.map(lambda ci, c, d: ci - c + d / (steps * ctx.lr),
                        ctx.state['scaffold'], ctx.payload['scaffold'], delta)

  def server_update(params, c, sctx):
    cohort = sctx.cohort
    k = cohort.ids.shape[0]
    change = jax.tree.map(lambda new, old: jnp.mean(new - old, axis=0),
                          cohort.new_states['scaffold'], cohort.old_states['scaffold'])
    return params, jax.tree.map(lambda c_, d: c_ + (k / cohort.num_clients) * d, c, change)

  zeros = lambda params: jax.tree.map(jnp.zeros_like, params)
  return Part('scaffold', init=zeros, payload=lambda c, params, server: c, init_client=zeros,
              correct=correct, client_final=client_final, server_update=server_update,
              upload=lambda params: sum(int(p.size) for p in jax.tree.leaves(params)))


# --- Registration -----------------------------------------------------------------------------
@registry.registers('part', 'scaffold', 'control variates, option II (SCAFFOLD)')
def _control_variates(v, **_):
  del v
  return control_variates()


algorithm('scaffold', Recipe(('scaffold',), weighting='uniform',
                             weighting_source='Karimireddy et al. 2020, Alg. 1: (1/|S|) sum',
                             summary='control variates, option II'))

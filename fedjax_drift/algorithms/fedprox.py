"""FedProx: a proximal term (mu/2) ||w - theta_t||^2 in the local loss.

Paper: T. Li et al., "Federated Optimization in Heterogeneous Networks" (MLSys 2020), eq. 2 and
Algorithm 2.
"""
import jax
import jax.numpy as jnp

from fedjax_drift.algorithms.parts import Part


def sq_distance(a, b):
  return sum(jnp.sum((x - y) ** 2) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def proximal_term(mu):
  def loss(params, logits, batch, ctx):
    del logits, batch
    return 0.5 * mu * sq_distance(params, ctx.global_params)
  return Part('prox', loss=loss)

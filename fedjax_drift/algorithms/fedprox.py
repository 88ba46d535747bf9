"""FedProx (Li et al., 2020): a proximal term (mu/2) ||w - theta_t||^2 in the local loss."""
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

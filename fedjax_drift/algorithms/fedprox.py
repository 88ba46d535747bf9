"""FedProx: a proximal term (mu/2) ||w - theta_t||^2 in the local loss.

Paper: T. Li et al., "Federated Optimization in Heterogeneous Networks" (MLSys 2020), eq. 2 and
Algorithm 2.
"""
import jax
import jax.numpy as jnp

from fedjax_drift.algorithms.parts import Part
from fedjax_drift import registry
from fedjax_drift.algorithms.recipes import INHERITS, Recipe, algorithm


def sq_distance(a, b):
  return sum(jnp.sum((x - y) ** 2) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def proximal_term(mu):
  def loss(params, logits, batch, ctx):
    del logits, batch
    return 0.5 * mu * sq_distance(params, ctx.global_params)
  return Part('prox', loss=loss)


# --- Registration -----------------------------------------------------------------------------
@registry.registers('part', 'prox', 'proximal term (mu/2) ||w - w_t||^2 (FedProx)',
                    reads=('prox_mu',))
def _proximal(v, **_):
  return proximal_term(v.prox_mu)


algorithm('fedprox', Recipe(('prox',), weighting_source=INHERITS + ' (Li et al. 2020 sample by '
                            'n_k and average 1/K: the same in expectation)',
                            summary='proximal term (--prox_mu)', masks_cohort=True))

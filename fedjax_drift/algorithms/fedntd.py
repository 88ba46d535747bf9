"""FedNTD: distil the global model on the not-true classes only.

Paper: G. Lee et al., "Preservation of the Global Knowledge by Not-True Distillation in Federated
Learning" (NeurIPS 2022), eq. (3)-(4).

    L = CE + beta * mean_x KL(softmax(z_g[not y] / tau) || softmax(z[not y] / tau))

where z[not y] keeps the C - 1 logits other than the true class's, for both the teacher (the
received global model) and the student. tau2 (--kd_tau2) multiplies the KL by tau^2, as the
authors' code does (Lee-Gihun/FedNTD, algorithms/fedntd/criterion.py, NTD_Loss).
"""
import jax
import jax.numpy as jnp

from fedjax_drift.algorithms.distill import kd_loss
from fedjax_drift.algorithms.parts import Part
from fedjax_drift import registry
from fedjax_drift.algorithms.recipes import INHERITS, Recipe, algorithm


def not_true_logits(logits, labels):
  """[B, C] -> [B, C-1]: drop each row's true-class logit, keeping the others' order."""
  true = jax.nn.one_hot(labels, logits.shape[-1], dtype=jnp.int32)
  order = jnp.argsort(true, axis=-1, stable=True)[:, :-1]  # not-true classes first
  return jnp.take_along_axis(logits, order, axis=-1)


def not_true_distillation(beta, temperature, tau2=False):
  def loss(params, logits, batch, ctx):
    del params
    teacher = ctx.apply(ctx.global_params, batch.x)
    return beta * kd_loss(not_true_logits(teacher, batch.y), not_true_logits(logits, batch.y),
                          batch.mask, temperature, tau2)
  return Part('ntd', loss=loss)


# --- Registration -----------------------------------------------------------------------------
@registry.registers('part', 'ntd', 'not-true distillation (FedNTD)',
                    reads=('ntd_beta', 'ntd_temperature', 'kd_tau2'))
def _not_true(v, **_):
  return not_true_distillation(v.ntd_beta, v.ntd_temperature, v.kd_tau2)


algorithm('fedntd', Recipe(('ntd',), weighting_source=INHERITS, summary='not-true distillation'))

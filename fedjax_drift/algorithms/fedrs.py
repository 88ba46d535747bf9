"""FedRS (X.-C. Li and D.-C. Zhan, "FedRS: Federated Learning with Restricted Softmax for
Label Distribution Non-IID Data", KDD 2021): restricted softmax. During local training, the
logits of classes absent from the client's data are multiplied by alpha (alpha = 1 is FedAvg)."""
import jax.numpy as jnp

from fedjax_drift.algorithms.parts import Part
from fedjax_drift import registry
from fedjax_drift.algorithms.recipes import INHERITS, Recipe, algorithm


def restricted_softmax(alpha):
  def logits(z, batch, ctx):
    del batch
    scale = jnp.where(ctx.label_hist > 0, 1.0, alpha)
    return z * scale
  return Part('fedrs', logits=logits)


# --- Registration -----------------------------------------------------------------------------
@registry.registers('part', 'rs', 'restricted softmax (FedRS)', reads=('rs_alpha',))
def _restricted(v, **_):
  return restricted_softmax(v.rs_alpha)


algorithm('fedrs', Recipe(('rs',), weighting_source=INHERITS, summary='restricted softmax'))

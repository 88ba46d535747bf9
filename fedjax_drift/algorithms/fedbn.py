"""FedBN: BatchNorm parameters and statistics stay local.

Paper: X. Li et al., "FedBN: Federated Learning on Non-IID Features via Local Batch
Normalization" (ICLR 2021), Algorithm 1.

Each client keeps its own norm layers (scale, bias and running statistics) as per-client
state. Every client starts with the initial model's norm layers, as in FedBN's code, where
each client's model is a copy of the initial model and the server never overwrites a layer
whose name contains 'bn' (Algorithm 1: the BN parameters are excluded from aggregation).
Local training starts from the global model with the client's own norm layers put in, and the
client stores its norm layers at the end. The server averages every update as usual; the
averaged norm layers are never sent back to a client, they serve only the global model's
evaluation (--eval_protocol=global). Each client's own model, the global weights with its
norm rows, is what --eval_protocol=fedbn tests (evaluation.py).
Norm layers are the leaves under 'batch_stats' and under modules whose name starts with
'bn'.
"""
import jax
import jax.numpy as jnp

from fedjax_drift.algorithms.parts import Part, PartNeeds
from fedjax_drift.errors import UserError
from fedjax_drift import registry
from fedjax_drift.algorithms.recipes import INHERITS, Recipe, algorithm


def is_norm_leaf(path):
  names = [str(getattr(k, 'key', k)) for k in path]
  return names[0] == 'batch_stats' or any(n.startswith('bn') for n in names)


def norm_leaves(params):
  """The norm layers' leaves, in tree order (the per-client state)."""
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  return [leaf for path, leaf in flat if is_norm_leaf(path)]


def with_norm_leaves(params, norms):
  """params with its norm leaves replaced, in tree order, by `norms`."""
  flat, treedef = jax.tree_util.tree_flatten_with_path(params)
  it = iter(norms)
  return jax.tree_util.tree_unflatten(
      treedef, [next(it) if is_norm_leaf(path) else leaf for path, leaf in flat])


def check_has_norms(model):
  """Raises UserError if `model` (a models.Model) has no norm layers for FedBN to keep."""
  params = jax.eval_shape(model.init, jax.random.key(0))
  if not norm_leaves(params):
    with_bn = ', '.join(n for n, e in registry.entries('model').items() if e.info.batchnorm)
    raise UserError(f'--algo=fedbn needs a model with BatchNorm layers ({with_bn}); '
                    f'--model={model.name} has none')


def local_norms():
  def start(ctx):
    return with_norm_leaves(ctx.global_params, ctx.state['fedbn']['norms'])

  def client_final(ctx, delta):
    final = jax.tree.map(jnp.subtract, ctx.global_params, delta)
    return {'norms': norm_leaves(final)}

  def init_client(params):
    return {'norms': [jnp.array(x) for x in norm_leaves(params)]}  # the initial model's

  return Part('fedbn', init_client=init_client, start=start, client_final=client_final)


# --- Registration -----------------------------------------------------------------------------
@registry.registers('part', 'fedbn', 'normalisation layers stay local (FedBN)',
                    info=PartNeeds(local_norms=True))
def _local_norms(v, model, **_):
  del v
  check_has_norms(model)
  return local_norms()


algorithm('fedbn', Recipe(('fedbn',), weighting_source=INHERITS,
                          summary='BatchNorm layers stay local (use a *_bn model)'))

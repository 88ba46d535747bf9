"""MOON: model-contrastive learning on a projection head.

Paper: Q. Li, B. He, D. Song, "Model-Contrastive Federated Learning" (CVPR 2021), eq. (1)-(3)
and Algorithm 1; the network is base encoder, projection head, output layer (§3.2), as
models/zoo.py WithProjection builds it.

    L = CE + mu * mean_x -log( e^{sim(z, z_g)/tau} / (e^{sim(z, z_g)/tau} + e^{sim(z, z_prev)/tau}) )

z, z_g, z_prev: the projections of x by the local model, the received global model and the
client's own previous local model (per-client state; a client's first round uses the global
model, which makes the term a constant log 2). sim is cosine similarity.
"""
import jax
import jax.numpy as jnp

from fedjax_drift.algorithms.local import masked_mean
from fedjax_drift.algorithms.parts import Part, PartNeeds
from fedjax_drift import registry
from fedjax_drift.algorithms.recipes import Recipe, algorithm


def _safe_norm(a, eps=1e-8):
  # sqrt of a clamped square sum: finite gradient at a = 0 (a dead ReLU gives z = 0).
  return jnp.sqrt(jnp.maximum(jnp.sum(a * a, -1), eps * eps))


def cosine(a, b):
  """a.b / (max(|a|, eps) max(|b|, eps)), as torch.nn.functional.cosine_similarity."""
  return jnp.sum(a * b, -1) / (_safe_norm(a) * _safe_norm(b))


def contrastive_term(mu, temperature, features_fn, local_features_fn=None):
  """The MOON loss part. features_fn(params, x) -> (logits, z) in evaluation mode gives the
  frozen global and previous models' z; local_features_fn (default features_fn) gives the
  model being trained its z in training mode, as MOON's code runs `net` in train mode and
  the two others in eval mode (main.py): on BatchNorm models z then uses batch statistics."""
  local_features_fn = local_features_fn or features_fn

  def loss(params, logits, batch, ctx):
    del logits
    state = ctx.state['moon']
    previous = jax.tree.map(lambda p, g: jnp.where(state['seen'], p, g), state['params'],
                            ctx.global_params)
    z = local_features_fn(params, batch.x)[1]
    z_global = jax.lax.stop_gradient(features_fn(ctx.global_params, batch.x)[1])
    z_prev = jax.lax.stop_gradient(features_fn(previous, batch.x)[1])
    pos, neg = cosine(z, z_global) / temperature, cosine(z, z_prev) / temperature
    per_example = jnp.logaddexp(pos, neg) - pos
    return mu * masked_mean(per_example, batch.mask)

  def client_final(ctx, delta):
    return {'params': jax.tree.map(jnp.subtract, ctx.global_params, delta),
            'seen': jnp.ones((), bool)}

  return Part('moon', loss=loss, client_final=client_final,
              init_client=lambda params: {'params': jax.tree.map(jnp.zeros_like, params),
                                          'seen': jnp.zeros((), bool)})


# --- Registration -----------------------------------------------------------------------------
@registry.registers('part', 'moon', 'model-contrastive term on a projection head (MOON)',
                    reads=('moon_mu', 'moon_temperature'), info=PartNeeds(projection=True))
def _contrastive(v, model, **_):
  # BatchNorm models: the local z in training mode (batch statistics), the others frozen.
  train_z = (lambda p, x: model.train_features(p, x)[0]) if model.has_state else None
  return contrastive_term(v.moon_mu, v.moon_temperature, model.features, train_z)


algorithm('moon', Recipe(('moon',), weighting_source='Li et al. 2021 (MOON), Alg. 1: |D^i|/|D|',
                         summary='model-contrastive term on a projection head', projection=True))

"""MOON on a BatchNorm model: the model being trained gives its projection in training mode
(batch statistics), the global and previous models in evaluation mode, as MOON's code runs
them (net.train(); global_net and previous nets eval)."""
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_drift import models
from fedjax_drift.algorithms import moon
from fedjax_drift.state import Batch


def _ctx(global_params, previous, seen):
  state = {'moon': {'params': previous, 'seen': jnp.asarray(seen)}}
  return type('Ctx', (), {'state': state, 'global_params': global_params})()


def test_local_projection_uses_batch_statistics():
  model = models.get('mlp_bn', 3, (5,), projection_dim=4)
  params = model.init(jax.random.key(0))
  # Running statistics far from the batch's own, so eval and train modes differ clearly.
  stats = jax.tree_util.tree_map_with_path(
      lambda path, s: s * 4.0 if 'var' in str(path[-1]) else s - 0.5, params['batch_stats'])
  params = {**params, 'batch_stats': stats}
  x = jax.random.normal(jax.random.key(1), (8, 5))
  batch = Batch(x, jnp.zeros(8, jnp.int32), jnp.ones(8))
  train_z = lambda p, xs: model.train_features(p, xs)[0]
  part = moon.contrastive_term(1.0, 0.5, model.features, train_z)
  leaves, treedef = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(2), len(leaves))
  previous = jax.tree.unflatten(treedef, [a + 0.5 * jax.random.normal(k, a.shape)
                                          for a, k in zip(leaves, keys)])
  got = part.loss(params, None, batch, _ctx(params, previous, True))

  z = model.train_features(params, x)[0][1]
  z_g = model.features(params, x)[1]
  z_p = model.features(previous, x)[1]
  cos = lambda a, b: np.sum(a * b, -1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
  pos, neg = cos(z, z_g) / 0.5, cos(z, z_p) / 0.5
  want = np.mean(np.logaddexp(pos, neg) - pos)
  np.testing.assert_allclose(float(got), want, rtol=1e-5)
  # The evaluation-mode local z would give another value: the test can tell them apart.
  eval_part = moon.contrastive_term(1.0, 0.5, model.features)
  other = eval_part.loss(params, None, batch, _ctx(params, previous, True))
  assert abs(float(other) - want) > 1e-4

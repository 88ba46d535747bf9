"""The papers' models: shapes, parameter counts against the papers, and a training step.

ResNet-20 (He et al. 2016, Table 6: 0.27M) for FedFOR; ResNet-8 with 16 channels per
GroupNorm group for FedGKD (§5.1); McMahan et al.'s CIFAR CNN ("about 10^6") for IGFL.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen as nn

from fedjax_drift import models
from fedjax_drift.algorithms import fedbn
from fedjax_drift.errors import UserError
from fedjax_drift.models import convnets, norms, resnets

CIFAR = (32, 32, 3)


def _build(name, shape=CIFAR):
  model = models.get(name, 10, shape)
  return model, model.init(jax.random.key(0))


def _weights(model, params):
  """The trainable parameters only (BatchNorm statistics are not parameters)."""
  return params['params'] if model.has_state else params


@pytest.mark.parametrize('name,count', [
    ('resnet20_bn', 269_722),        # He et al. Table 6: 0.27M
    ('resnet8', 78_042),             # FedDF/FedGKD ResNet-8 with projection shortcuts
    ('cnn_mcmahan_cifar', 1_068_298),  # McMahan et al.: "about 10^6"
])
@pytest.mark.slow
def test_parameter_counts_and_shapes(name, count):
  model, params = _build(name)
  assert models.num_params(_weights(model, params)) == count
  x = jnp.zeros((3,) + CIFAR)
  assert model.apply(params, x).shape == (3, 10)
  logits, features = model.features(params, x)
  assert logits.shape == (3, 10) and features.shape[0] == 3


def test_resnet20_bn_is_he_et_al():
  model, params = _build('resnet20_bn')
  assert model.has_state and set(params) == {'params', 'batch_stats'}
  names = jax.tree_util.tree_flatten_with_path(params['params'])[0]
  paths = ['/'.join(str(k.key) for k in p) for p, _ in names]
  assert not any('shortcut' in p for p in paths)  # option A: parameter-free shortcuts
  assert sum(p.endswith('kernel') for p in paths) == 20  # 19 convs + the fc layer
  # FedBN recognises every norm layer (scale, bias, mean, var) as local.
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  norm = [p for p, _ in flat if fedbn.is_norm_leaf(p)]
  assert len(norm) == 19 * 4


def test_option_a_shortcut_pads_channels():
  x = jnp.arange(2 * 4 * 4 * 16, dtype=jnp.float32).reshape(2, 4, 4, 16)
  y = resnets._pad_shortcut(x, 32, 2)
  assert y.shape == (2, 2, 2, 32)
  np.testing.assert_array_equal(y[..., 8:24], x[:, ::2, ::2, :])
  assert float(jnp.abs(y[..., :8]).sum() + jnp.abs(y[..., 24:]).sum()) == 0.0


def test_resnet8_groupnorm_has_16_channels_per_group():
  for channels in (16, 32, 64):
    assert norms.norm('gn16', 'n', channels, False).num_groups == channels // 16
  # Functionally: with 16 channels per group, each 16-channel slice is normalised alone.
  x = jax.random.normal(jax.random.key(1), (2, 4, 4, 32)) * jnp.arange(1, 33)
  gn = norms.norm('gn16', 'n', 32, False)
  y = gn.apply(gn.init(jax.random.key(0), x), x)
  for g in range(2):
    part = np.asarray(y[..., 16 * g:16 * (g + 1)]).reshape(2, -1)
    np.testing.assert_allclose(part.mean(1), 0, atol=1e-4)
    np.testing.assert_allclose(part.std(1), 1, atol=1e-2)


def test_max_pool_3x3_matches_flax_same():
  x = jax.random.normal(jax.random.key(2), (2, 24, 24, 5))
  want = nn.max_pool(x, (3, 3), strides=(2, 2), padding='SAME')
  np.testing.assert_array_equal(convnets.max_pool_3x3_s2(x), want)
  x = x[:, :13, :11]
  np.testing.assert_array_equal(convnets.max_pool_3x3_s2(x),
                                nn.max_pool(x, (3, 3), strides=(2, 2), padding='SAME'))


def test_local_response_norm_matches_its_definition():
  x = np.asarray(jax.random.normal(jax.random.key(3), (1, 2, 2, 12)))
  want = np.empty_like(x)
  for d in range(12):
    window = (x[..., max(0, d - 4):d + 5] ** 2).sum(-1)
    want[..., d] = x[..., d] / (1.0 + 0.001 / 9.0 * window) ** 0.75
  np.testing.assert_allclose(convnets.local_response_norm(jnp.asarray(x)), want, rtol=1e-6)


def test_mcmahan_cnn_crops_and_standardises():
  model, params = _build('cnn_mcmahan_cifar')
  x = jax.random.uniform(jax.random.key(4), (2,) + CIFAR)
  # Only the central 24x24 crop matters, and a per-image affine change does not.
  changed = x.at[:, :4].set(0.0).at[:, :, -4:].set(1.0)
  np.testing.assert_allclose(model.apply(params, changed), model.apply(params, x), atol=1e-5)
  np.testing.assert_allclose(model.apply(params, 3 * x + 1), model.apply(params, x), atol=1e-4)
  with pytest.raises(UserError, match='24x24'):
    models.get('cnn_mcmahan_cifar', 10, (16, 16, 3)).init(jax.random.key(0))


@pytest.mark.parametrize('name', ['resnet20_bn', 'resnet8', 'cnn_mcmahan_cifar'])
def test_a_training_step_lowers_the_loss(name):
  model, params = _build(name)
  x = jax.random.uniform(jax.random.key(5), (8,) + CIFAR)
  y = jnp.arange(8) % 10

  def loss(p):
    logits, state = model.train_apply(p, x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), state

  @jax.jit
  def step(p):
    (value, state), grads = jax.value_and_grad(loss, has_aux=True)(p)
    p = jax.tree.map(lambda w, g: w - 0.05 * g, p, grads)
    return ({**p, **state} if state is not None else p), value

  first = None
  for _ in range(5):
    params, value = step(params)
    first = value if first is None else first
  assert np.isfinite(value) and value < first
  if model.has_state:  # the batch statistics were written, not left at their init
    assert float(jnp.abs(params['batch_stats']['bn_stem']['mean']).max()) > 0

"""The convolution implementations (--conv_impl) compute the same function and gradients."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from fedjax_drift import config, models
from fedjax_drift.errors import UserError
from fedjax_drift.models import layers, onednn

TOL = dict(rtol=2e-4, atol=2e-5)


def _reference_conv(x, kernel, padding):
  return jax.lax.conv_general_dilated(x, kernel, (1, 1), padding,
                                      dimension_numbers=('NHWC', 'HWIO', 'NHWC'),
                                      precision=jax.lax.Precision.HIGHEST)


@pytest.mark.parametrize('k,c_in,padding', [(5, 1, 'SAME'), (5, 3, 'SAME'), (3, 4, 'SAME'),
                                            (1, 4, 'SAME'), (4, 2, 'SAME'), (3, 2, 'VALID')])
@pytest.mark.parametrize('impl', ['im2col', 'lax'])
def test_conv2d_forward_and_gradients_match_lax_conv(k, c_in, padding, impl):
  kx, kw, kg = jax.random.split(jax.random.key(0), 3)
  x = jax.random.normal(kx, (2, 9, 8, c_in))
  kernel = jax.random.normal(kw, (k, k, c_in, 6)) / k
  cot = jax.random.normal(kg, _reference_conv(x, kernel, padding).shape)

  @jax.jit
  def value_and_grads(x, kernel):
    def both(conv):
      return jax.value_and_grad(lambda x, w: jnp.sum(conv(x, w) * cot), (0, 1))(x, kernel)
    return (layers.conv2d(x, kernel, padding, impl), both(lambda x, w: layers.conv2d(
        x, w, padding, impl))), (_reference_conv(x, kernel, padding),
                                 both(lambda x, w: _reference_conv(x, w, padding)))

  ours, ref = value_and_grads(x, kernel)
  chex.assert_trees_all_close(ours, ref, **TOL)


@pytest.mark.parametrize('ties', [False, True])
def test_max_pool_2x2_matches_flax_in_value_and_gradient(ties):
  x = jax.random.normal(jax.random.key(1), (2, 9, 8, 3))  # odd height: the last row dropped
  if ties:  # whole windows and pairs of equal values: the gradient goes to the first maximum
    x = jnp.round(x)
  cot = jax.random.normal(jax.random.key(2), (2, 4, 4, 3))

  @jax.jit
  def both(x):
    ours = jax.value_and_grad(lambda x: jnp.sum(layers.max_pool_2x2(x) * cot))(x)
    ref = jax.value_and_grad(lambda x: jnp.sum(nn.max_pool(x, (2, 2), (2, 2)) * cot))(x)
    return ours, ref

  ours, ref = both(x)
  chex.assert_trees_all_close(ours, ref)


@pytest.mark.parametrize('k,c_in,padding', [(5, 1, 'SAME'), (3, 3, 'SAME'), (4, 2, 'SAME'),
                                            (3, 1, 'VALID')])
def test_few_channel_conv_matches_lax_and_is_used_for_image_layers(k, c_in, padding):
  """The small-C_in im2col (transposed patches) against lax.conv, then pooled as in the
  models, in value and gradients."""
  kx, kw, kg = jax.random.split(jax.random.key(3), 3)
  x = jax.random.normal(kx, (3, 10, 11, c_in))
  kernel = jax.random.normal(kw, (k, k, c_in, 8)) / k
  ours_fn = lambda x, w: layers.max_pool_2x2(layers.conv2d_few_channels(x, w, padding))
  ref_fn = lambda x, w: nn.max_pool(_reference_conv(x, w, padding), (2, 2), (2, 2))
  cot = jax.random.normal(kg, jax.eval_shape(ref_fn, x, kernel).shape)

  @jax.jit
  def both(x, kernel):
    run = lambda f: jax.value_and_grad(lambda x, w: jnp.sum(f(x, w) * cot), (0, 1))(x, kernel)
    return (run(ours_fn), run(ref_fn), layers.conv2d_few_channels(x, kernel, padding),
            _reference_conv(x, kernel, padding))

  ours, ref, out, ref_out = both(x, kernel)
  chex.assert_trees_all_close(out, ref_out, **TOL)
  chex.assert_trees_all_close(ours, ref, **TOL)
  eqns = jax.make_jaxpr(lambda x, w: layers.conv2d(x, w, padding, 'im2col'))(x, kernel).eqns
  dots = [e.params['dimension_numbers'][0] for e in eqns if e.primitive.name == 'dot_general']
  assert dots == [((0,), (0,))]  # conv2d takes this path: transposed patches' axis 0


# Small images keep compilation short; the layers do not depend on the size.
@pytest.mark.parametrize('name,shape', [
    ('cnn_mnist', (12, 12, 1)), ('cnn_mnist_bn', (12, 12, 1)),
    pytest.param('cnn_cifar', (8, 8, 3), marks=pytest.mark.slow),
    pytest.param('resnet8', (8, 8, 3), marks=pytest.mark.slow)])
def test_models_equal_under_every_conv_impl(name, shape):
  """Same parameters, same logits and parameter gradients with im2col and lax convs."""
  built = {impl: models.get(name, 10, shape, conv_impl=impl) for impl in ('im2col', 'lax')}
  assert built['im2col'].conv_impl == 'im2col' and built['lax'].conv_impl == 'lax'
  params = built['im2col'].init(jax.random.key(0))
  chex.assert_trees_all_equal_shapes(params, built['lax'].init(jax.random.key(0)))
  x = jax.random.uniform(jax.random.key(1), (2,) + shape)
  y = jnp.arange(2)

  def loss_and_grad(model):
    def loss(p):
      logits, _ = model.train_apply(p, x)
      return jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(2), y]), logits
    return jax.jit(jax.value_and_grad(loss, has_aux=True))(params)

  (_, logits_a), grads_a = loss_and_grad(built['im2col'])
  (_, logits_b), grads_b = loss_and_grad(built['lax'])
  chex.assert_trees_all_close(logits_a, logits_b, **TOL)
  chex.assert_trees_all_close(grads_a, grads_b, **TOL)


def test_auto_picks_onednn_or_im2col_on_cpu_and_lax_on_accelerators():
  cpu = 'onednn' if onednn.available() else 'im2col'  # oneDNN where its extension builds
  assert layers.resolve_conv_impl('auto', 'cpu') == cpu
  assert layers.resolve_conv_impl('auto', 'gpu') == 'lax'
  assert layers.resolve_conv_impl('auto', 'tpu') == 'lax'
  assert layers.resolve_conv_impl('lax', 'cpu') == 'lax'
  assert layers.resolve_conv_impl('im2col', 'cpu') == 'im2col'
  expected = cpu if jax.default_backend() == 'cpu' else 'lax'
  assert models.get('cnn_mnist', 10, (28, 28, 1)).conv_impl == expected


def test_scope_reaches_nested_convs_and_an_explicit_impl_wins():
  """The lax path shows up as a convolution in the jaxpr, im2col as a dot_general only."""
  x = jnp.zeros((1, 8, 8, 2))

  def primitives(module, impl):
    with layers.conv_impl(impl):
      params = module.init(jax.random.key(0), x)
      jaxpr = jax.make_jaxpr(module.apply)(params, x)
    return {e.primitive.name for e in jaxpr.jaxpr.eqns}

  nested = layers.ConvReluPool(4, 3)
  assert 'conv_general_dilated' in primitives(nested, 'lax')
  assert 'conv_general_dilated' not in primitives(nested, 'im2col')
  assert 'conv_general_dilated' not in primitives(layers.Conv(4, 3, impl='im2col'), 'lax')
  assert layers.current_conv_impl() == 'im2col'  # the scope is left as found


def test_unknown_conv_impl_is_a_user_error():
  with pytest.raises(UserError, match='--conv_impl'):
    models.get('cnn_mnist', 10, (28, 28, 1), conv_impl='winograd')
  with pytest.raises(UserError, match='--conv_impl'):
    config.Config(conv_impl='winograd').validate()
  assert config.Config().validate().conv_impl == 'auto'


def test_conv_impl_flag_reaches_the_model(tiny_npz):
  import fedjax_drift  # pylint: disable=g-import-not-at-top
  from fedjax_drift import study  # pylint: disable=g-import-not-at-top
  for impl in ('im2col', 'lax'):
    exp = study.prepare(fedjax_drift.Config(model='cnn_mnist', conv_impl=impl, num_clients=4,
                                            clients_per_round=2, progress=False))
    assert exp.model.conv_impl == impl

"""--init=torch: each layer's draws against PyTorch's formulas, and GroupNorm's ε.

The formulas are written here from torch's documentation, not taken from the code under test:
nn.Linear / nn.Conv2d `reset_parameters` call kaiming_uniform_(weight, a=sqrt(5)), whose
bound is gain * sqrt(3 / fan_in) with gain = sqrt(2 / (1 + a^2)), and draw the bias from
U(-1/sqrt(fan_in), 1/sqrt(fan_in)); torch's fan_in of a conv weight [out, in, kh, kw] is
in * kh * kw. kaiming_normal_ (fan_in, ReLU gain sqrt(2)) is N(0, 2 / fan_in); FedGKD's conv
init is N(0, 2 / (kh * kw * out)); nn.Embedding is N(0, 1). A bound is checked exactly (no
draw outside it, the largest draw within 1% of it on a large layer); a standard deviation
statistically (within 3% on layers of at least ~10^4 draws, about 5 standard errors).
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_drift import models
from fedjax_drift.errors import UserError
from fedjax_drift.models import layers


def _torch_uniform_bound(fan_in):
  gain = math.sqrt(2.0 / (1 + math.sqrt(5) ** 2))
  return gain * math.sqrt(3.0 / fan_in)


def _torch_conv_fan_in(hwio_shape):
  """torch's _calculate_fan_in_and_fan_out on the [out, in, kh, kw] weight of an HWIO kernel."""
  kh, kw, cin, _ = hwio_shape
  return cin * kh * kw


def _check_uniform(w, bound, large=True):
  w = np.asarray(w)
  assert np.abs(w).max() <= bound  # exact: U(-bound, bound)
  if large:
    assert np.abs(w).max() > 0.99 * bound
    np.testing.assert_allclose(w.std(), bound / math.sqrt(3), rtol=0.03)
    assert abs(w.mean()) < 0.03 * bound


def _check_normal(w, std):
  w = np.asarray(w)
  np.testing.assert_allclose(w.std(), std, rtol=0.03)
  assert abs(w.mean()) < 0.03 * std
  assert np.abs(w).max() > 3.5 * std  # not truncated (a 2-sigma cut would stop at 2 std)


def _init(name, shape, init='torch', **kw):
  return models.get(name, 10, shape, init=init, **kw).init(jax.random.key(0))


def test_linear_weight_and_bias_as_nn_linear():
  p = _init('mlp', (28, 28, 1))
  for layer, fan_in in (('dense0', 784), ('dense1', 200), ('head', 200)):
    bound = _torch_uniform_bound(fan_in)
    assert bound == pytest.approx(1 / math.sqrt(fan_in))
    _check_uniform(p[layer]['kernel'], bound, large=p[layer]['kernel'].size >= 10_000)
    _check_uniform(p[layer]['bias'], 1 / math.sqrt(fan_in), large=False)
  # The bias is drawn, not zero, and spans its bound: 200 draws of U(-b, b) exceed b/2.
  assert np.abs(np.asarray(p['dense0']['bias'])).max() > 0.5 / math.sqrt(784)


def test_conv_weight_and_bias_as_nn_conv2d():
  p = _init('cnn_cifar', (32, 32, 3))
  kernel = p['conv3']['kernel']  # Conv 3x3, 32 -> 64: fan_in 288
  fan_in = _torch_conv_fan_in(kernel.shape)
  assert fan_in == 288
  _check_uniform(kernel, _torch_uniform_bound(fan_in))
  _check_uniform(p['conv3']['bias'], 1 / math.sqrt(fan_in), large=False)
  # ConvReluPool keeps the conv's bias beside its 'conv' kernel: the same fan-in.
  fan_in = _torch_conv_fan_in(p['conv4']['conv']['kernel'].shape)
  _check_uniform(p['conv4']['conv']['kernel'], _torch_uniform_bound(fan_in))
  _check_uniform(p['conv4']['bias'], 1 / math.sqrt(fan_in), large=False)
  assert np.abs(np.asarray(p['conv4']['bias'])).max() > 0.5 / math.sqrt(fan_in)


def test_strided_conv_as_nn_conv2d():
  module = layers.StridedConv(32, 3, 2, 1)
  x = jnp.zeros((1, 8, 8, 64))
  with layers.init_scheme('torch'):
    p = module.init(jax.random.key(0), x)['params']
  fan_in = _torch_conv_fan_in(p['kernel'].shape)
  _check_uniform(p['kernel'], _torch_uniform_bound(fan_in))
  _check_uniform(p['bias'], 1 / math.sqrt(fan_in), large=False)


def test_embedding_as_nn_embedding():
  p = _init('text_bag', (2, 16), vocab_size=1000)
  _check_normal(p['embed']['embedding'], 1.0)  # 64,000 draws of N(0, 1)
  _check_uniform(p['head']['kernel'], 1 / math.sqrt(64), large=False)


def test_resnet8_as_fedgkd_code():
  """FedGKD's _weight_initialization: convs N(0, 2 / (kh kw out)), GroupNorm 1 and 0,
  the classifier nn.Linear's default."""
  p = _init('resnet8', (8, 8, 3))
  kernel = p['stage2_block0']['conv2']['kernel']  # 3x3, 64 -> 64: 36,864 draws
  kh, kw, _, out = kernel.shape
  _check_normal(kernel, math.sqrt(2.0 / (kh * kw * out)))
  _check_uniform(p['head']['kernel'], 1 / math.sqrt(64), large=False)
  _check_uniform(p['head']['bias'], 1 / math.sqrt(64), large=False)
  gn = p['stage2_block0']['gn1']
  np.testing.assert_array_equal(gn['scale'], 1.0)
  np.testing.assert_array_equal(gn['bias'], 0.0)


def test_resnet20_bn_as_the_cifar_resnet_fedfor_cites():
  """akamaster/pytorch_resnet_cifar10 _weights_init: kaiming_normal_ (fan_in) on conv and
  linear weights; the linear bias keeps nn.Linear's default; BatchNorm 1 and 0."""
  p = _init('resnet20_bn', (8, 8, 3))
  kernel = p['params']['stage2_block1']['conv1']['kernel']
  _check_normal(kernel, math.sqrt(2.0 / _torch_conv_fan_in(kernel.shape)))
  head = p['params']['head']
  # N(0, 2/64): 640 draws, std 0.177 within 10% (U(+-1/8) would give 0.072).
  np.testing.assert_allclose(np.asarray(head['kernel']).std(), math.sqrt(2 / 64), rtol=0.1)
  _check_uniform(head['bias'], 1 / math.sqrt(64), large=False)
  np.testing.assert_array_equal(p['params']['stage0_block0']['bn1']['scale'], 1.0)


def test_projection_head_as_nn_linear():
  p = _init('mlp', (28, 28, 1), projection_dim=256)
  _check_uniform(p['projection_dense1']['kernel'], 1 / math.sqrt(200))
  _check_uniform(p['classifier']['kernel'], 1 / math.sqrt(256))


def test_default_init_is_flax_and_unknown_init_is_refused():
  """--init=default keeps lecun-normal kernels and zero biases."""
  p = _init('mlp', (28, 28, 1), init='default')
  np.testing.assert_array_equal(p['dense0']['bias'], 0.0)
  np.testing.assert_allclose(np.asarray(p['dense0']['kernel']).std(), 1 / math.sqrt(784),
                             rtol=0.03)
  with pytest.raises(UserError, match='--init=torc is unknown'):
    models.get('mlp', 10, (28, 28, 1), init='torc')


def _logits(name, **kw):
  model = models.get(name, 10, (8, 8, 3), **kw)
  x = jax.random.uniform(jax.random.key(1), (2, 8, 8, 3))
  return np.asarray(model.apply(model.init(jax.random.key(0)), x))


@pytest.mark.slow
def test_groupnorm_eps_is_torchs_for_the_models_that_follow_torch_code():
  """resnet8 (FedGKD's code) uses torch's 1e-5; resnet20 keeps flax's 1e-6; --gn_eps sets it."""
  own = _logits('resnet8')
  np.testing.assert_array_equal(own, _logits('resnet8', gn_eps=1e-5))
  assert not np.array_equal(own, _logits('resnet8', gn_eps=1e-6))
  np.testing.assert_array_equal(_logits('resnet20'), _logits('resnet20', gn_eps=1e-6))
  with pytest.raises(UserError, match='--gn_eps=1e-05 does not apply: --model=resnet20_bn'):
    models.get('resnet20_bn', 10, (8, 8, 3), gn_eps=1e-5)

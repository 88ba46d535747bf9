"""The papers' models added for issue 19: shapes, parameter counts, one training step, options.

resnet50_gn / resnet50_bn (FedGKD, Tiny-ImageNet), alexnet_bn and digit_cnn_bn (FedBN),
cnn_emnist (Reddi et al. 2021), cnn_cifar_moon (FedADC §IV-A2); the projection head on
BatchNorm models, --projection_hidden, --gn_groups / --gn_group_size and --dropout.
"""
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen as nn

from fedjax_drift import catalog, models, personalize
from fedjax_drift.algorithms import fedbn
from fedjax_drift.config import Config
from fedjax_drift.errors import UserError
from fedjax_drift.models import zoo


def _count(name, classes, shape, **kw):
  """Trainable parameters of model `name`, from shapes only (no arrays are made)."""
  model = models.get(name, classes, shape, **kw)
  params = jax.eval_shape(model.init, jax.random.key(0))
  return models.num_params(params['params'] if model.has_state else params)


def _conv(k, c_in, c_out, bias=True):
  return k * k * c_in * c_out + (c_out if bias else 0)


def _dense(n_in, n_out):
  return n_in * n_out + n_out


def test_parameter_counts_by_hand():
  # FedBN's DigitModel: three 5x5 convs, BN (scale + bias) after every layer but the last.
  digit = (_conv(5, 3, 64) + _conv(5, 64, 64) + _conv(5, 64, 128) + _dense(6272, 2048)
           + _dense(2048, 512) + _dense(512, 10) + 2 * (64 + 64 + 128 + 2048 + 512))
  assert _count('digit_cnn_bn', 10, (28, 28, 3)) == digit == 14_219_210
  # Reddi et al.'s EMNIST CNN: VALID convs, 28 -> 26 -> 24 -> pooled 12x12x64.
  emnist = _conv(3, 1, 32) + _conv(3, 32, 64) + _dense(12 * 12 * 64, 128) + _dense(128, 62)
  assert _count('cnn_emnist', 62, (28, 28, 1)) == emnist == 1_206_590
  # FedBN's AlexNet: the adaptive pooling makes the count independent of the input size.
  alexnet = (_conv(11, 3, 64) + _conv(5, 64, 192) + _conv(3, 192, 384) + _conv(3, 384, 256)
             + _conv(3, 256, 256) + _dense(256 * 36, 4096) + _dense(4096, 4096)
             + _dense(4096, 10) + 2 * (64 + 192 + 384 + 256 + 256 + 4096 + 4096))
  assert _count('alexnet_bn', 10, (256, 256, 3)) == alexnet == 57_063_498
  assert _count('alexnet_bn', 10, (64, 64, 3)) == alexnet
  # ResNet-50 = torchvision's 25,557,032 (7x7 stem, 1000 classes) with FedGKD's 3x3 stem and
  # a 200-class output layer.
  resnet50 = 25_557_032 - _conv(7, 3, 64, False) + _conv(3, 3, 64, False) - _dense(2048, 1000)
  resnet50 += _dense(2048, 200)
  for name in ('resnet50_gn', 'resnet50_bn'):
    assert _count(name, 200, (64, 64, 3)) == resnet50 == 23_910_152
  # cnn_cifar's convs, pooled to 64 features, fc-512, fc-256, output layer.
  moon = (_conv(3, 3, 32) + _conv(3, 32, 32) + _conv(3, 32, 64) + _conv(3, 64, 64)
          + _dense(64, 512) + _dense(512, 256) + _dense(256, 10))
  assert _count('cnn_cifar_moon', 10, (32, 32, 3)) == moon == 232_746


def _train_step(model, params, x, y, rng=None):
  """One SGD step through train_apply; returns (new params, loss)."""
  def loss(p):
    logits, state = model.train_apply(p, x, rng)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), state

  (value, state), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
  new = jax.tree.map(lambda w, g: w - 0.05 * g, params, grads)
  if state is not None:
    new = {**new, **state}
  return new, value


def _check_model(name, shape, classes=10, batch=2):
  model = models.get(name, classes, shape)
  params = model.init(jax.random.key(0))
  x = jax.random.uniform(jax.random.key(1), (batch,) + shape)
  y = jnp.arange(batch) % classes
  assert model.apply(params, x).shape == (batch, classes)
  logits, h = model.features(params, x)
  assert logits.shape == (batch, classes) and h.ndim == 2 and h.shape[0] == batch
  new, value = _train_step(model, params, x, y, jax.random.key(2))
  assert np.isfinite(float(value))
  weights = (lambda p: p['params']) if model.has_state else (lambda p: p)
  moved = jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), weights(new), weights(params))
  assert max(jax.tree.leaves(moved)) > 0
  if model.has_state:  # the batch statistics were written back
    stats = jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), new['batch_stats'],
                         params['batch_stats'])
    assert min(jax.tree.leaves(stats)) > 0
  return model, params


@pytest.mark.parametrize('name,shape,classes', [
    pytest.param('digit_cnn_bn', (28, 28, 3), 10, marks=pytest.mark.slow),
    ('cnn_emnist', (28, 28, 1), 62),
    ('cnn_cifar_moon', (32, 32, 3), 10),
])
@pytest.mark.slow
def test_small_models_train(name, shape, classes):
  _check_model(name, shape, classes, batch=4)


@pytest.mark.slow
def test_alexnet_bn_trains_at_64():
  model, params = _check_model('alexnet_bn', (64, 64, 3))
  assert {f'bn{i}' for i in range(1, 8)} <= set(params['params'])
  assert model.apply(params, jnp.zeros((1, 64, 64, 3))).shape == (1, 10)
  with pytest.raises(UserError, match='63x63'):
    models.get('alexnet_bn', 10, (62, 62, 3)).init(jax.random.key(0))


@pytest.mark.slow
@pytest.mark.parametrize('name', ['resnet50_gn', 'resnet50_bn'])
def test_resnet50_trains(name):
  # 8x8 inputs (the 1x1 the last stage sees still trains every layer) and the 5 classes of
  # the GroupNorm test below: the layers checked do not depend on the image size, and the
  # eager ops of the same shapes are compiled once.
  model, params = _check_model(name, (8, 8, 3), classes=5)
  p = params['params'] if model.has_state else params
  assert p['stem']['kernel'].shape == (3, 3, 3, 64)  # FedGKD's 3x3 stride-1 stem
  assert p['head']['kernel'].shape == (2048, 5)
  flat = jax.tree_util.tree_flatten_with_path(p)[0]
  kernels = [path for path, v in flat if path[-1].key == 'kernel' and v.ndim == 4]
  assert len(kernels) == 1 + 16 * 3 + 4  # stem, 16 bottlenecks, one projection per stage
  if model.has_state:  # FedBN recognises every BatchNorm layer as local
    norm = [path for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]
            if fedbn.is_norm_leaf(path)]
    assert len(norm) == (1 + 16 * 3 + 4) * 4


@pytest.mark.slow
def test_resnet50_gn_has_16_channels_per_group():
  """FedGKD's norm2d: GroupNorm(planes // 16, planes); --gn_group_size=16 is the same model."""
  x = jax.random.uniform(jax.random.key(3), (1, 8, 8, 3))
  a = models.get('resnet50_gn', 5, (8, 8, 3))
  b = models.get('resnet50_gn', 5, (8, 8, 3), gn_group_size=16)
  c = models.get('resnet50_gn', 5, (8, 8, 3), gn_groups=1)
  params = a.init(jax.random.key(0))
  np.testing.assert_array_equal(a.apply(params, x), b.apply(params, x))
  assert float(jnp.abs(a.apply(params, x) - c.apply(params, x)).max()) > 1e-4


@pytest.mark.parametrize('impl', ['im2col', 'lax'])
@pytest.mark.parametrize('k,stride,pad,size', [(11, 4, 2, 23), (3, 2, 1, 8), (3, 2, 1, 7)])
def test_strided_conv_is_torch_conv2d(impl, k, stride, pad, size):
  x = jax.random.normal(jax.random.key(4), (2, size, size, 3))
  kernel = jax.random.normal(jax.random.key(5), (k, k, 3, 4))
  want = jax.lax.conv_general_dilated(x, kernel, (stride, stride), ((pad, pad), (pad, pad)),
                                      dimension_numbers=('NHWC', 'HWIO', 'NHWC'))
  assert want.shape[1] == (size + 2 * pad - k) // stride + 1  # torch's output size
  np.testing.assert_allclose(zoo.conv2d_strided(x, kernel, stride, pad, impl), want,
                             rtol=1e-4, atol=1e-4)


def test_strided_3x3_equals_the_subsampled_same_conv():
  """ResNet-50's stride-2 3x3 (torch padding 1) = the SAME conv read at even positions."""
  x = jax.random.normal(jax.random.key(6), (1, 8, 8, 5))
  kernel = jax.random.normal(jax.random.key(7), (3, 3, 5, 2))
  same = jax.lax.conv_general_dilated(x, kernel, (1, 1), 'SAME',
                                      dimension_numbers=('NHWC', 'HWIO', 'NHWC'))
  np.testing.assert_allclose(zoo.conv2d_strided(x, kernel, 2, 1, 'im2col'), same[:, ::2, ::2],
                             rtol=1e-5, atol=1e-5)


def test_max_pool_valid_matches_flax():
  x = jax.random.normal(jax.random.key(8), (2, 15, 13, 3))
  np.testing.assert_array_equal(zoo.max_pool_valid(x, 3, 2),
                                nn.max_pool(x, (3, 3), strides=(2, 2), padding='VALID'))


def test_adaptive_avg_pool_is_torchs():
  x = jax.random.normal(jax.random.key(9), (1, 12, 7, 2))
  y = np.asarray(zoo.adaptive_avg_pool(x, 6))
  # 12 -> 6: disjoint 2-row bins; 7 -> 6: bin j covers columns [floor(7j/6), ceil(7(j+1)/6)).
  for i in range(6):
    for j in range(6):
      lo, hi = (7 * j) // 6, -(-(7 * (j + 1)) // 6)
      np.testing.assert_allclose(y[0, i, j], np.asarray(x)[0, 2 * i:2 * i + 2, lo:hi].mean((0, 1)),
                                 rtol=1e-5)
  one = jnp.ones((1, 1, 1, 1)) * 3.0  # a 1x1 map is repeated to 6x6 (alexnet_bn at 64x64)
  np.testing.assert_array_equal(zoo.adaptive_avg_pool(one, 6), jnp.full((1, 6, 6, 1), 3.0))


def test_dropout_only_in_train_apply_with_an_rng():
  model = models.get('cnn_emnist', 62, (28, 28, 1))
  assert model.has_dropout
  params = model.init(jax.random.key(0))
  x = jax.random.uniform(jax.random.key(1), (4, 28, 28, 1))
  evaluated = model.apply(params, x)
  np.testing.assert_array_equal(model.apply(params, x), evaluated)  # deterministic
  np.testing.assert_allclose(model.train_apply(params, x)[0], evaluated, rtol=1e-6)
  a = model.train_apply(params, x, jax.random.key(2))[0]
  b = model.train_apply(params, x, jax.random.key(3))[0]
  assert float(jnp.abs(a - evaluated).max()) > 1e-4 and float(jnp.abs(a - b).max()) > 1e-4
  np.testing.assert_array_equal(model.train_apply(params, x, jax.random.key(2))[0], a)
  off = models.get('cnn_emnist', 62, (28, 28, 1), dropout=0)
  assert not off.has_dropout
  np.testing.assert_allclose(off.train_apply(params, x, jax.random.key(2))[0], evaluated,
                             rtol=1e-6)


def test_dropout_rates():
  assert zoo.cnn_emnist(62).rates == (0.25, 0.5)  # Reddi et al.
  assert zoo.cnn_emnist(62, dropout=0.1).rates == (0.1, 0.1)
  # A rate near 1 zeroes almost every unit: the fc-128 output is then nearly all zeros.
  model = models.get('cnn_emnist', 62, (28, 28, 1), dropout=0.99)
  params = model.init(jax.random.key(0))
  x = jax.random.uniform(jax.random.key(1), (8, 28, 28, 1))
  (_, h), _ = model.train_features(params, x, jax.random.key(2))
  assert float(jnp.mean(h == 0)) > 0.9
  models.get('resnet8', 10, (32, 32, 3), dropout=0)  # off on a model without dropout is fine
  with pytest.raises(UserError, match='--dropout=0.3 .*no dropout'):
    models.get('resnet8', 10, (32, 32, 3), dropout=0.3)


@pytest.mark.slow
def test_gn_options():
  x = jax.random.uniform(jax.random.key(1), (2, 8, 8, 3))
  base = models.get('resnet8', 10, (8, 8, 3))
  params = base.init(jax.random.key(0))
  # resnet8 has 16 channels per group already; 16-channel groups are the same model.
  same = models.get('resnet8', 10, (8, 8, 3), gn_group_size=16)
  np.testing.assert_array_equal(same.apply(params, x), base.apply(params, x))
  for kw in ({'gn_groups': 8}, {'gn_group_size': 8}, {'gn_groups': 1}):
    other = models.get('resnet8', 10, (8, 8, 3), **kw)
    assert float(jnp.abs(other.apply(params, x) - base.apply(params, x)).max()) > 1e-5
  with pytest.raises(UserError, match='--gn_groups=3 does not divide'):
    models.get('resnet8', 10, (8, 8, 3), gn_groups=3)
  with pytest.raises(UserError, match='--gn_group_size=5 does not divide'):
    models.get('resnet20', 10, (8, 8, 3), gn_group_size=5)
  for name in ('cnn_cifar', 'resnet50_bn', 'resnet20_bn'):
    with pytest.raises(UserError, match='no GroupNorm'):
      models.get(name, 10, (32, 32, 3), gn_groups=2)
  assert zoo.gn_num_groups(64, group_size=32) == 2 and zoo.gn_num_groups(64, groups=32) == 32


@pytest.mark.parametrize('kw,flag', [
    ({'gn_groups': 2, 'gn_group_size': 16}, '--gn_groups=2 and --gn_group_size=16 conflict'),
    ({'gn_groups': -1}, '--gn_groups=-1'), ({'projection_hidden': -2}, '--projection_hidden'),
    ({'dropout': 1.0}, '--dropout=1.0'), ({'dropout': -0.5}, '--dropout=-0.5'),
])
def test_config_refuses_bad_model_flags(kw, flag):
  with pytest.raises(UserError, match=flag):
    Config(**kw).validate()


@pytest.mark.slow
def test_projection_on_a_batchnorm_model():
  """MOON and FedGKD+ on a BN model: the head sits on the base's features, the batch
  statistics stay in 'batch_stats' and train mode updates them."""
  model = models.get('cnn_mnist_bn', 10, (8, 8, 3), projection_dim=6)
  assert model.has_state
  params = model.init(jax.random.key(0))
  p = params['params']
  assert set(p) == {'base', 'projection_dense1', 'projection_dense2', 'classifier'}
  assert 'head' not in p['base']
  assert p['projection_dense1']['kernel'].shape == (512, 512)  # hidden = feature width
  assert p['projection_dense2']['kernel'].shape == (512, 6)
  x = jax.random.uniform(jax.random.key(1), (4, 8, 8, 3))
  logits, z = model.features(params, x)
  assert logits.shape == (4, 10) and z.shape == (4, 6)
  (train_logits, train_z), state = model.train_features(params, x)
  assert train_z.shape == (4, 6) and set(state) == {'batch_stats'}
  assert float(jnp.abs(train_logits - logits).max()) > 1e-4  # batch vs running statistics
  new, value = _train_step(model, params, x, jnp.arange(4))
  assert np.isfinite(float(value))
  assert float(jnp.abs(new['batch_stats']['base']['bn1']['mean']).max()) > 0
  # FedBN keeps the base's BN layers local; calibration trains only the classifier.
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  assert sum(fedbn.is_norm_leaf(path) for path, _ in flat) == 2 * 4  # two BN layers
  labels = personalize.head_labels(params)
  assert labels['params']['classifier']['kernel'] == 'train'
  assert labels['params']['projection_dense1']['kernel'] == 'freeze'


def test_projection_hidden_width():
  assert models.get('mlp', 3, (6,), projection_dim=4).init(
      jax.random.key(0))['projection_dense1']['kernel'].shape == (200, 200)
  wide = models.get('mlp', 3, (6,), projection_dim=4, projection_hidden=256)
  assert wide.init(jax.random.key(0))['projection_dense1']['kernel'].shape == (200, 256)


def test_cnn_cifar_moon_is_the_moon_cnn():
  """FedADC §IV-A2: with --algo=moon the pooled CNN gets a 2-layer MLP head with 256 outputs."""
  model = models.get('cnn_cifar_moon', 10, (32, 32, 3), projection_dim=256)
  params = model.init(jax.random.key(0))
  assert params['base']['fc1']['kernel'].shape == (64, 512)  # after global average pooling
  assert 'head' not in params['base'] and 'fc3' not in params['base']
  assert params['projection_dense1']['kernel'].shape == (256, 256)
  assert params['projection_dense2']['kernel'].shape == (256, 256)
  x = jax.random.uniform(jax.random.key(1), (2, 32, 32, 3))
  assert model.features(params, x)[1].shape == (2, 256)


def test_every_model_has_a_whole_summary_line():
  summaries = {
      n: s for _, flag, entries in catalog.sections() if flag == 'model'
      for n, s in entries.items()}
  assert set(summaries) == set(zoo.models())
  for name, line in summaries.items():
    assert line and len(line) <= 90 and not line.endswith('...'), (name, line)
    assert line.count('(') == line.count(')'), (name, line)


@pytest.mark.slow
@pytest.mark.parametrize('algo', ['moon', 'fedgkd_plus'])
def test_moon_and_fedgkd_plus_run_on_a_batchnorm_model(tiny_npz, unequal_partition, algo):
  """Refused before issue 19: a projection head on a BN model, end to end for two rounds."""
  import fedjax_drift
  from helpers import run_rounds, tiny_config
  exp = fedjax_drift.prepare(tiny_config(tiny_npz, unequal_partition, algo=algo, model='mlp_bn',
                                         moon_projection_dim=4, batch_size=4))
  assert exp.model.has_state
  state = run_rounds(exp, 2)
  params = state.params
  assert set(params['params']) == {'base', 'projection_dense1', 'projection_dense2',
                                   'classifier'}
  assert all(np.isfinite(np.asarray(v)).all() for v in jax.tree.leaves(params))
  moved = jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), params['batch_stats'],
                       exp.state.params['batch_stats'])
  assert min(jax.tree.leaves(moved)) > 0


def _readme_model_rows():
  """{model name: (input shape, classes, [counts])} from docs/models.md's models table."""
  page = (pathlib.Path(__file__).resolve().parent.parent / 'docs' / 'models.md').read_text()
  section = page.split('\n## ')[0]  # the table comes before the page's first subsection
  rows = {}
  for line in section.splitlines():
    cells = [c.strip() for c in line.strip().strip('|').split('|')]
    names = re.findall(r'`(\w+)`', cells[0]) if len(cells) == 5 else []
    if not names:  # not a model row (the header: `--model=`)
      continue
    shape, classes = cells[2].rsplit(', ', 1)
    counts = [int(n.replace(',', '')) for n in re.findall(r'[\d,]{3,}', cells[3])]
    text = re.fullmatch(r'(\d+) tokens of ([\d,]+)', shape)  # "128 tokens of 30,522"
    shape = ((2, int(text[1])), int(text[2].replace(',', ''))) if text else (
        tuple(int(d) for d in shape.split('×')), 0)
    for name in names:
      rows[name] = (shape, int(classes), counts)
  return rows


@pytest.mark.slow
def test_readme_lists_every_model_with_its_parameter_count():
  rows = _readme_model_rows()
  assert set(rows) == set(zoo.models())
  for name, ((shape, vocab), classes, counts) in rows.items():
    kw = {'vocab_size': vocab} if vocab else {}  # text models: token ids of a vocabulary
    own = _count(name, classes, shape, **kw)
    assert own in counts, (name, own, counts)
    others = [c for c in counts if c != own]
    if others and name in ('cnn_cifar_moon', 'resnet8', 'resnet50_bn'):  # "+ head"
      assert others == [_count(name, classes, shape, projection_dim=256)], name

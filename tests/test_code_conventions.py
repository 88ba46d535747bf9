"""Conventions of the papers' code: weight decay that skips normalisation parameters, and
FedGKD's fixed normalisation constants."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import fedjax_drift
from fedjax_drift import algorithms, models
from fedjax_drift.algorithms import local
from fedjax_drift.data import pipeline
from fedjax_drift.errors import UserError


def _names(tree):
  return {'/'.join(str(getattr(k, 'key', k)) for k in path): leaf
          for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


@pytest.mark.parametrize('skip', local.WEIGHT_DECAY_SKIPS)
def test_weight_decay_skips_the_named_norm_parameters(skip):
  model = models.get('resnet8', 10, (32, 32, 3), 'default', 0)
  shapes = jax.eval_shape(model.init, jax.random.key(0))  # names only: no init to run
  params = jax.tree.map(lambda s: jnp.full(s.shape, 2.0, s.dtype), shapes)
  opt = algorithms.local_optimizer(fedjax_drift.Config(
      model='resnet8', lr=0.1, weight_decay=0.5, weight_decay_skip=skip))
  zero = jax.tree.map(jnp.zeros_like, params)
  updates, _ = opt.update(zero, opt.init(params), params)
  moved = _names(updates)
  before = _names(params)
  decayed = {n for n, u in moved.items() if np.any(np.asarray(u) != 0)}
  norms = {n for n in before if '/gn' in n or n.startswith('gn')}
  shortcut_norms = {n for n in norms if 'gn_shortcut' in n}
  assert norms and shortcut_norms
  expect = {'none': set(before), 'norm': set(before) - norms,
            'norm_except_shortcut': set(before) - (norms - shortcut_norms)}[skip]
  assert decayed == expect
  for n in decayed:  # classic L2 with SGD: -lr * wd * theta
    np.testing.assert_allclose(moved[n], -0.1 * 0.5 * np.asarray(before[n]), rtol=1e-6)


def test_no_skip_is_the_unmasked_program():
  params = {'gn1': {'scale': jnp.ones(3)}, 'dense': {'kernel': jnp.arange(3.0)}}
  grads = jax.tree.map(lambda a: a * 0.3 + 1, params)
  ours = local.sgd(0.1, 0.9, 1e-2, skip='none')
  plain = optax.chain(optax.add_decayed_weights(1e-2), optax.sgd(0.1, momentum=0.9))
  a = ours.update(grads, ours.init(params), params)[0]
  b = plain.update(grads, plain.init(params), params)[0]
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(x, y)
  assert local.is_norm_parameter((jax.tree_util.DictKey('bn0'), jax.tree_util.DictKey('bias')),
                                 'norm')
  assert local.is_norm_parameter((jax.tree_util.DictKey('sa_layer_norm'),
                                  jax.tree_util.DictKey('scale')), 'norm')
  assert not local.is_norm_parameter((jax.tree_util.DictKey('conv1'),
                                      jax.tree_util.DictKey('kernel')), 'norm')


def test_fedgkd_code_constants():
  x = np.random.default_rng(0).uniform(size=(8, 4, 4, 3)).astype(np.float32)
  norm = pipeline.normalization(x, 'fedgkd_code', dataset='cifar10')
  np.testing.assert_allclose(norm.mean, [0.4914, 0.4822, 0.4465], rtol=1e-6)
  np.testing.assert_allclose(norm.std, [0.2023, 0.1994, 0.2010], rtol=1e-6)
  norm = pipeline.normalization(x, 'fedgkd_code', dataset='tfds:cifar100')
  np.testing.assert_allclose(norm.std, [0.2675, 0.2565, 0.2761], rtol=1e-6)
  with pytest.raises(UserError, match='--normalize=fedgkd_code: .* not --dataset=emnist'):
    pipeline.normalization(x, 'fedgkd_code', dataset='emnist')
  with pytest.raises(UserError, match='--normalize=fedgkd_code has 3 channels'):
    pipeline.normalization(x[..., :1], 'fedgkd_code', dataset='cifar10')

"""MOON's contrastive term, and classifier-calibration personalisation."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import engine, models, personalize
from fedjax_drift.algorithms import moon
from fedjax_drift.algorithms.parts import ClientContext
from fedjax_drift.state import Batch
from helpers import tiny_config


def _moon(tiny_npz, unequal_partition, **kw):
  base = dict(algo='moon', model='mlp', moon_projection_dim=8, local_steps=0, local_epochs=1,
              batch_size=4, clients_per_round=4)
  base.update(kw)
  return fedjax_drift.prepare(tiny_config(tiny_npz, unequal_partition, **base))


def _run(exp, algo=None, rounds=3):
  round_fn = exp.round_fn
  state = exp.state
  if algo is not None:
    round_fn = engine.make_round(algo, exp.schedule, exp.max_local_steps, 4, 'examples', 4)
    state = engine.init_state(algo, exp.state.params, 4, exp.state.key)
  step = jax.jit(round_fn)
  for _ in range(rounds):
    state = step(state, exp.data)[0]
  return state


def test_moon_loss_matches_formula(tiny_npz, unequal_partition):
  exp = _moon(tiny_npz, unequal_partition)
  k1, k2, k3 = jax.random.split(jax.random.key(3), 3)
  local_p, global_p, prev_p = (exp.model.init(k) for k in (k1, k2, k3))
  x = jax.random.normal(jax.random.key(4), (5, 6))
  batch = Batch(x, jnp.zeros(5, jnp.int32), jnp.array([1, 1, 1, 1, 0], jnp.float32))
  part = moon.contrastive_term(2.0, 0.5, exp.model.features)
  ctx = ClientContext(global_p, {}, {'moon': {'params': prev_p, 'seen': jnp.ones((), bool)}},
                      0.1, 1, 5, jnp.ones(3), 1, exp.model.apply, None)
  got = float(part.loss(local_p, None, batch, ctx))
  z, zg, zp = (np.asarray(exp.model.features(p, x)[1], np.float64)
               for p in (local_p, global_p, prev_p))
  cos = lambda a, b: np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
  pos, neg = np.exp(cos(z, zg) / 0.5), np.exp(cos(z, zp) / 0.5)
  expected = 2.0 * np.mean(-np.log(pos / (pos + neg))[:4])
  np.testing.assert_allclose(got, expected, rtol=1e-5)
  # A client's first round compares with the global model twice: a constant log 2.
  first = ctx._replace(state={'moon': {'params': prev_p, 'seen': jnp.zeros((), bool)}})
  np.testing.assert_allclose(float(part.loss(local_p, None, batch, first)), 2.0 * np.log(2),
                             rtol=1e-6)


def test_moon_term_matters_and_mu_zero_is_fedavg(tiny_npz, unequal_partition):
  with_term = _run(_moon(tiny_npz, unequal_partition, moon_mu=5.0))
  off = _moon(tiny_npz, unequal_partition, moon_mu=0.0)
  fedavg = fedjax_drift.algorithms.get('fedavg', off.config, off.model)
  chex.assert_trees_all_close(_run(off).params, _run(off, fedavg).params, atol=1e-6)
  diff = jax.tree.map(lambda a, b: np.abs(np.asarray(a) - np.asarray(b)).max(),
                      with_term.params, _run(off).params)
  assert max(jax.tree.leaves(diff)) > 1e-4
  assert bool(np.all(np.asarray(with_term.clients['moon']['seen'])))


def test_moon_vmap_equals_sequential(tiny_npz, unequal_partition):
  a = _run(_moon(tiny_npz, unequal_partition, client_parallelism='vmap', clients_per_round=3))
  b = _run(_moon(tiny_npz, unequal_partition, client_parallelism='sequential',
                 clients_per_round=3))
  chex.assert_trees_all_close(a.params, b.params, atol=1e-5, rtol=1e-5)


def test_calibration_trains_only_the_head_and_helps(tiny_npz, unequal_partition):
  exp = fedjax_drift.prepare(tiny_config(tiny_npz, unequal_partition, model='mlp',
                                         test_partition='like_train'))
  labels = personalize.head_labels(exp.state.params)
  assert labels['head']['kernel'] == 'train' and labels['dense0']['kernel'] == 'freeze'
  ds = exp.dataset
  test = fedjax_drift.data.federated.build(ds.x_test, ds.y_test, exp.test_parts, ds.num_classes)
  before, after, n = personalize.calibrate(exp.model, exp.state.params, exp.data, test,
                                           engine.Schedule(4, 0, 5), 0.5)
  assert n.sum() == len(ds.y_test)
  assert np.mean(after[n > 0]) > np.mean(before[n > 0])  # from the untrained init
  with pytest.raises(fedjax_drift.UserError, match='--test_partition=like_train'):
    tiny_config(tiny_npz, unequal_partition, personalize='calibrate').validate()


def test_head_labels_with_projection():
  model = models.get('mlp', 3, (6,), projection_dim=4)
  labels = personalize.head_labels(model.init(jax.random.key(0)))
  assert labels['classifier']['kernel'] == 'train'
  assert labels['projection_dense2']['kernel'] == 'freeze'
  assert labels['base']['dense1']['kernel'] == 'freeze'


@pytest.mark.parametrize('name', ['logreg', 'mlp', 'cnn_mnist'])
def test_projection_head_sits_before_the_output_layer(name):
  """MOON §3.2 / FedGKD+ (§5.1): logits = classifier(z), z = the projection of the base
  features; the base's own output layer is skipped, so it has no parameters."""
  shape = (6,) if name != 'cnn_mnist' else (28, 28, 1)
  model = models.get(name, 3, shape, projection_dim=4)
  params = model.init(jax.random.key(0))
  assert set(params) - {'base'} == {'projection_dense1', 'projection_dense2', 'classifier'}
  assert not {'head', 'dense'} & set(params.get('base', {}))  # logreg's base has no params
  labels = personalize.head_labels(params)
  assert [k for k in labels if 'train' in jax.tree.leaves(labels[k])] == ['classifier']
  x = jax.random.normal(jax.random.key(1), (2,) + shape)
  logits, z = model.features(params, x)
  assert z.shape == (2, 4)
  c = params['classifier']
  np.testing.assert_allclose(logits, z @ c['kernel'] + c['bias'], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(model.apply(params, x), logits, rtol=1e-6)

"""Engine properties: strategies agree, seeds reproduce, one compilation per run."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import client_sums, engine, sampling
from helpers import one_round, tiny_config


def _rounds(exp, n):
  state, fn = exp.state, jax.jit(exp.round_fn)
  for _ in range(n):
    state, metrics = fn(state, exp.data)
  return state, metrics


@pytest.mark.parametrize('model', ['logreg', 'mlp'])
def test_vmap_equals_sequential_and_chunked(tiny_npz, unequal_partition, model):
  results = []
  for parallelism, chunk in (('vmap', 0), ('sequential', 0), ('auto', 3)):
    config = tiny_config(tiny_npz, unequal_partition, model=model, local_steps=0,
                         local_epochs=2, batch_size=4, client_parallelism=parallelism,
                         cohort_chunk=chunk)
    exp = fedjax_drift.prepare(config)
    results.append(_rounds(exp, 2)[0].params)
  chex.assert_trees_all_close(results[0], results[1], atol=1e-5, rtol=1e-5)
  chex.assert_trees_all_close(results[0], results[2], atol=1e-5, rtol=1e-5)


def test_conv_model_vmap_equals_sequential(tmp_path):
  from conftest import make_npz
  import json
  path = make_npz(tmp_path / 'img.npz', n_train=24, n_test=8, dim=8 * 8, uint8=True)
  data = dict(np.load(path))
  data['x_train'] = data['x_train'].reshape(-1, 8, 8)
  data['x_test'] = data['x_test'].reshape(-1, 8, 8)
  np.savez(path, **data)
  parts = tmp_path / 'p.json'
  parts.write_text(json.dumps([list(range(0, 5)), list(range(5, 14)), list(range(14, 24))]))
  out = []
  for parallelism in ('vmap', 'sequential'):
    exp = fedjax_drift.prepare(fedjax_drift.Config(
        dataset=f'npz:{path}', partition=f'file:{parts}', model='cnn_mnist', num_clients=3,
        clients_per_round=3, local_steps=2, local_epochs=0, batch_size=4,
        client_parallelism=parallelism, progress=False))
    out.append(one_round(exp)[0].params)
  chex.assert_trees_all_close(out[0], out[1], atol=1e-4, rtol=1e-4)


def test_same_seed_identical_different_seed_differs(tiny_npz, unequal_partition):
  def params(seed):
    config = tiny_config(tiny_npz, unequal_partition, seed=seed, clients_per_round=2,
                         batch_size=3)
    return _rounds(fedjax_drift.prepare(config), 3)[0].params
  a, b, c = params(0), params(0), params(1)
  chex.assert_trees_all_equal(a, b)
  assert not np.allclose(a['dense']['kernel'], c['dense']['kernel'])


def test_segment_compiles_once(tiny_npz, unequal_partition):
  exp = fedjax_drift.prepare(tiny_config(tiny_npz, unequal_partition, clients_per_round=2))
  segment = engine.make_segment(lambda s, d, _: exp.round_fn(s, d), 4)
  state = exp.state
  state, m1 = segment(state, exp.data, None, 4)
  state, m2 = segment(state, exp.data, None, 3)  # a shorter call reuses the program
  state, m3 = segment(state, exp.data, None, 1)
  assert segment._cache_size() == 1  # pylint: disable=protected-access
  assert int(state.round) == 8
  assert np.all(np.asarray(m2['train_loss'])[3:] == 0)  # the iteration not run
  assert np.all(np.asarray(m3['train_loss'])[1:] == 0) and np.asarray(m3['train_loss'])[0] > 0


def test_segment_equals_round_by_round(tiny_npz, unequal_partition):
  exp = fedjax_drift.prepare(tiny_config(tiny_npz, unequal_partition, clients_per_round=2,
                                         batch_size=5))
  by_round = _rounds(exp, 3)[0]
  exp = fedjax_drift.prepare(tiny_config(tiny_npz, unequal_partition, clients_per_round=2,
                                         batch_size=5))
  seg = engine.make_segment(lambda s, d, _: exp.round_fn(s, d), 5)(exp.state, exp.data, None,
                                                                    3)[0]
  chex.assert_trees_all_close(by_round.params, seg.params, atol=1e-6)


def test_auto_parallelism_choice():
  assert engine.choose_parallelism('auto', 'conv', 'cpu', 10)[0] == 1
  assert engine.choose_parallelism('auto', 'dense', 'cpu', 10)[0] == 1
  assert engine.choose_parallelism('auto', 'dense', 'tpu', 10)[0] == 10
  assert engine.choose_parallelism('auto', 'conv', 'gpu', 10)[0] == 10
  assert engine.choose_parallelism('vmap', 'conv', 'cpu', 10, chunk=4)[0] == 4


def test_cohort_sampling_without_replacement():
  for seed in range(20):
    ids = np.asarray(sampling.sample_cohort(jax.random.key(seed), 30, 12))
    assert len(set(ids.tolist())) == 12 and ids.min() >= 0 and ids.max() < 30


def test_cover_classes_sampler_covers_and_varies():
  rng = np.random.default_rng(0)
  # 20 clients with 2 labels each out of 10 (shards-like): K=5 needs an exact cover.
  hist = np.zeros((20, 10), np.float32)
  for i in range(20):
    hist[i, [(2 * i) % 10, (2 * i + 1) % 10]] = rng.integers(1, 9, 2)
  hist = jax.numpy.asarray(hist)
  sample = jax.jit(sampling.sample_covering_cohort, static_argnums=2)  # eager loops are slow
  cohorts = set()
  for seed in range(30):
    ids = np.asarray(sample(jax.random.key(seed), hist, 5))
    assert len(set(ids.tolist())) == 5
    assert np.all(np.asarray(hist)[ids].sum(axis=0) > 0), ids
    cohorts.add(tuple(sorted(ids.tolist())))
  assert len(cohorts) > 5  # random, not one fixed cover
  # With a loose requirement the rejection path is uniform: every client shows up.
  hist_rich = jax.numpy.ones((12, 3))
  seen = set()
  for seed in range(40):
    seen |= set(np.asarray(sample(jax.random.key(seed), hist_rich, 3)).tolist())
  assert seen == set(range(12))


def test_cover_classes_end_to_end_and_refusal(tiny_npz, unequal_partition):
  exp = fedjax_drift.prepare(tiny_config(tiny_npz, unequal_partition, clients_per_round=2,
                                         cohort_sampler='cover_classes'))
  state, _ = one_round(exp)
  assert int(state.round) == 1
  with pytest.raises(fedjax_drift.UserError, match='cover_classes'):
    fedjax_drift.prepare(fedjax_drift.Config(
        model='mlp', partition='shards', classes_per_client=1, num_clients=20,
        clients_per_round=5, cohort_sampler='cover_classes', progress=False))


@pytest.mark.parametrize('chunk', [1, 3, 7, 10])
def test_map_reduce_clients_sums_and_stacks_like_a_plain_loop(chunk):
  """Chunks of 3 over 7 clients leave a narrower last chunk; every width gives the same."""
  xs = {'a': jnp.arange(7.0), 'b': jnp.arange(14.0).reshape(7, 2)}
  fn = lambda x: ({'s': x['b'] * x['a']}, (x['a'] + 1, None))
  total, (outputs, nothing) = client_sums.map_reduce_clients(fn, xs, chunk)
  np.testing.assert_allclose(total['s'], np.sum(np.arange(14.0).reshape(7, 2)
                                                * np.arange(7.0)[:, None], axis=0))
  np.testing.assert_allclose(outputs, np.arange(7.0) + 1)
  assert nothing is None


@pytest.mark.parametrize('chunk', [1, 3])
def test_a_round_and_a_client_are_traced_once(chunk):
  """The segment's metric shapes and the client loop's running total come from the trace the
  loop's body reuses (tracing was most of a small program's cost, and half of it repeated)."""
  traces = {'round': 0, 'client': 0}

  def client(x):
    traces['client'] += 1
    return {'s': x * 2.0}, x + 1.0

  def step(state, data, inputs):
    traces['round'] += 1
    total, _ = client_sums.map_reduce_clients(client, data + state, chunk)
    return state + total['s'], {'loss': total['s']}

  segment = engine.make_segment(step, length=3)
  state, history = segment(jnp.float32(0.0), jnp.arange(7.0), None, jnp.int32(2))
  assert traces == {'round': 1, 'client': 1}
  second = 2.0 * (21.0 + 7 * 42.0)  # the clients' x + 42 after the first round's 42
  np.testing.assert_allclose(history['loss'], [42.0, second, 0.0])
  assert float(state) == 42.0 + second


def test_over_runs_groups_equal_one_vmap():
  fn = lambda a, b: (a * b + 1.0, {'s': jnp.sum(a)})
  args = (jnp.arange(12.0).reshape(6, 2), jnp.arange(6.0)[:, None])
  want = jax.vmap(fn)(*args)
  for width in (1, 2, 3, 6):
    chex.assert_trees_all_close(jax.jit(lambda *a, w=width: engine.over_runs(fn, a, w))(*args),
                                want)
  one = engine.over_runs(fn, jax.tree.map(lambda a: a[:1], args), 1)
  chex.assert_trees_all_close(one, jax.tree.map(lambda a: a[:1], want))


def test_finite_checks_values_and_norms_do_not_overflow():
  huge = {'w': jnp.full((4,), 1e30, jnp.float32)}
  assert bool(client_sums.tree_all_finite(huge))
  np.testing.assert_allclose(client_sums.safe_norm(huge), 2e30, rtol=1e-6)
  assert not bool(client_sums.tree_all_finite({'w': jnp.array([1.0, jnp.nan])}))
  assert float(client_sums.safe_norm({'w': jnp.zeros(3)})) == 0.0

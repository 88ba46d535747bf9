"""Robust aggregators (algorithms/robust.py) against numpy, and their knobs off against FedAvg.

Setting of tests/test_algorithms.py: logistic regression, four clients of 5, 9, 14 and 20
examples, minibatches of 4 and one local epoch (H_i = 2..5), a cohort of 3 of the 4 (partial
participation). The numpy reference trains each cohort client with plain SGD on the engine's
own minibatches and aggregates with the papers' rules written out below.
"""
import dataclasses
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import applies, registry
from fedjax_drift.algorithms import robust
from fedjax_drift.errors import UserError
from helpers import check_sweep_equals_single_runs_and_resumes, run_rounds
from test_algorithms import ce_grad, local_sgd, make, run_lockstep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def np_trimmed_mean(v, beta):
  """Yin et al. 2018, Def. 2, per coordinate of the [K, P] rows v."""
  k = v.shape[0]
  b = int(np.floor(beta * k))
  return np.sort(v, axis=0)[b:k - b].mean(axis=0)


def np_krum(v, f, m):
  """Blanchard et al. 2017: scores from the K - f - 2 nearest squared distances, the mean of
  the m lowest."""
  k = v.shape[0]
  scores = []
  for i in range(k):
    d = sorted(float(np.sum((v[i] - v[j]) ** 2)) for j in range(k) if j != i)
    scores.append(sum(d[:k - f - 2]))
  chosen = np.argsort(scores, kind='stable')[:m]
  return v[chosen].mean(axis=0)


class Robust:
  """One round of local SGD on the cohort, then `rule([K, P] deltas)`; theta - rule(...)."""

  def __init__(self, rule):
    self.rule = rule

  def __call__(self, model, theta, ids, counts, batches, exp):
    deltas = np.stack([theta - local_sgd(model, theta, batches[i], ce_grad(model))
                       for i in ids])
    return theta - self.rule(deltas)


@pytest.mark.parametrize('aggregator,flags,rule', [
    ('median', {}, lambda v: np.median(v, axis=0)),
    ('trimmed_mean', dict(trim_beta=0.34), lambda v: np_trimmed_mean(v, 0.34)),
    ('krum', dict(krum_byzantine=0, krum_select=1), lambda v: np_krum(v, 0, 1)),
])
def test_against_numpy(tiny_npz, unequal_partition, aggregator, flags, rule):
  exp = make(tiny_npz, unequal_partition, 'fedavg', aggregator=aggregator, clients_per_round=3,
             **flags)
  run_lockstep(exp, Robust(rule), rounds=3)


def test_multi_krum_and_trimmed_mean_functions():
  """The jitted functions on a cohort with an outlier, against the numpy rules."""
  rng = np.random.default_rng(0)
  v = rng.normal(size=(7, 5)).astype(np.float32)
  v[3] += 50.0  # a Byzantine update
  tree = {'a': jnp.asarray(v[:, :3]), 'b': jnp.asarray(v[:, 3:])}
  for f, m in ((1, 1), (2, 3), (0, 6)):
    got, mask = robust.krum(tree, f, m)
    flat = np.concatenate([np.asarray(got['a']), np.asarray(got['b'])])
    np.testing.assert_allclose(flat, np_krum(v.astype(np.float64), f, m), rtol=1e-5, atol=1e-5)
    assert mask[3] == 0.0 and mask.sum() == m  # the outlier is never chosen
  for beta in (0.15, 0.3, 0.45):
    got = robust.trimmed_mean(tree, int(np.floor(beta * 7)))
    flat = np.concatenate([np.asarray(got['a']), np.asarray(got['b'])])
    np.testing.assert_allclose(flat, np_trimmed_mean(v.astype(np.float64), beta), rtol=1e-5,
                               atol=1e-5)
  med = robust.coordinate_median(tree)
  np.testing.assert_allclose(np.concatenate([med['a'], med['b']]), np.median(v, axis=0))


@pytest.mark.parametrize('weighting', ['examples', 'uniform'])
@pytest.mark.parametrize('aggregator,off', [('trimmed_mean', dict(trim_beta=0.0)),
                                            ('krum', dict(krum_select=3))])
def test_knob_off_is_fedavg_bit_for_bit(tiny_npz, unequal_partition, aggregator, off,
                                        weighting):
  """Nothing trimmed or every client selected: the weighted mean, FedAvg's own sum."""
  common = dict(clients_per_round=3, weighting=weighting)
  exp = make(tiny_npz, unequal_partition, 'fedavg', aggregator=aggregator, **common, **off)
  assert not exp.algo.needs_client_deltas  # streamed, as FedAvg's
  got = run_rounds(exp, 3).params
  want = run_rounds(make(tiny_npz, unequal_partition, 'fedavg', **common), 3).params
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_robust_to_a_scaled_client(tiny_npz, unequal_partition):
  """The median and Krum stay near the honest updates when one update is huge; the mean not."""
  rng = np.random.default_rng(2)
  honest = rng.normal(size=(5, 4)).astype(np.float32)
  bad = np.concatenate([honest, 1e3 * np.ones((1, 4), np.float32)])
  tree = {'w': jnp.asarray(bad)}
  assert np.abs(np.asarray(robust.coordinate_median(tree)['w'])).max() < 5
  assert np.abs(np.asarray(robust.krum(tree, 1, 2)[0]['w'])).max() < 5
  assert np.abs(bad.mean(axis=0)).min() > 100


def test_too_small_cohort_is_one_line_error(tiny_npz, unequal_partition):
  with pytest.raises(UserError, match='--krum_byzantine=2 needs a cohort of at least 5'):
    run_rounds(make(tiny_npz, unequal_partition, 'fedavg', aggregator='krum',
                    krum_byzantine=2, clients_per_round=3), 1)


def test_registered_and_flags_checked():
  assert {'median', 'trimmed_mean', 'krum'} <= set(registry.names('aggregator'))
  with pytest.raises(UserError, match='trim_beta'):
    fedjax_drift.Config(trim_beta=0.5).validate()
  config = fedjax_drift.Config(algo='fedavg', aggregator='median', trim_beta=0.2)
  assert 'trim_beta' in applies.unread_flags(config)  # the median reads no beta


@pytest.mark.parametrize('aggregator,flags', [('krum', dict(krum_byzantine=0, krum_select=2)),
                                              ('trimmed_mean', dict(trim_beta=0.34))])
@pytest.mark.slow
def test_sweep_equals_single_runs_and_resumes(tiny_npz, tmp_path, aggregator, flags):
  check_sweep_equals_single_runs_and_resumes(tiny_npz, tmp_path, aggregator=aggregator,
                                             model='logreg', **flags)


SCRIPT = textwrap.dedent('''
    import sys
    sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
    import jax, chex
    import fedjax_drift
    from helpers import tiny_config
    assert jax.device_count() == 2, jax.devices()
    def run(devices, **flags):
      exp = fedjax_drift.prepare(tiny_config({npz!r}, {parts!r}, model='logreg',
          clients_per_round=4, batch_size=4, local_steps=0, local_epochs=1,
          devices=devices, **flags))
      state, step = exp.state, jax.jit(exp.round_fn)
      for _ in range(2):
        state = step(state, exp.data)[0]
      return state
    for flags in (dict(aggregator='krum', krum_select=2), dict(aggregator='median'),
                  dict(algo='dp_fedavg', local_terms='topk', dp_clip=0.1, dp_noise=0.5),
                  dict(local_terms='qsgd', qsgd_levels=2),
                  dict(aggregator='median', dropout_prob=0.4)):
      ref, sharded = run(1, **flags), run(2, **flags)
      chex.assert_trees_all_close(sharded.params, ref.params, atol=1e-5, rtol=1e-5)
      chex.assert_trees_all_close(sharded.clients, ref.clients, atol=1e-5, rtol=1e-5)
    print('OK')
''')


@pytest.mark.slow  # a subprocess with two forced host devices
def test_two_devices_equal_one(tiny_npz, unequal_partition):
  """Robust aggregation, DP-FedAvg with top-k uploads and QSGD over a cohort split across
  two devices equal one device (the draws derive from keys, not from where clients run)."""
  env = dict(os.environ, XLA_FLAGS='--xla_force_host_platform_device_count=2')
  code = SCRIPT.format(root=ROOT, tests=os.path.join(ROOT, 'tests'), npz=tiny_npz,
                       parts=unequal_partition)
  result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          env=env, timeout=600)
  assert result.returncode == 0 and 'OK' in result.stdout, result.stderr[-3000:]


def test_masked_rules_take_only_the_clients_that_report():
  """--dropout_prob: the median and trimmed mean over the reporting rows (numpy's rules on
  them), whatever the other rows hold; with every client reporting, the unmasked rules bit
  for bit; none reporting: a zero update."""
  rng = np.random.default_rng(1)
  v = rng.normal(size=(7, 5)).astype(np.float32)
  tree = {'a': jnp.asarray(v[:, :2]), 'b': jnp.asarray(v[:, 2:])}
  flat = lambda t: np.concatenate([np.asarray(t['a']), np.asarray(t['b'])], axis=-1)
  for reports in ([1, 0, 1, 1, 0, 1, 1], [0, 1, 1, 0, 1, 0, 0], [1, 1, 0, 0, 0, 0, 0],
                  [0, 0, 0, 0, 0, 1, 0]):
    mask = np.array(reports, bool)
    kept = v[mask].astype(np.float64)
    np.testing.assert_allclose(flat(robust.masked_median(tree, jnp.asarray(mask))),
                               np.median(kept, axis=0), rtol=1e-6, atol=1e-6)
    for beta in (0.2, 0.34, 0.45):
      np.testing.assert_allclose(flat(robust.masked_trimmed_mean(tree, jnp.asarray(mask), beta)),
                                 np_trimmed_mean(kept, beta), rtol=1e-5, atol=1e-6)
  everyone, nobody = jnp.ones(7, bool), jnp.zeros(7, bool)
  np.testing.assert_array_equal(flat(robust.masked_median(tree, everyone)),
                                flat(robust.coordinate_median(tree)))
  np.testing.assert_array_equal(flat(robust.masked_trimmed_mean(tree, everyone, 0.3)),
                                flat(robust.trimmed_mean(tree, 2)))
  assert not flat(robust.masked_median(tree, nobody)).any()
  assert not flat(robust.masked_trimmed_mean(tree, nobody, 0.3)).any()


def test_krum_with_dropout_is_one_line_error(tiny_npz, unequal_partition):
  with pytest.raises(UserError, match='--aggregator=krum cannot take --dropout_prob=0.2'):
    make(tiny_npz, unequal_partition, 'fedavg', aggregator='krum', krum_byzantine=0,
         clients_per_round=3, dropout_prob=0.2)
  # Every client selected (the weighted mean) needs no neighbours: allowed.
  make(tiny_npz, unequal_partition, 'fedavg', aggregator='krum', krum_select=3,
       clients_per_round=3, dropout_prob=0.2)


def test_knob_off_help_says_weighted_not_uniform_mean():
  """--help for the knob-off point says it is the --weighting mean, not the paper's uniform one."""
  helps = {f.name: f.metadata['help'] for f in dataclasses.fields(fedjax_drift.Config)}
  for name in ('trim_beta', 'krum_select'):
    assert '--weighting mean' in helps[name] and 'uniform mean' in helps[name], name

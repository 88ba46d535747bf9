"""DP-FedAvg (algorithms/dp.py) against numpy, its accountant against dp-accounting's own
composition, and its reports in metrics.csv and summary.json.

Setting of tests/test_algorithms.py: four clients of 5, 9, 14, 20 examples (H_i = 2..5), a
cohort of 3 of the 4. The numpy reference clips each client's update to norm S, averages
over the fixed denominator K and adds the Gaussian noise the engine draws (the same key:
the round's server key, as dp.py derives it, so the noise is checked value for value).
"""
import csv
import json

import dp_accounting
import jax
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant

import fedjax_drift
from fedjax_drift.algorithms import dp
from fedjax_drift.errors import UserError
from helpers import (check_sweep_equals_single_runs_and_resumes, cohort_and_batches,
                     run_rounds, tiny_config)
from reference import LogReg, flat
from test_algorithms import ce_grad, local_sgd, make


def engine_noise(state, params, std):
  """The noise the engine adds in round state.round, as a flat vector in reference.flat order."""
  rkey = jax.random.fold_in(state.key, state.round)
  key = jax.random.fold_in(jax.random.fold_in(rkey, 4), dp._NOISE_TAG)
  noise = dp.gaussian_noise(params, std, key)
  return flat(noise)


@pytest.mark.parametrize('clip,sigma', [(0.05, 0.0), (0.05, 0.7), (np.inf, 0.0)])
def test_against_numpy(tiny_npz, unequal_partition, clip, sigma):
  exp = make(tiny_npz, unequal_partition, 'dp_fedavg', dp_clip=clip, dp_noise=sigma,
             clients_per_round=3, rounds=3)
  model, k = LogReg(6, 3), 3
  state, step = exp.state, jax.jit(exp.round_fn)
  theta = flat(state.params)
  clipped_any = False
  for r in range(3):
    ids, _, batches = cohort_and_batches(exp, state)
    total = np.zeros_like(theta)
    for i in ids:
      d = theta - local_sgd(model, theta, batches[int(i)], ce_grad(model))
      norm = np.linalg.norm(d)
      clipped_any |= norm > clip
      total += d * min(1.0, clip / norm)
    noise = engine_noise(state, state.params, sigma * clip / k) if sigma else 0.0
    theta = theta - (total / k + noise)
    state, metrics = step(state, exp.data)
    np.testing.assert_allclose(flat(state.params), theta, atol=2e-5, rtol=1e-4,
                               err_msg=f'round {r + 1}')
    if sigma:
      want = dp.epsilons(4, 3, sigma, 1e-5, exp.config.rounds)[r + 1]
      np.testing.assert_allclose(float(metrics['dp_epsilon']), want, rtol=1e-5)
  assert clipped_any == np.isfinite(clip)  # S = 0.05 is binding here


def test_no_clip_no_noise_is_fedavg_uniform_bit_for_bit(tiny_npz, unequal_partition):
  """S = inf, sigma = 0: FedAvg with --weighting=uniform (the estimator's w_k = 1, qW = K)."""
  got = run_rounds(make(tiny_npz, unequal_partition, 'dp_fedavg', dp_clip=np.inf, dp_noise=0.0,
                        clients_per_round=3), 3).params
  want = run_rounds(make(tiny_npz, unequal_partition, 'fedavg', weighting='uniform',
                         clients_per_round=3), 3).params
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_epsilons_match_dp_accounting_composition():
  """The table (one round's RDP times t) equals a fresh accountant composing t rounds."""
  table = dp.epsilons(100, 10, 1.1, 1e-5, 30)
  assert table[0] == 0 and np.all(np.diff(table) > 0)
  for t in (1, 7, 30):
    event = dp_accounting.SampledWithoutReplacementDpEvent(
        100, 10, dp_accounting.GaussianDpEvent(1.1 / 2))
    accountant = rdp_privacy_accountant.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    accountant.compose(dp_accounting.SelfComposedDpEvent(event, t))
    np.testing.assert_allclose(table[t], accountant.get_epsilon(1e-5), rtol=1e-9)
  assert np.all(np.isinf(dp.epsilons(100, 10, 0.0, 1e-5, 3)[1:]))  # no noise, no privacy
  # everyone every round: no amplification by sampling, the plain Gaussian mechanism
  full = rdp_privacy_accountant.RdpAccountant(
      neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
  full.compose(dp_accounting.GaussianDpEvent(0.55), 4)
  np.testing.assert_allclose(dp.epsilons(10, 10, 1.1, 1e-5, 4)[4], full.get_epsilon(1e-5))


def test_clip_update_function():
  tree = {'a': np.array([3.0, 0.0], np.float32), 'b': np.array([4.0], np.float32)}
  out = dp.clip_update(jax.tree.map(jax.numpy.asarray, tree), 1.0)
  np.testing.assert_allclose(np.concatenate([out['a'], out['b']]), [0.6, 0.0, 0.8], rtol=1e-6)
  same = dp.clip_update(jax.tree.map(jax.numpy.asarray, tree), np.inf)
  np.testing.assert_array_equal(same['a'], tree['a'])
  zero = dp.clip_update({'a': jax.numpy.zeros(3)}, 1.0)
  np.testing.assert_array_equal(zero['a'], np.zeros(3))


def test_reported_in_metrics_and_summary(tiny_npz, unequal_partition, tmp_path):
  config = tiny_config(tiny_npz, unequal_partition, algo='dp_fedavg', clients_per_round=2,
                       rounds=3, eval_every=2, dp_clip=0.5, dp_noise=1.0, dp_delta=1e-4,
                       out=str(tmp_path / 'run'))
  lines = []
  summary = fedjax_drift.run(config, log=lambda *a: lines.append(' '.join(map(str, a))))
  table = dp.epsilons(4, 2, 1.0, 1e-4, 3)
  done = [line for line in lines if line.startswith('done:')]
  assert f', epsilon {table[3]:.4g} at delta 0.0001;' in done[-1], done  # issue 45 item 7
  with open(tmp_path / 'run' / 'metrics.csv') as f:
    rows = list(csv.DictReader(f))
  assert [r['round'] for r in rows] == ['0', '2', '3']
  assert rows[0]['dp_epsilon'] == ''  # round 0: nothing spent, no round row yet
  np.testing.assert_allclose([float(r['dp_epsilon']) for r in rows[1:]], table[[2, 3]],
                             rtol=1e-5)
  with open(tmp_path / 'run' / 'rounds.csv') as f:
    per_round = [float(r['dp_epsilon']) for r in csv.DictReader(f)]
  np.testing.assert_allclose(per_round, table[1:], rtol=1e-5)
  saved = json.loads((tmp_path / 'run' / 'summary.json').read_text())
  for s in (summary, saved):
    np.testing.assert_allclose(s['final_dp_epsilon'], table[3], rtol=1e-5)
    assert s['weighting'] == 'uniform'


def test_flag_errors(tiny_npz, unequal_partition):
  with pytest.raises(UserError, match='--weighting=uniform'):
    make(tiny_npz, unequal_partition, 'fedavg', aggregator='dp_gaussian')
  with pytest.raises(UserError, match='--dp_noise=1.0 needs a finite --dp_clip'):
    make(tiny_npz, unequal_partition, 'dp_fedavg', dp_clip=np.inf)
  with pytest.raises(UserError, match='--dp_delta'):
    fedjax_drift.Config(dp_delta=1.0).validate()
  # the aggregator on another algorithm, with uniform weights: DP-FedProx
  exp = make(tiny_npz, unequal_partition, 'fedprox', aggregator='dp_gaussian',
             weighting='uniform', clients_per_round=2)
  assert not exp.algo.needs_client_deltas  # clipped on the client, streamed
  assert np.all(np.isfinite(flat(run_rounds(exp, 2).params)))


@pytest.mark.slow
def test_sweep_equals_single_runs_and_resumes(tiny_npz, tmp_path):
  """Seeds in one program equal their single runs (the noise keys derive from each run's
  seed), and a resumed sweep equals the whole one."""
  check_sweep_equals_single_runs_and_resumes(tiny_npz, tmp_path, algo='dp_fedavg',
                                             model='logreg', dp_clip=0.5, dp_noise=0.5)

"""Ditto, FedRep, pFedMe and APFL against numpy computations of their papers' equations.

Setting (as tests/test_algorithms.py): the tiny 3-class problem, four clients of sizes 5, 9,
14 and 20, minibatches of 4 with one local epoch (H_i = 2, 3, 4, 5), and here two clients per
round, so each round leaves half the clients' personal state untouched. Each test runs the
compiled engine round by round and, in lockstep, numpy fed with the same cohort and minibatches,
and compares the global model and every client's personal state after every round. Then: the
reductions to FedAvg, the local evaluation protocol, --grid and --resume.
"""
import json

import chex
import jax
import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import evaluation, study
from fedjax_drift.algorithms import fedrep
from fedjax_drift.errors import UserError
from helpers import check_sweep_equals_single_runs_and_resumes, cohort_and_batches, tiny_config
from reference import LogReg, flat, onehot, softmax
from helpers import QUIET, csv_rows, sweep_config

LR = 0.1


def make(tiny_npz, unequal_partition, algo, **overrides):
  base = dict(algo=algo, local_steps=0, local_epochs=1, batch_size=4, lr=LR,
              clients_per_round=2, test_partition='like_train')
  base.update(overrides)
  return fedjax_drift.prepare(tiny_config(tiny_npz, unequal_partition, **base))


def examples_weights(ids, counts):
  w = np.array([counts[i] for i in ids], np.float64)
  return w / w.sum()


def row(tree, i):
  return jax.tree.map(lambda a: a[i], tree)


def lockstep(exp, reference, check_clients, rounds=3, atol=2e-5):
  """Runs `rounds` engine rounds and reference(theta, ids, counts, batches) -> theta; after
  each, check_clients(state) compares the personal state of every client."""
  state, step = exp.state, jax.jit(exp.round_fn)
  theta = reference.start(exp)
  for r in range(rounds):
    ids, counts, batches = cohort_and_batches(exp, state)
    theta = reference(theta, [int(i) for i in ids], counts, batches)
    state, _ = step(state, exp.data)
    np.testing.assert_allclose(reference.flat(state.params), reference.vector(theta),
                               atol=atol, rtol=1e-4,
                               err_msg=f'round {r + 1}')
    check_clients(state, r)
  return state


class LogRegReference:
  model = LogReg(6, 3)

  def start(self, exp):
    return flat(exp.state.params)

  @staticmethod
  def flat(params):
    return flat(params)

  @staticmethod
  def vector(theta):
    return theta

  def grad(self, theta, x, y, mask):
    return self.model.grad(theta, x, self.model.ce_dlogits(theta, x, y), mask)


# ----------------------------------------------------------------------------------- Ditto


class Ditto(LogRegReference):
  """Li et al. 2021, Alg. 1: FedAvg's global update; v_k <- v_k - eta (g(v_k) + lambda
  (v_k - w^t)) on the same minibatches, for the sampled clients only."""

  def __init__(self, lam):
    self.lam, self.v = lam, None

  def __call__(self, theta, ids, counts, batches):
    if self.v is None:
      self.v = [theta.copy() for _ in range(4)]
    p, deltas = examples_weights(ids, counts), []
    for i in ids:
      w, v = theta.copy(), self.v[i]
      for x, y, mask in batches[i]:
        w = w - LR * self.grad(w, x, y, mask)
        v = v - LR * (self.grad(v, x, y, mask) + self.lam * (v - theta))
      deltas.append(theta - w)
      self.v[i] = v
    return theta - sum(pi * d for pi, d in zip(p, deltas))


def test_ditto(tiny_npz, unequal_partition):
  exp = make(tiny_npz, unequal_partition, 'ditto', ditto_lambda=0.5)
  reference = Ditto(0.5)

  def check(state, r):
    for i in range(4):
      np.testing.assert_allclose(flat(row(state.clients['ditto']['params'], i)),
                                 reference.v[i], atol=2e-5, rtol=1e-4,
                                 err_msg=f'v_{i} after round {r + 1}')

  lockstep(exp, reference, check)


def final_state(tiny_npz, unequal_partition, algo, rounds=3, **overrides):
  exp = make(tiny_npz, unequal_partition, algo, **overrides)
  state, step = exp.state, jax.jit(exp.round_fn)
  for _ in range(rounds):
    state = step(state, exp.data)[0]
  return exp, state


def assert_same_params(a, b):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_ditto_and_apfl_global_models_are_fedavg_bit_for_bit(tiny_npz, unequal_partition):
  """Ditto's global model is FedAvg's for any lambda, APFL's for any alpha (their w part is
  FedAvg's local training); APFL with alpha = 0 also tests the global model itself."""
  _, fedavg = final_state(tiny_npz, unequal_partition, 'fedavg')
  _, ditto = final_state(tiny_npz, unequal_partition, 'ditto', ditto_lambda=0.5)
  assert_same_params(ditto.params, fedavg.params)
  exp, apfl = final_state(tiny_npz, unequal_partition, 'apfl', apfl_alpha=0.0)
  assert_same_params(apfl.params, fedavg.params)
  personal = evaluation.personal_models(exp.algo, apfl.params, apfl.clients)
  for i in range(4):
    assert_same_params(row(personal, i), fedavg.params)


# ---------------------------------------------------------------------------------- FedRep


class MLP:
  """The zoo's ReLU MLP (6 -> 200 -> 200 -> 3) in numpy: params a dict of float64 arrays."""
  layers = ('dense0', 'dense1', 'head')

  def forward(self, P, x):
    acts, h = [], x.reshape(len(x), -1).astype(np.float64)
    for name in self.layers:
      acts.append(h)
      z = h @ P[name]['kernel'] + P[name]['bias']
      h = np.maximum(z, 0) if name != 'head' else z
    return acts, h

  def grad(self, P, x, y, mask):
    acts, z = self.forward(P, x)
    dz = (softmax(z) - onehot(y, 3)) * (mask / max(mask.sum(), 1.0))[:, None]
    g = {}
    for name, h in reversed(list(zip(self.layers, acts))):
      g[name] = {'kernel': h.T @ dz, 'bias': dz.sum(axis=0)}
      dz = (dz @ P[name]['kernel'].T) * (h > 0)
    return g


def numpy_params(params):
  return {k: {n: np.asarray(a, np.float64) for n, a in v.items()} for k, v in params.items()}


def flat_mlp(P):
  return np.concatenate([np.ravel(P[k][n]) for k in MLP.layers for n in ('bias', 'kernel')])


class FedRep:
  """Collins et al. 2021, Alg. 1: round(f H_i) steps on the head (the client's own, body
  frozen) then the rest on the body (head frozen); the server averages the bodies."""
  model = MLP()

  def __init__(self, fraction):
    self.fraction, self.heads = fraction, None

  def start(self, exp):
    return numpy_params(exp.state.params)

  @staticmethod
  def flat(params):
    return flat_mlp(numpy_params(params))

  @staticmethod
  def vector(theta):
    return flat_mlp(theta)

  def __call__(self, theta, ids, counts, batches):
    if self.heads is None:
      self.heads = [dict(theta['head']) for _ in range(4)]
    p, bodies = examples_weights(ids, counts), []
    for i in ids:
      P = {**theta, 'head': dict(self.heads[i])}
      h = int(np.round(self.fraction * len(batches[i])))
      for s, (x, y, mask) in enumerate(batches[i]):
        g = self.model.grad(P, x, y, mask)
        trained = ('head',) if s < h else ('dense0', 'dense1')
        P = {k: ({n: P[k][n] - LR * g[k][n] for n in P[k]} if k in trained else P[k])
             for k in P}
      self.heads[i] = P['head']
      bodies.append(P)
    new = {k: {n: sum(pi * b[k][n] for pi, b in zip(p, bodies)) for n in theta[k]}
           for k in ('dense0', 'dense1')}
    return {**new, 'head': theta['head']}  # the head's delta is zero


def test_fedrep(tiny_npz, unequal_partition):
  exp = make(tiny_npz, unequal_partition, 'fedrep', model='mlp', fedrep_head_fraction=0.5)
  reference = FedRep(0.5)

  def check(state, r):
    for i in range(4):
      head = row(state.clients['fedrep']['head'], i)  # its leaves: bias, kernel
      want = [reference.heads[i]['bias'], reference.heads[i]['kernel']]
      for got, w in zip(head, want):
        np.testing.assert_allclose(np.asarray(got), w, atol=5e-5, rtol=1e-4,
                                   err_msg=f'head {i} after round {r + 1}')
    personal = evaluation.personal_models(exp.algo, state.params, state.clients)
    np.testing.assert_array_equal(np.asarray(row(personal, 1)['dense0']['kernel']),
                                  np.asarray(state.params['dense0']['kernel']))

  lockstep(exp, reference, check, atol=5e-5)


def test_head_labels_split_the_last_layer():
  params = {'dense0': {'kernel': np.zeros((2, 3))}, 'head': {'kernel': np.ones((3, 2)),
                                                              'bias': np.ones(2)}}
  assert [h.shape for h in fedrep.head_leaves(params)] == [(2,), (3, 2)]
  swapped = fedrep.with_head(params, [np.full(2, 5.0), np.full((3, 2), 7.0)])
  assert swapped['head']['bias'][0] == 5.0 and swapped['head']['kernel'][0, 0] == 7.0
  assert swapped['dense0']['kernel'] is params['dense0']['kernel']


# ---------------------------------------------------------------------------------- pFedMe


class PFedMe(LogRegReference):
  """Dinh et al. 2020, Alg. 1 (as their code): theta from w^t, K inner steps per minibatch,
  w <- w - eta lambda (w - theta), server w - beta sum p_i (w^t - w_i)."""

  def __init__(self, lam, K, plr, beta, mu=0.0):
    self.lam, self.K, self.plr, self.beta, self.mu = lam, K, plr, beta, mu
    self.theta = None

  def __call__(self, theta, ids, counts, batches):
    if self.theta is None:
      self.theta = [theta.copy() for _ in range(4)]
    p, deltas = examples_weights(ids, counts), []
    for i in ids:
      w, th = theta.copy(), theta.copy()
      for x, y, mask in batches[i]:
        for _ in range(self.K):
          th = th - self.plr * (self.grad(th, x, y, mask) + self.lam * (th - w) + self.mu * th)
        w = w - LR * self.lam * (w - th)
      self.theta[i] = th
      deltas.append(theta - w)
    return theta - self.beta * sum(pi * d for pi, d in zip(p, deltas))


def test_pfedme(tiny_npz, unequal_partition):
  exp = make(tiny_npz, unequal_partition, 'pfedme', pfedme_lambda=2.0, pfedme_inner_steps=3,
             pfedme_personal_lr=0.05, server_lr=0.8, weight_decay=0.01)
  reference = PFedMe(2.0, 3, 0.05, 0.8, mu=0.01)

  def check(state, r):
    for i in range(4):
      np.testing.assert_allclose(flat(row(state.clients['pfedme']['params'], i)),
                                 reference.theta[i], atol=2e-5, rtol=1e-4,
                                 err_msg=f'theta_{i} after round {r + 1}')

  lockstep(exp, reference, check)


def test_pfedme_reduces_to_fedavg_with_one_inner_step_of_lr_one_over_lambda(
    tiny_npz, unequal_partition):
  """K = 1, p = 1/lambda, one local step a round, beta = 1: FedAvg (to float rounding)."""
  kw = dict(local_epochs=0, local_steps=1, rounds=3)
  _, fedavg = final_state(tiny_npz, unequal_partition, 'fedavg', **kw)
  _, pfedme = final_state(tiny_npz, unequal_partition, 'pfedme', pfedme_lambda=4.0,
                          pfedme_inner_steps=1, pfedme_personal_lr=0.25, **kw)
  np.testing.assert_allclose(flat(pfedme.params), flat(fedavg.params), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------ APFL


class APFL(LogRegReference):
  """Deng et al. 2020, Alg. 1 and eq. 10, all from the step's values."""

  def __init__(self, alpha, alpha_lr):
    self.alpha0, self.alpha_lr, self.v, self.alpha = alpha, alpha_lr, None, None

  def __call__(self, theta, ids, counts, batches):
    if self.v is None:
      self.v, self.alpha = [theta.copy() for _ in range(4)], [self.alpha0] * 4
    p, deltas = examples_weights(ids, counts), []
    for i in ids:
      w, v, a = theta.copy(), self.v[i], self.alpha[i]
      for x, y, mask in batches[i]:
        v_bar = a * v + (1 - a) * w
        g_w, g_bar = self.grad(w, x, y, mask), self.grad(v_bar, x, y, mask)
        w, v, a = (w - LR * g_w, v - LR * a * g_bar,
                   float(np.clip(a - self.alpha_lr * np.dot(v - w, g_bar), 0, 1)))
      self.v[i], self.alpha[i] = v, a
      deltas.append(theta - w)
    return theta - sum(pi * d for pi, d in zip(p, deltas))


@pytest.mark.parametrize('alpha_lr', [0.0, 0.5])
def test_apfl(tiny_npz, unequal_partition, alpha_lr):
  exp = make(tiny_npz, unequal_partition, 'apfl', apfl_alpha=0.3, apfl_alpha_lr=alpha_lr)
  reference = APFL(0.3, alpha_lr)

  def check(state, r):
    alphas = np.asarray(state.clients['apfl']['alpha'])
    np.testing.assert_allclose(alphas, reference.alpha, atol=1e-5, err_msg=f'round {r + 1}')
    personal = evaluation.personal_models(exp.algo, state.params, state.clients)
    for i in range(4):
      np.testing.assert_allclose(flat(row(state.clients['apfl']['params'], i)),
                                 reference.v[i], atol=2e-5, rtol=1e-4)
      a = reference.alpha[i]
      np.testing.assert_allclose(flat(row(personal, i)),
                                 a * reference.v[i] + (1 - a) * flat(state.params), atol=1e-5)

  state = lockstep(exp, reference, check)
  if alpha_lr:
    assert len(set(np.round(np.asarray(state.clients['apfl']['alpha']), 6))) > 1


# ------------------------------------------------------------- evaluation, grid and resume


def test_protocol_local_for_personal_methods_and_refusals():
  base = dict(dataset='embedded', test_partition='like_train')
  for algo in ('ditto', 'fedrep', 'pfedme', 'apfl', 'local_only'):
    assert study.eval_protocol(fedjax_drift.Config(algo=algo, **base)) == 'local'
    assert algo in evaluation.personal_algorithms()
  # without per-client test splits, auto refuses rather than score the global model quietly
  # (issue 45 item 3); --eval_protocol=global asks for it by name
  for algo in ('ditto', 'fedrep', 'pfedme', 'apfl'):
    with pytest.raises(UserError, match=f'--algo={algo} keeps a model per client.*'
                       '--test_partition=like_train.*--eval_protocol=global'):
      study.eval_protocol(fedjax_drift.Config(algo=algo, dataset='embedded'))
    assert study.eval_protocol(fedjax_drift.Config(algo=algo, dataset='embedded',
                                                   eval_protocol='global')) == 'global'
  with pytest.raises(UserError, match='--eval_protocol=local.*--algo=fedavg'):
    study.eval_protocol(fedjax_drift.Config(algo='fedavg', eval_protocol='local', **base))
  with pytest.raises(UserError, match='--test_partition=like_train'):
    study.eval_protocol(fedjax_drift.Config(algo='ditto', eval_protocol='local',
                                            dataset='embedded'))
  with pytest.raises(UserError, match='--local_terms=prox does not combine with --algo=apfl'):
    fedjax_drift.prepare(fedjax_drift.Config(algo='apfl', local_terms='prox', model='logreg',
                                             num_clients=4, clients_per_round=2, **base))


LOCAL = dict(test_partition='like_train', model='logreg')


@pytest.mark.parametrize('algo,kw', [
    ('ditto', dict(ditto_lambda=0.3)),
    ('fedrep', dict(fedrep_head_fraction=0.5, model='mlp')),
    ('pfedme', dict(pfedme_lambda=3.0, pfedme_inner_steps=2)),
    ('apfl', dict(apfl_alpha=0.4, apfl_alpha_lr=0.1)),
])
@pytest.mark.slow
def test_seeds_sweep_and_resume_under_the_local_protocol(tiny_npz, tmp_path, algo, kw):
  check_sweep_equals_single_runs_and_resumes(tiny_npz, tmp_path, algo=algo,
                                             **{**LOCAL, **kw})


@pytest.mark.parametrize('algo,axis', [
    ('ditto', 'ditto_lambda:0.05,0.5'),
    ('apfl', 'apfl_alpha_lr:0,0.2'),
    ('pfedme', 'pfedme_personal_lr:0.03,0.09'),
    ('fedrep', 'fedrep_head_fraction:0.3,0.8'),
])
@pytest.mark.slow
def test_grid_points_equal_single_runs(tiny_npz, tmp_path, algo, axis):
  name, values = axis.split(':')
  kw = dict(LOCAL, algo=algo, rounds=2, eval_every=1)
  fedjax_drift.run(sweep_config(tiny_npz, tmp_path / 'grid', grid=axis, **kw), **QUIET)
  grid = csv_rows(tmp_path / 'grid' / 'metrics.csv')
  runs = csv_rows(tmp_path / 'grid' / 'runs.csv')
  for value in values.split(','):
    out = tmp_path / f'single-{value}'
    fedjax_drift.run(sweep_config(tiny_npz, out, **{**kw, name: float(value)}), **QUIET)
    single = [float(r['test_loss']) for r in csv_rows(out / 'metrics.csv')]
    run = [r for r in runs if float(r[name]) == float(value)][0]
    mine = [float(r['test_loss']) for r in grid if r['run'] == run['run']]
    np.testing.assert_allclose(mine, single, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('algo,kw', [
    ('ditto', {}), ('pfedme', {}), ('apfl', dict(apfl_alpha_lr=0.1)), ('fedrep', dict(model='mlp')),
])
def test_vmap_equals_sequential(tiny_npz, unequal_partition, algo, kw):
  out = []
  for parallelism in ('vmap', 'sequential'):
    out.append(final_state(tiny_npz, unequal_partition, algo, client_parallelism=parallelism,
                           **kw)[1])
  chex.assert_trees_all_close(out[0].params, out[1].params, atol=1e-5, rtol=1e-5)
  chex.assert_trees_all_close(out[0].clients, out[1].clients, atol=1e-5, rtol=1e-5)


def test_an_algo_grid_scores_personal_methods_by_their_own_models_and_says_so(
    tiny_npz, unequal_partition, tmp_path):
  """Issue 45 item 3: in --grid='algo:...' a personalised method's number is its clients' own
  models' (not the global model's, FedAvg's for Ditto), and the run's output, table.csv and
  summary.json say which model each number is for."""
  lines = []
  config = tiny_config(tiny_npz, unequal_partition, grid='algo:fedavg,ditto', rounds=2,
                       clients_per_round=2, test_partition='like_train', ditto_lambda=0.0,
                       out=str(tmp_path / 'grid'))
  summary = fedjax_drift.run(config, log=lines.append)
  table = {r['algo']: r for r in csv_rows(tmp_path / 'grid' / 'table.csv')}
  assert table['fedavg']['scored_model'] == 'global'
  assert table['ditto']['scored_model'] == 'personal'
  assert summary['per_method']['ditto']['scored_model'] == 'personal'
  inner = {m: json.loads((tmp_path / 'grid' / m / 'summary.json').read_text())
           for m in ('fedavg', 'ditto')}
  assert inner['fedavg']['scored_model'] == 'global'
  assert inner['ditto']['scored_model'] == 'personal'
  assert inner['ditto']['eval_protocol'] == 'local'
  said = [line for line in lines if line.startswith('evaluation: scored_model=')]
  assert len(said) == 2 and said[0].startswith('evaluation: scored_model=global,') and \
      said[1].startswith('evaluation: scored_model=personal,'), said
  assert any(line.startswith('ditto: ') and '(personal model)' in line for line in lines), \
      lines


def test_an_algo_grid_without_client_test_splits_is_refused_before_any_method_runs(
    tiny_npz, unequal_partition, tmp_path):
  config = tiny_config(tiny_npz, unequal_partition, grid='algo:fedavg,fedrep', rounds=1,
                       out=str(tmp_path / 'grid'))
  with pytest.raises(UserError, match='--algo=fedrep keeps a model per client'):
    fedjax_drift.run(config, **QUIET)
  assert not (tmp_path / 'grid' / 'fedavg').exists()

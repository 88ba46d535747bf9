"""The baselines against numpy computations of their papers' rules (same setting as
test_algorithms.py: logreg, four unequal clients, minibatches, unequal H_i)."""
import chex
import jax
import numpy as np
import pytest

import fedjax_drift
from helpers import cohort_and_batches, run_rounds
from reference import LogReg, flat, onehot, softmax
from test_algorithms import LR, local_sgd, make, run_lockstep, weights


class FedProx:
  def __init__(self, mu):
    self.mu = mu

  def __call__(self, model, theta, ids, counts, batches, exp):
    def grad(w, x, y, mask):
      return model.grad(w, x, model.ce_dlogits(w, x, y), mask) + self.mu * (w - theta)
    p = weights(ids, counts)
    return sum(pi * local_sgd(model, theta, batches[i], grad) for pi, i in zip(p, ids))


def test_fedprox(tiny_npz, unequal_partition):
  run_lockstep(make(tiny_npz, unequal_partition, 'fedprox', prox_mu=0.5), FedProx(0.5))


class Scaffold:
  """Option II; uniform mean over the cohort (the paper's), server lr eta_g."""

  def __init__(self, num_clients, server_lr):
    self.n, self.eta_g, self.c, self.ci = num_clients, server_lr, None, {}

  def __call__(self, model, theta, ids, counts, batches, exp):
    c = np.zeros_like(theta) if self.c is None else self.c
    deltas, changes = [], []
    for i in ids:
      ci = self.ci.get(i, np.zeros_like(theta))
      y = theta.copy()
      for x, lab, mask in batches[i]:
        y = y - LR * (model.grad(y, x, model.ce_dlogits(y, x, lab), mask) - ci + c)
      ci_plus = ci - c + (theta - y) / (len(batches[i]) * LR)
      changes.append(ci_plus - ci)
      self.ci[i] = ci_plus
      deltas.append(y - theta)
    self.c = c + (len(ids) / self.n) * np.mean(changes, axis=0)
    return theta + self.eta_g * np.mean(deltas, axis=0)


def test_scaffold(tiny_npz, unequal_partition):
  exp = make(tiny_npz, unequal_partition, 'scaffold', clients_per_round=2, server_lr=0.9)
  state = run_lockstep(exp, Scaffold(4, 0.9), rounds=4)
  assert np.abs(np.asarray(state.server['scaffold']['dense']['kernel'])).max() > 0


class FedDyn:
  def __init__(self, num_clients, alpha):
    self.n, self.alpha, self.h, self.prev = num_clients, alpha, None, {}

  def __call__(self, model, theta, ids, counts, batches, exp):
    h = np.zeros_like(theta) if self.h is None else self.h
    finals = []
    for i in ids:
      prev = self.prev.get(i, np.zeros_like(theta))
      def grad(w, x, y, mask, prev=prev):
        return model.grad(w, x, model.ce_dlogits(w, x, y), mask) - prev + self.alpha * (w - theta)
      w = local_sgd(model, theta, batches[i], grad)
      self.prev[i] = prev - self.alpha * (w - theta)
      finals.append(w)
    self.h = h - self.alpha / self.n * sum(w - theta for w in finals)
    return np.mean(finals, axis=0) - self.h / self.alpha


def test_feddyn(tiny_npz, unequal_partition):
  exp = make(tiny_npz, unequal_partition, 'feddyn', clients_per_round=2, dyn_alpha=0.3)
  run_lockstep(exp, FedDyn(4, 0.3), rounds=4)


class FedNTD:
  def __init__(self, beta, tau):
    self.beta, self.tau = beta, tau

  def __call__(self, model, theta, ids, counts, batches, exp):
    def grad(w, x, y, mask):
      z, zt = model.logits(w, x), model.logits(theta, x)
      dl = softmax(z) - onehot(y, 3)
      for n in range(len(y)):
        keep = [c for c in range(3) if c != y[n]]
        s = softmax(z[n, keep] / self.tau)
        t = softmax(zt[n, keep] / self.tau)
        dl[n, keep] += self.beta * (s - t) / self.tau
      return model.grad(w, x, dl, mask)
    p = weights(ids, counts)
    return sum(pi * local_sgd(model, theta, batches[i], grad) for pi, i in zip(p, ids))


def test_fedntd(tiny_npz, unequal_partition):
  exp = make(tiny_npz, unequal_partition, 'fedntd', ntd_beta=0.7, ntd_temperature=2.0)
  run_lockstep(exp, FedNTD(0.7, 2.0))


class FedRS:
  def __init__(self, alpha):
    self.alpha = alpha

  def __call__(self, model, theta, ids, counts, batches, exp):
    p = weights(ids, counts)
    out = 0
    for pi, i in zip(p, ids):
      scale = np.where(np.asarray(exp.data.label_hist[i]) > 0, 1.0, self.alpha)

      def grad(w, x, y, mask, scale=scale):
        z = model.logits(w, x) * scale
        return model.grad(w, x, scale * (softmax(z) - onehot(y, 3)), mask)
      out = out + pi * local_sgd(model, theta, batches[i], grad)
    return out


def test_fedrs(tiny_npz, tmp_path):
  # Clients that each miss a class, so the restriction matters.
  data = np.load(tiny_npz)
  y = data['y_train']
  parts = [np.flatnonzero(y != c)[:12 + 3 * c].tolist() for c in range(3)]
  used = set()
  parts = [[i for i in p if not (i in used or used.add(i))] for p in parts]
  path = tmp_path / 'p.json'
  import json
  path.write_text(json.dumps(parts))
  exp = fedjax_drift.prepare(fedjax_drift.Config(
      algo='fedrs', rs_alpha=0.3, dataset=f'npz:{tiny_npz}', partition=f'file:{path}',
      model='logreg', num_clients=3, clients_per_round=3, local_steps=0, local_epochs=1,
      batch_size=4, lr=LR, progress=False))
  assert (np.asarray(exp.data.label_hist) == 0).any()
  run_lockstep(exp, FedRS(0.3))


class Adaptive:
  """Reddi et al. Algorithm 2 with v_{-1} = tau^2, no bias correction, uniform mean."""

  def __init__(self, kind, lr, b1, b2, tau):
    self.kind, self.lr, self.b1, self.b2, self.tau = kind, lr, b1, b2, tau
    self.m = self.v = None

  def __call__(self, model, theta, ids, counts, batches, exp):
    from test_algorithms import ce_grad
    Delta = np.mean([local_sgd(model, theta, batches[i], ce_grad(model)) - theta for i in ids],
                    axis=0)
    m = np.zeros_like(theta) if self.m is None else self.m
    v = np.full_like(theta, self.tau ** 2) if self.v is None else self.v
    m = self.b1 * m + (1 - self.b1) * Delta
    if self.kind == 'adagrad':
      v = v + Delta ** 2
    elif self.kind == 'yogi':
      v = v - (1 - self.b2) * Delta ** 2 * np.sign(v - Delta ** 2)
    else:
      v = self.b2 * v + (1 - self.b2) * Delta ** 2
    self.m, self.v = m, v
    return theta + self.lr * m / (np.sqrt(v) + self.tau)


@pytest.mark.parametrize('kind', ['adam', 'yogi', 'adagrad'])
def test_adaptive_server(tiny_npz, unequal_partition, kind):
  exp = make(tiny_npz, unequal_partition, f'fed{kind}', server_lr=0.05, server_beta1=0.8,
             server_beta2=0.95, server_tau=0.1)
  run_lockstep(exp, Adaptive(kind, 0.05, 0.8, 0.95, 0.1), rounds=4)


class FedCurv:
  """Penalty lambda sum_{j != k} (w - w_j)^T diag(I_j) (w - w_j); Fisher on the batch after
  the last local step, from per-example gradients."""

  def __init__(self, lam):
    self.lam, self.store = lam, {}

  def __call__(self, model, theta, ids, counts, batches, exp):
    finals = []
    for i in ids:
      others = [v for j, v in self.store.items() if j != i]

      def grad(w, x, y, mask, others=others):
        g = model.grad(w, x, model.ce_dlogits(w, x, y), mask)
        for fisher, anchor in others:
          g = g + 2 * self.lam * fisher * (w - anchor)
        return g
      w = local_sgd(model, theta, batches[i][:-1], grad)
      x, y, mask = batches[i][-1]  # the batch after the last step
      dl = model.ce_dlogits(w, x, y)
      per_example = [model.grad(w, x[n:n + 1], dl[n:n + 1], np.ones(1)) for n in range(len(y))]
      fisher = sum(m * g * g for m, g in zip(mask, per_example)) / max(mask.sum(), 1)
      finals.append((i, w, fisher))
    for i, w, fisher in finals:
      self.store[i] = (fisher, w)
    p = weights(ids, counts)
    return sum(pi * w for pi, (_, w, _) in zip(p, finals))


def test_fedcurv(tiny_npz, unequal_partition):
  exp = make(tiny_npz, unequal_partition, 'fedcurv', clients_per_round=2, curv_lambda=5.0)
  model = LogReg(6, 3)
  reference = FedCurv(5.0)
  state, step = exp.state, jax.jit(exp.round_fn)
  for r in range(4):
    ids, counts, batches = cohort_and_batches(exp, state, extra_steps=1)
    theta = reference(model, flat(state.params), [int(i) for i in ids], counts, batches, exp)
    state, _ = step(state, exp.data)
    np.testing.assert_allclose(flat(state.params), theta, atol=2e-5, rtol=1e-4,
                               err_msg=f'round {r + 1}')


def empirical_fisher(model, w, x, y, mask):
  """Mean over valid examples of squared per-example gradients."""
  dl = model.ce_dlogits(w, x, y)
  per_example = [model.grad(w, x[n:n + 1], dl[n:n + 1], np.ones(1)) for n in range(len(y))]
  return sum(m * g * g for m, g in zip(mask, per_example)) / max(mask.sum(), 1)


class FedCurvStateless:
  """FedFOR's eq. 9 over the previous round's cohort only: every client is penalised towards
  each (I_j, w_j) of that cohort (itself included, if it was there); nothing is kept longer."""

  def __init__(self, lam):
    self.lam, self.previous = lam, []

  def __call__(self, model, theta, ids, counts, batches, exp):
    def grad(w, x, y, mask):
      g = model.grad(w, x, model.ce_dlogits(w, x, y), mask)
      return g + sum(2 * self.lam * fisher * (w - anchor) for fisher, anchor in self.previous)

    finals = [local_sgd(model, theta, batches[i][:-1], grad) for i in ids]
    self.previous = [(empirical_fisher(model, w, *batches[i][-1]), w)
                     for w, i in zip(finals, ids)]
    p = weights(ids, counts)
    return sum(pi * w for pi, w in zip(p, finals))


def test_fedcurv_stateless(tiny_npz, unequal_partition):
  """Against numpy, two of four clients per round, so cohorts overlap and clients return."""
  exp = make(tiny_npz, unequal_partition, 'fedcurv_stateless', clients_per_round=2,
             curv_lambda=5.0)
  assert not jax.tree.leaves(exp.state.clients)  # stateless: no per-client table
  model, reference = LogReg(6, 3), FedCurvStateless(5.0)
  state, step = exp.state, jax.jit(exp.round_fn)
  for r in range(4):
    ids, counts, batches = cohort_and_batches(exp, state, extra_steps=1)
    theta = reference(model, flat(state.params), [int(i) for i in ids], counts, batches, exp)
    state, _ = step(state, exp.data)
    np.testing.assert_allclose(flat(state.params), theta, atol=2e-5, rtol=1e-4,
                               err_msg=f'round {r + 1}')
  assert len(reference.previous) == 2


def test_fedcurv_stateless_runs_with_fresh_clients(tiny_npz, unequal_partition):
  """FedFOR's Table 2 setting: new clients every round (the stateful FedCurv is refused)."""
  exp = make(tiny_npz, unequal_partition, 'fedcurv_stateless', curv_lambda=1.0,
             scenario='longtail_stateless', imbalance_ratio=0.1, client_fraction=0.5)
  state = run_rounds(exp, 3)
  fisher_sum = state.server['fedcurv_stateless']['U']
  assert all(np.all(np.isfinite(np.asarray(a))) for a in jax.tree.leaves(state.params))
  assert max(float(np.abs(np.asarray(a)).max()) for a in jax.tree.leaves(fisher_sum)) > 0


def _params(tiny_npz, unequal_partition, name, rounds, **kw):
  exp = make(tiny_npz, unequal_partition, name, clients_per_round=2, weighting='uniform', **kw)
  return run_rounds(exp, rounds).params


@pytest.mark.parametrize('algo,knob', [('fedcurv', dict(curv_lambda=5.0)),
                                       ('fedcurv_stateless', dict(curv_lambda=5.0)),
                                       ('fedprox', dict(prox_mu=0.5)),
                                       ('scaffold', dict()), ('feddyn', dict(dyn_alpha=0.3))])
def test_term_matters(tiny_npz, unequal_partition, algo, knob):
  """Dropping the mechanism changes the result (so the tests above can see it)."""
  on = flat(_params(tiny_npz, unequal_partition, algo, 4, **knob))
  off = flat(_params(tiny_npz, unequal_partition, 'fedavg', 4))
  assert np.abs(on - off).max() > 1e-4


@pytest.mark.parametrize('algo,knob_off', [
    ('fedprox', dict(prox_mu=0.0)),
    ('feddyn', dict(dyn_alpha=0.0)),
    ('fedcurv', dict(curv_lambda=0.0)),
    ('fedcurv_stateless', dict(curv_lambda=0.0)),
    ('fedntd', dict(ntd_beta=0.0)),
    ('fedrs', dict(rs_alpha=1.0)),
])
def test_baseline_reduces_to_fedavg(tiny_npz, unequal_partition, algo, knob_off):
  chex.assert_trees_all_close(_params(tiny_npz, unequal_partition, algo, 3, **knob_off),
                              _params(tiny_npz, unequal_partition, 'fedavg', 3),
                              atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize('algo', ['scaffold', 'feddyn', 'fedcurv', 'fedntd', 'fedadam'])
def test_vmap_equals_sequential(tiny_npz, unequal_partition, algo):
  out = []
  for parallelism in ('vmap', 'sequential'):
    exp = make(tiny_npz, unequal_partition, algo, model='mlp', clients_per_round=3,
               client_parallelism=parallelism, server_lr=0.1 if algo == 'fedadam' else 1.0)
    out.append(run_rounds(exp, 3))
  chex.assert_trees_all_close(out[0].params, out[1].params, atol=1e-5, rtol=1e-5)
  chex.assert_trees_all_close(out[0].clients, out[1].clients, atol=1e-5, rtol=1e-5)

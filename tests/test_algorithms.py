"""Every seed algorithm against a numpy computation of its paper's equations.

Setting: logistic regression on a tiny 3-class problem, four clients of unequal sizes (5, 9,
14, 20 examples), minibatches of 4 with one local epoch, so local step counts H_i differ
(2, 3, 4, 5). Aggregation weights are each paper's (--weighting=auto): uniform 1/|S| or n_i/n,
which differ here because the sizes do. Each test runs the compiled engine round by round and, in lockstep, a numpy
re-implementation fed with the same cohort and minibatches, and compares the global model
after every round. See tests/reference.py for the numpy pieces.
"""
import json

import chex
import jax
import numpy as np
import pytest

import fedjax_drift
from fedjax_drift.algorithms import igfl
from helpers import cohort_and_batches, run_rounds, tiny_config
from reference import LogReg, attention_mixing, flat, onehot, softmax

LR = 0.1


def make(tiny_npz, unequal_partition, algo, **overrides):
  base = dict(algo=algo, local_steps=0, local_epochs=1, batch_size=4, lr=LR,
              clients_per_round=4)
  base.update(overrides)
  return fedjax_drift.prepare(tiny_config(tiny_npz, unequal_partition, **base))


def run_lockstep(exp, reference, rounds=3, atol=2e-5):
  """Runs `rounds` rounds of the engine and of `reference(theta, ids, counts, batches)`."""
  model = LogReg(6, 3)
  state, step = exp.state, jax.jit(exp.round_fn)
  theta = flat(state.params)
  for r in range(rounds):
    ids, counts, batches = cohort_and_batches(exp, state)
    theta = reference(model, theta, [int(i) for i in ids], counts, batches, exp)
    state, _ = step(state, exp.data)
    np.testing.assert_allclose(flat(state.params), theta, atol=atol, rtol=1e-4,
                               err_msg=f'round {r + 1}')
  return state


def weights(ids, counts, mode='examples'):
  w = np.array([counts[i] if mode == 'examples' else 1.0 for i in ids], np.float64)
  return w / w.sum()


def local_sgd(model, theta, batches, grad_fn):
  for x, y, mask in batches:
    theta = theta - LR * grad_fn(theta, x, y, mask)
  return theta


def ce_grad(model):
  return lambda th, x, y, m: model.grad(th, x, model.ce_dlogits(th, x, y), m)


# ---------------------------------------------------------------------------------- SlowMo


class SlowMo:
  def __init__(self, beta, alpha=1.0):
    self.beta, self.alpha, self.m = beta, alpha, None

  def __call__(self, model, theta, ids, counts, batches, exp):
    p = weights(ids, counts, 'uniform')  # FedADC paper, Alg. 2 l.12
    deltas = [theta - local_sgd(model, theta, batches[i], ce_grad(model)) for i in ids]
    g_bar = sum(pi * d for pi, d in zip(p, deltas)) / LR
    self.m = g_bar if self.m is None else self.beta * self.m + g_bar
    return theta - self.alpha * LR * self.m


def test_slowmo(tiny_npz, unequal_partition):
  exp = make(tiny_npz, unequal_partition, 'slowmo', beta=0.7, server_lr=0.8)
  run_lockstep(exp, SlowMo(0.7, 0.8))


# ---------------------------------------------------------------------------------- FedADC


class FedADC:
  """Algorithm 3 (heavy ball / Nesterov), Algorithm 4 (double momentum), FedADC+ (§III)."""

  def __init__(self, beta_local, beta_global, variant='heavy_ball', alpha=1.0, phi=None,
               kd=None):
    self.bl, self.bg, self.variant, self.alpha, self.phi, self.kd = (
        beta_local, beta_global, variant, alpha, phi, kd)
    self.m = None
    self.identity_checked = 0

  def grad(self, model, theta_t, hist):
    if self.kd is None:
      return ce_grad(model)
    lam, tau = self.kd
    gamma = hist / hist.sum()
    rho = gamma / gamma.max()

    def g(th, x, y, mask):
      p_tilde = softmax(model.logits(theta_t, x) / tau)
      hot = onehot(y, 3)
      p_hat = (1 - rho) * p_tilde * (1 - hot)
      p_hat += hot * (1 - p_hat.sum(axis=1, keepdims=True))
      z = model.logits(th, x)
      dl = (1 - lam) * (softmax(z) - hot) + lam * (softmax(z / tau) - p_hat) / tau
      return model.grad(th, x, dl, mask)
    return g

  def __call__(self, model, theta, ids, counts, batches, exp):
    m = np.zeros_like(theta) if self.m is None else self.m
    p = weights(ids, counts, 'uniform')  # Alg. 3 l.16
    deltas = []
    for i in ids:
      hist = np.asarray(exp.data.label_hist[i], np.float64)
      grad = self.grad(model, theta, hist)
      H = len(batches[i])
      m_bar = self.bl * m / H
      w, grad_sum, local_m = theta.copy(), np.zeros_like(theta), None
      for t, (x, y, mask) in enumerate(batches[i]):
        if self.variant == 'nesterov':
          half = w - LR * m_bar
          g = grad(half, x, y, mask)
          w = half - LR * g
        elif self.phi is not None:
          g = grad(w, x, y, mask)
          local_m = g if t == 0 else self.phi * local_m + (1 - self.phi) * g
          w = w - LR * (m_bar + local_m)
        else:
          g = grad(w, x, y, mask)
          w = w - LR * (g + m_bar)
        grad_sum += g
      delta = theta - w
      if self.phi is None:  # eq. 4: Delta_i = eta (sum_tau g + beta_local m_t)
        np.testing.assert_allclose(delta, LR * (grad_sum + self.bl * m), atol=1e-12)
        self.identity_checked += 1
      deltas.append(delta)
    delta_bar = sum(pi * d for pi, d in zip(p, deltas)) / LR
    self.m = delta_bar + (self.bg - self.bl) * m
    return theta - self.alpha * LR * self.m


@pytest.mark.parametrize('variant', ['heavy_ball', 'nesterov'])
def test_fedadc(tiny_npz, unequal_partition, variant):
  exp = make(tiny_npz, unequal_partition, 'fedadc', fedadc_variant=variant, beta_local=0.5,
             beta_global=0.9, server_lr=0.9)
  run_lockstep(exp, FedADC(0.5, 0.9, variant, alpha=0.9))


def test_fedadc_conference_version(tiny_npz, unequal_partition):
  exp = make(tiny_npz, unequal_partition, 'fedadc', beta=0.8, beta_local=1.0)
  reference = FedADC(1.0, 0.8)  # m_bar = m_t / H, m_{t+1} = Delta_bar - (1 - beta) m_t
  run_lockstep(exp, reference)
  assert reference.identity_checked == 12


def test_fedadc_client_delta_identity(tiny_npz, unequal_partition):
  """Delta_i = eta (sum_tau g_tau + beta_local m_t), on the engine's own client update."""
  exp = make(tiny_npz, unequal_partition, 'fedadc', beta=0.6)
  state = jax.jit(exp.round_fn)(exp.state, exp.data)[0]  # now m_t != 0
  m_t = flat(fedjax_drift.algorithms.fedadc.momentum_of(state.server))
  assert np.abs(m_t).max() > 0
  ids, counts, batches = cohort_and_batches(exp, state)
  payload = exp.algo.broadcast(state.params, state.server)
  model, theta = LogReg(6, 3), flat(state.params)
  for cid in ids[:2]:
    from fedjax_drift.state import Client
    from fedjax_drift import engine
    spe = int(engine.steps_per_epoch(np.asarray(counts[cid]), 4))
    key = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(state.key, state.round), 1),
                             int(cid))
    client = Client(cid, counts[cid], spe, spe, exp.data.label_hist[cid],
                    engine.make_batch_fn(exp.data, exp.data.client_index[int(cid)],
                                          int(counts[cid]), key, 4, spe))
    result = exp.algo.client_update(state.params, payload, {}, client, key)
    delta = flat(result.delta)
    # Recompute the gradients along the engine's own trajectory.
    w, grad_sum = theta.copy(), np.zeros_like(theta)
    for x, y, mask in batches[int(cid)]:
      g = model.grad(w, x, model.ce_dlogits(w, x, y), mask)
      grad_sum += g
      w = w - LR * (g + 0.6 * m_t / spe)
    np.testing.assert_allclose(delta, LR * (grad_sum + 0.6 * m_t), atol=1e-5)


def test_fedadc_double_momentum(tiny_npz, unequal_partition):
  exp = make(tiny_npz, unequal_partition, 'fedadc_dm', beta=0.7, phi=0.6)
  run_lockstep(exp, FedADC(0.7, 0.7, phi=0.6))


def test_fedadc_plus(tiny_npz, unequal_partition):
  exp = make(tiny_npz, unequal_partition, 'fedadc_plus', beta=0.7, kd_lambda=0.35,
             kd_temperature=2.0)
  run_lockstep(exp, FedADC(0.7, 0.7, kd=(0.35, 2.0)))


# ---------------------------------------------------------------------------------- FedFOR


class FedFOR:
  """eqs. 6-7: gradient c_s (w^{t-2} - w^{t-1}) where the gate is open, 1/K averaging
  (Algorithm 1). Gate: per coordinate, (w^{t-2}-w^{t-1})_j (w-w^{t-1})_j > 0 (eq. 7); vector:
  the whole inner product > 0. c_s at local step s of H_i (an epoch = ceil(n_i/B) steps):
  alpha/eta (paper); alpha/(eta H_i) (per_step); alpha/eta at s = H_i - 1 only (round);
  alpha/eta where s + 1 is a multiple of the epoch (epoch)."""

  def __init__(self, alpha, scale='paper', gate='coordinate', batch_size=4):
    self.alpha, self.scale, self.gate, self.b, self.older = alpha, scale, gate, batch_size, None

  def coefficient(self, s, steps, n):
    epoch = -(-n // self.b)
    on = {'paper': True, 'per_step': True, 'round': s == steps - 1,
          'epoch': (s + 1) % epoch == 0}[self.scale]
    return self.alpha / (LR * (steps if self.scale == 'per_step' else 1)) * on

  def __call__(self, model, theta, ids, counts, batches, exp):
    older = theta if self.older is None else self.older
    diff = older - theta
    finals = []
    for i in ids:
      w = theta
      for s, (x, y, mask) in enumerate(batches[i]):
        products = diff * (w - theta)
        gate = products > 0 if self.gate == 'coordinate' else products.sum() > 0
        c = self.coefficient(s, len(batches[i]), int(counts[i]))
        w = w - LR * (model.grad(w, x, model.ce_dlogits(w, x, y), mask) + c * diff * gate)
      finals.append(w)
    self.older = theta
    return np.mean(finals, axis=0)


@pytest.fixture(scope='module')
def label_skewed(tiny_npz, tmp_path_factory):
  """Four clients of unequal sizes, each mostly one class (sorted by label), so that a client's
  move can point back against the global one, which opens the vector gate."""
  order = np.argsort(np.load(tiny_npz)['y_train'], kind='stable')
  parts = [order[:8], order[8:20], order[20:38], order[38:60]]
  path = tmp_path_factory.mktemp('skewed') / 'parts.json'
  path.write_text(json.dumps([sorted(int(i) for i in p) for p in parts]))
  return str(path)


READINGS = [(s, g) for g in ('coordinate', 'vector') for s in ('paper', 'per_step', 'round',
                                                                'epoch')]


@pytest.mark.parametrize('scale,gate', READINGS)
def test_fedfor(tiny_npz, label_skewed, scale, gate):
  alpha = 0.05 if scale == 'paper' else 0.2
  exp = make(tiny_npz, label_skewed, 'fedfor', for_alpha=alpha, for_scale=scale,
             for_gate=gate, clients_per_round=3, local_epochs=2)
  reference = FedFOR(alpha, scale, gate)
  run_lockstep(exp, reference, rounds=4)


@pytest.mark.parametrize('scale,gate', READINGS)
def test_fedfor_term_is_active(tiny_npz, label_skewed, scale, gate):
  """Every reading's term changes round 2+ (so the lockstep test above is not vacuous)."""
  alpha = 0.05 if scale == 'paper' else 0.2
  knobs = dict(for_scale=scale, for_gate=gate, local_epochs=2, clients_per_round=3)
  a = run_rounds(make(tiny_npz, label_skewed, 'fedfor', for_alpha=alpha, **knobs), 4)
  b = run_rounds(make(tiny_npz, label_skewed, 'fedfor', for_alpha=0.0, **knobs), 4)
  assert np.abs(flat(a.params) - flat(b.params)).max() > 1e-4


def _global_update_norms(exp, rounds):
  state, step, norms = exp.state, jax.jit(exp.round_fn), []
  for _ in range(rounds):
    new = step(state, exp.data)[0]
    norms.append(np.linalg.norm(flat(new.params) - flat(state.params)))
    state = new
  return np.array(norms)


def test_fedfor_alpha_growth_factor(tiny_npz, unequal_partition):
  """Eq. 7 as printed (alpha/eta), alpha = 5: a local step where a coordinate moves back jumps
  alpha (W^{t-1} - W^{t-2}), so the global update grows up to alpha-fold per round. Scaled per
  step (alpha/(eta H_i)) it stays the size of FedAvg's."""
  paper = _global_update_norms(make(tiny_npz, unequal_partition, 'fedfor', for_alpha=5.0,
                                    for_scale='paper'), 8)
  growth = paper[1:] / paper[:-1]
  assert growth.max() > 3.5 and paper[-1] > 100 * paper[0]
  assert np.all(growth < 5.0 + 1.0)  # up to alpha, plus the loss's own step
  per_step = _global_update_norms(make(tiny_npz, unequal_partition, 'fedfor', for_alpha=5.0,
                                       for_scale='per_step'), 8)
  fedavg = _global_update_norms(make(tiny_npz, unequal_partition, 'fedavg',
                                     weighting='uniform'), 8)
  assert np.all(per_step[1:] / per_step[:-1] < 1.5)
  assert per_step.max() < 2 * fedavg.max()


# ---------------------------------------------------------------------------------- FedGKD


class FedGKD:
  """eqs. 3-5: teacher = mean of the last M global models (including the current one)."""

  def __init__(self, gamma, M, tau, vote_lambda=None, start='initial'):
    self.gamma, self.M, self.tau, self.vote_lambda = gamma, M, tau, vote_lambda
    self.history = []
    self.first = start == 'aggregated'  # the authors' code: w_0 is never buffered

  def __call__(self, model, theta, ids, counts, batches, exp):
    if not self.first:
      self.history = (self.history + [theta])[-self.M:]
    self.first = False
    if not self.history:  # nothing buffered: plain FedAvg this round
      p = weights(ids, counts)
      return sum(pi * local_sgd(model, theta, batches[i],
                                lambda w, x, y, mask: model.grad(w, x, model.ce_dlogits(w, x, y),
                                                                 mask))
                 for pi, i in zip(p, ids))
    if self.vote_lambda is None:
      teachers = [np.mean(self.history, axis=0)]
      coefs = [self.gamma / 2]
    else:
      xv = np.asarray(exp.server_data['x_val'])
      yv = np.asarray(exp.server_data['y_val'])
      losses = np.array([-np.mean(np.log(softmax(model.logits(h, xv))[np.arange(len(yv)), yv]))
                         for h in self.history])
      teachers = self.history
      coefs = self.vote_lambda * softmax(-losses / (1.0 / self.M))

    def grad(w, x, y, mask):
      dl = model.ce_dlogits(w, x, y)
      for coef, teacher in zip(coefs, teachers):
        dl = dl + coef * model.kd_dlogits(w, teacher, x, self.tau)
      return model.grad(w, x, dl, mask)

    p = weights(ids, counts)
    return sum(pi * local_sgd(model, theta, batches[i], grad) for pi, i in zip(p, ids))


def test_fedgkd(tiny_npz, unequal_partition):
  exp = make(tiny_npz, unequal_partition, 'fedgkd', gkd_gamma=0.8, gkd_buffer=2,
             kd_temperature=2.0)
  run_lockstep(exp, FedGKD(0.8, 2, 2.0), rounds=4)


@pytest.mark.parametrize('algo', ['fedgkd', 'fedgkd_vote'])
def test_fedgkd_code_buffer_skips_round_one(tiny_npz, unequal_partition, algo):
  """--gkd_buffer_start=aggregated (the authors' code): the buffer holds only aggregated models,
  so round 1 is FedAvg and round r distils from w_1..w_{r-1}."""
  vote = algo == 'fedgkd_vote'
  exp = make(tiny_npz, unequal_partition, algo, gkd_gamma=0.8, vote_lambda=0.5, gkd_buffer=2,
             kd_temperature=2.0, vote_val_size=10, gkd_buffer_start='aggregated')
  run_lockstep(exp, FedGKD(None if vote else 0.8, 2, 2.0, vote_lambda=0.5 if vote else None,
                           start='aggregated'), rounds=4)


def test_fedgkd_vote(tiny_npz, unequal_partition):
  exp = make(tiny_npz, unequal_partition, 'fedgkd_vote', vote_lambda=0.5, gkd_buffer=3,
             kd_temperature=1.5, vote_val_size=10)
  assert exp.server_data['x_val'].shape == (10, 6)
  run_lockstep(exp, FedGKD(None, 3, 1.5, vote_lambda=0.5), rounds=4)


def test_fedgkd_plus_is_fedgkd_on_a_projection_head(tiny_npz, unequal_partition):
  """FedGKD+ (FedGKD paper, §5.1): FedGKD on a model whose projection head sits before the
  output layer, so the head is trained by CE and distillation; gamma = 0 is FedAvg on that
  model (= MOON with mu = 0), gamma > 0 is not."""
  kw = dict(model='mlp', moon_projection_dim=8, clients_per_round=3)
  plus = make(tiny_npz, unequal_partition, 'fedgkd_plus', gkd_gamma=0.0, **kw)
  assert {'classifier', 'projection_dense1'} <= set(plus.state.params)
  off = run_rounds(plus, 2).params
  moon_off = run_rounds(make(tiny_npz, unequal_partition, 'moon', moon_mu=0.0, **kw), 2).params
  chex.assert_trees_all_close(off, moon_off, atol=1e-6, rtol=1e-6)
  head_before = np.asarray(plus.state.params['projection_dense1']['kernel'])
  assert np.abs(np.asarray(off['projection_dense1']['kernel']) - head_before).max() > 1e-4
  on = run_rounds(make(tiny_npz, unequal_partition, 'fedgkd_plus', gkd_gamma=0.8,
                       kd_temperature=2.0, **kw), 2).params
  assert np.abs(flat_tree(on) - flat_tree(off)).max() > 1e-5


def flat_tree(tree):
  return np.concatenate([np.ravel(a) for a in jax.tree.leaves(tree)])


# ---------------------------------------------------------------------------------- IGFL


class IGFL:
  """Algorithms 1-3. Updates in the paper's sign Delta_w = w - w_ps."""

  def __init__(self, num_clients, group=True, attention=None, similarity='dot', temp=1.0):
    self.group, self.attention, self.similarity, self.temp = group, attention, similarity, temp
    self.own = {}
    self.ps = None
    self.weight_sums = []

  def __call__(self, model, theta, ids, counts, batches, exp):
    K = len(ids)
    ps = np.zeros_like(theta) if self.ps is None else self.ps
    updates, previous = [], []
    for i in ids:
      own = self.own.get(i, np.zeros_like(theta))
      previous.append(own)
      w, T = theta.copy(), len(batches[i])
      for x, y, mask in batches[i]:
        d_i = -LR * model.grad(w, x, model.ce_dlogits(w, x, y), mask)
        d_g = (d_i - own / T) / K + ps / T if self.group else 0.0
        w = w + d_i + d_g
      updates.append(w - theta)
    for i, u in zip(ids, updates):
      self.own[i] = u
    V = np.stack(updates)
    if self.attention is None:
      new = theta + V.mean(axis=0)
    else:
      a = attention_mixing(self.attention, V, np.stack(previous), self.similarity, self.temp)
      self.weight_sums.append(a.sum())
      new = theta + a @ V
    self.ps = new - theta
    return new


def test_igfl_c(tiny_npz, unequal_partition):
  exp = make(tiny_npz, unequal_partition, 'igfl_c', clients_per_round=2)
  run_lockstep(exp, IGFL(4), rounds=4)


@pytest.mark.parametrize('kind,similarity,temp', [('self', 'dot', 1.0), ('global', 'dot', 1.0),
                                                  ('time', 'dot', 1.0), ('time_rows', 'dot', 1.0),
                                                  ('time', 'cosine', 0.5),
                                                  ('self', 'cosine', 0.5)])
def test_igfl_s(tiny_npz, unequal_partition, kind, similarity, temp):
  exp = make(tiny_npz, unequal_partition, 'igfl_s', clients_per_round=3, attention=kind,
             attention_similarity=similarity, attention_temperature=temp)
  run_lockstep(exp, IGFL(4, group=False, attention=kind, similarity=similarity, temp=temp),
               rounds=4)


TEMP = 0.01


def test_igfl_time_attention_weight_sum(tiny_npz, unequal_partition):
  """§4.3's alpha_j are unnormalised: the engine's recorded sum (the algorithm's diagnostics)
  matches the numpy reference every round, and differs from 1 once clients return."""
  exp = make(tiny_npz, unequal_partition, 'igfl_s', clients_per_round=3, attention='time',
             attention_temperature=TEMP)
  reference = IGFL(4, group=False, attention='time', temp=TEMP)
  model, state, step = LogReg(6, 3), exp.state, jax.jit(exp.round_fn)
  for r in range(5):
    ids, counts, batches = cohort_and_batches(exp, state)
    theta = reference(model, flat(state.params), [int(i) for i in ids], counts, batches, exp)
    state, _ = step(state, exp.data)
    np.testing.assert_allclose(flat(state.params), theta, atol=2e-5, rtol=1e-4)
    got = float(exp.algo.diagnostics(state.server)['attention_weight_sum'])
    np.testing.assert_allclose(got, reference.weight_sums[-1], rtol=1e-5)
  assert abs(reference.weight_sums[0] - 1.0) < 1e-6  # round 1: zero queries, alpha_j = 1/K
  assert max(abs(w - 1.0) for w in reference.weight_sums) > 0.05


def test_time_attention_zero_query_and_overflow():
  values = np.array([[3.0, 0.0], [0.0, 2.0], [1e20, 1e20]], np.float32)
  previous = np.array([[0.0, 0.0], [0.0, 1.0], [1e20, 1e20]], np.float32)
  a = np.asarray(igfl.mixing_weights('time', jax.numpy.asarray(values),
                                     jax.numpy.asarray(previous)))
  assert np.all(np.isfinite(a))
  np.testing.assert_allclose(a[0], 1 / 3, rtol=1e-6)  # no previous update: uniform row
  assert a[1] == 0.0 and a[2] == 1.0  # scores overflow float32 but keep their order
  np.testing.assert_allclose(a, attention_mixing('time', values.astype(np.float64),
                                                 previous.astype(np.float64)), atol=1e-6)


@pytest.mark.parametrize('kind', ['self', 'time'])
def test_igfl(tiny_npz, unequal_partition, kind):
  exp = make(tiny_npz, unequal_partition, 'igfl', clients_per_round=2, attention=kind)
  run_lockstep(exp, IGFL(4, attention=kind), rounds=4)


def test_attention_softmax_finite_for_huge_dot_products():
  v = np.array([[1e20, 0.0], [1e20, 1e19], [-1e20, 3.0]], np.float32)
  for sim in ('dot', 'cosine'):
    a = np.asarray(igfl.attention_weights(jax.numpy.asarray(v), jax.numpy.asarray(v), sim))
    assert np.all(np.isfinite(a)) and np.allclose(a.sum(axis=1), 1.0)
  a = np.asarray(igfl.attention_weights(jax.numpy.asarray(v), jax.numpy.asarray(v)))
  assert a[0, 2] == 0.0 and a[2, 2] == 1.0  # scores of +-1e40 overflow float32 but stay ordered


# ------------------------------------------------------------------- reductions to FedAvg


def _fedavg_params(tiny_npz, unequal_partition, rounds=3, **overrides):
  return run_rounds(make(tiny_npz, unequal_partition, 'fedavg', **overrides), rounds).params


@pytest.mark.parametrize('algo,knob_off', [
    ('slowmo', dict(beta=0.0)),
    ('fedadc', dict(beta=0.0)),
    ('fedadc', dict(beta=0.0, fedadc_variant='nesterov')),
    ('fedadc_dm', dict(beta=0.0, phi=0.0)),
    ('fedadc_plus', dict(beta=0.0, kd_lambda=0.0)),
    ('fedfor', dict(for_alpha=0.0)),
    *[('fedfor', dict(for_alpha=0.0, for_scale=s, for_gate=g)) for s, g in READINGS],
    ('fedgkd', dict(gkd_gamma=0.0)),
    ('fedgkd_vote', dict(vote_lambda=0.0, vote_val_size=5)),
    ('igfl_c', dict(igfl_group=0.0)),
    ('igfl_s', dict(attention_temperature=1e30)),
    ('igfl_s', dict(attention_temperature=1e30, attention='time')),
    ('igfl_s', dict(attention_temperature=1e30, attention='time_rows')),
    ('igfl', dict(igfl_group=0.0, attention_temperature=1e30)),
])
def test_reduces_to_fedavg_when_knob_off(tiny_npz, unequal_partition, algo, knob_off):
  """At the algorithm's own (auto) weighting, FedAvg run with that same weighting."""
  exp = make(tiny_npz, unequal_partition, algo, clients_per_round=2, **knob_off)
  state = run_rounds(exp, 3)
  reference = _fedavg_params(tiny_npz, unequal_partition, clients_per_round=2,
                             weighting=fedjax_drift.algorithms.weighting(exp.config))
  chex.assert_trees_all_close(state.params, reference, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize('algo,expected', [
    ('fedavg', 'examples'), ('slowmo', 'uniform'), ('fedavgm', 'uniform'),
    ('fedadc', 'uniform'), ('fedadc_dm', 'uniform'), ('fedadc_plus', 'uniform'),
    ('fedfor', 'uniform'), ('fedgkd', 'examples'), ('fedgkd_vote', 'examples'),
    ('fedgkd_plus', 'examples'), ('igfl', 'uniform'), ('igfl_c', 'uniform'),
    ('igfl_s', 'uniform'), ('scaffold', 'uniform'), ('feddyn', 'uniform'),
    ('fedadam', 'uniform'), ('fedyogi', 'uniform'), ('fedadagrad', 'uniform'),
    ('fedprox', 'examples'), ('fedntd', 'examples'), ('fedrs', 'examples'),
    ('moon', 'examples'), ('fedcurv', 'examples'), ('fedcurv_stateless', 'examples'),
    ('fedbn', 'examples')])
def test_paper_weighting(algo, expected):
  """--weighting=auto is each algorithm box's p_i, with its source; a flag overrides it."""
  config = fedjax_drift.Config(algo=algo, weighting='auto')
  assert fedjax_drift.algorithms.weighting(config) == expected
  assert fedjax_drift.algorithms.weighting_source(config)
  other = 'uniform' if expected == 'examples' else 'examples'
  forced = fedjax_drift.Config(algo=algo, weighting=other)
  assert fedjax_drift.algorithms.weighting(forced) == other
  assert 'flag' in fedjax_drift.algorithms.weighting_source(forced)


def test_every_recipe_states_its_weighting_source():
  recipes = fedjax_drift.algorithms.recipes.registered()
  assert tuple(recipes) == fedjax_drift.algorithms.names()
  for name, recipe in recipes.items():
    assert recipe.weighting_source, name


# ------------------------------------------------------------- vmap equals sequential


@pytest.mark.parametrize('algo', ['fedadc', 'fedadc_plus', 'fedfor', 'fedgkd', 'igfl'])
def test_vmap_equals_sequential(tiny_npz, unequal_partition, algo):
  out = []
  for parallelism in ('vmap', 'sequential'):
    exp = make(tiny_npz, unequal_partition, algo, model='mlp', clients_per_round=3,
               client_parallelism=parallelism, attention='time')
    out.append(run_rounds(exp, 3))
  chex.assert_trees_all_close(out[0].params, out[1].params, atol=1e-5, rtol=1e-5)
  chex.assert_trees_all_close(out[0].clients, out[1].clients, atol=1e-5, rtol=1e-5)

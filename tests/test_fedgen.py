"""FedGen (algorithms/fedgen.py) against an independent computation of its update rule.

Same tiny setting as test_algorithms.py: logistic regression (its penultimate features are its
6 inputs, its head the one Dense layer), four clients of sizes 5, 9, 14 and 20, minibatches of
4, one local epoch, two clients per round. The reference below is written from the update rule
in docs/algorithms.md: the generator forward, its BatchNorm, the diversity and teacher losses
and the client objective are written out here again, differentiated with plain jax.grad, and
stepped with a numpy Adam and numpy SGD. Only the conventions of where the random draws come
from (the tags folded into the engine's keys) are taken from the implementation.
"""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import models
from fedjax_drift.algorithms import fedgen
from helpers import (QUIET, check_sweep_equals_single_runs_and_resumes, cohort_and_batches,
                     csv_rows, run_rounds, sweep_config)
from test_algorithms import LR, _fedavg_params, make, weights

C, D = 3, 6  # classes; logreg's penultimate width (its inputs)
NOISE, HIDDEN, STEPS, GEN_BATCH, CLIENT_BATCH = 3, 5, 4, 6, 5
GEN_LR, GEN_WD, DECAY, DIVERSITY = 0.01, 0.01, 0.9, 0.7


def _flags(**kw):
  base = dict(clients_per_round=2, fedgen_noise_dim=NOISE, fedgen_hidden=HIDDEN,
              fedgen_steps=STEPS, fedgen_batch=GEN_BATCH, fedgen_client_batch=CLIENT_BATCH,
              fedgen_lr=GEN_LR, fedgen_weight_decay=GEN_WD, fedgen_decay=DECAY,
              fedgen_diversity=DIVERSITY)
  base.update(kw)
  return base


def _gen_forward(g, stats, y, noise, train):
  """concat(noise, onehot y) -> Linear -> BatchNorm1d (torch semantics) -> ReLU -> Linear."""
  h = jnp.concatenate([noise, jax.nn.one_hot(y, C)], 1) @ g['fc']['kernel'] + g['fc']['bias']
  if train:
    mu, var = h.mean(0), ((h - h.mean(0)) ** 2).mean(0)
    n = h.shape[0]
    stats = {'mean': 0.9 * stats['mean'] + 0.1 * mu, 'var': 0.9 * stats['var'] + 0.1 * var * n / (n - 1)}
  else:
    mu, var = stats['mean'], stats['var']
  h = jax.nn.relu((h - mu) / jnp.sqrt(var + 1e-5) * g['bn']['scale'] + g['bn']['bias'])
  return h @ g['out']['kernel'] + g['out']['bias'], stats


def _log_softmax(z):
  return z - jax.scipy.special.logsumexp(z, axis=-1, keepdims=True)


class Reference:
  """The server's generator (params, running statistics, Adam moments) and one FedGen round."""

  def __init__(self, alpha, beta, teacher='clients'):
    self.alpha, self.beta, self.teacher = alpha, beta, teacher
    self.t = 0
    self.g = self.stats = self.m = self.v = None
    self.adam_t = 0
    self.teacher_losses = []

  def coefficient(self, c):
    return 0.0 if c == 0 else max(1e-4, c * DECAY ** self.t)

  def client_loss(self, theta, x, y, mask, key, step):
    """CE + beta_t KL(softmax(head(G(y))) || softmax(f(x))) + alpha_t S/B CE(head(G(y')), y')."""
    W, b = theta[:D * C].reshape(D, C), theta[D * C:]
    logits = x.reshape(len(x), -1) @ W + b
    mask = jnp.asarray(mask)
    ce = -jnp.sum(jax.nn.one_hot(y, C) * _log_softmax(logits), 1)
    loss = jnp.sum(ce * mask) / jnp.maximum(mask.sum(), 1.0)
    if self.t == 0:
      return loss
    k = jax.random.fold_in(jax.random.fold_in(key, fedgen._CLIENT_TAG), step)
    k_real, k_labels, k_fake = jax.random.split(k, 3)
    z, _ = _gen_forward(self.g, self.stats, y, jax.random.uniform(k_real, (len(y), NOISE)), False)
    target = jax.lax.stop_gradient(jax.nn.softmax(z @ W + b))
    kl = jnp.sum(target * (jnp.log(target) - _log_softmax(logits)), 1)
    loss = loss + self.coefficient(self.beta) * jnp.sum(kl * mask) / jnp.maximum(mask.sum(), 1.0)
    y2 = jax.random.randint(k_labels, (CLIENT_BATCH,), 0, C)
    z2, _ = _gen_forward(self.g, self.stats, y2,
                         jax.random.uniform(k_fake, (CLIENT_BATCH, NOISE)), False)
    ce2 = -jnp.mean(jnp.sum(jax.nn.one_hot(y2, C) * _log_softmax(z2 @ W + b), 1))
    return loss + self.coefficient(self.alpha) * CLIENT_BATCH / len(y) * ce2

  def train_generator(self, heads, counts, key):
    """torch's Adam (L2 in the gradient) on teacher + diversity, lr decayed 0.98 per round."""
    if self.t == 0:
      k = jax.random.split(jax.random.fold_in(key, 0), 4)
      b1, b2 = 1 / np.sqrt(NOISE + C), 1 / np.sqrt(HIDDEN)
      self.g = {'fc': {'kernel': jax.random.uniform(k[0], (NOISE + C, HIDDEN), minval=-b1, maxval=b1),
                       'bias': jax.random.uniform(k[1], (HIDDEN,), minval=-b1, maxval=b1)},
                'bn': {'scale': jnp.ones(HIDDEN), 'bias': jnp.zeros(HIDDEN)},
                'out': {'kernel': jax.random.uniform(k[2], (HIDDEN, D), minval=-b2, maxval=b2),
                        'bias': jax.random.uniform(k[3], (D,), minval=-b2, maxval=b2)}}
      self.stats = {'mean': jnp.zeros(HIDDEN), 'var': jnp.ones(HIDDEN)}
      self.m = jax.tree.map(jnp.zeros_like, self.g)
      self.v = jax.tree.map(jnp.zeros_like, self.g)
    counts = np.asarray(counts, np.float64)                     # [K, C]
    w = counts / counts.sum(0)                                  # [K, C]: n_k[c] / sum_j n_j[c]
    held = counts.sum(0) > 0

    def objective(g, stats, y, noise):
      z, stats = _gen_forward(g, stats, y, noise, True)
      wy = jnp.asarray(w[:, y], jnp.float32)                    # [K, B]
      if self.teacher == 'clients':
        t_loss = sum(jnp.mean(-jnp.sum(jax.nn.one_hot(y, C) * _log_softmax(z @ W + b), 1) * wy[k])
                     for k, (W, b) in enumerate(heads))
      else:
        mixed = sum(wy[k][:, None] * (z @ W + b) for k, (W, b) in enumerate(heads))
        t_loss = jnp.mean(-jnp.sum(jax.nn.one_hot(y, C) * _log_softmax(mixed), 1))
      dz = jnp.mean(jnp.abs(z[:, None] - z[None]), -1)
      dn = jnp.mean((noise[:, None] - noise[None]) ** 2, -1)
      return t_loss + DIVERSITY * jnp.exp(-jnp.mean(dn * dz)), (stats, t_loss)

    lr = GEN_LR * 0.98 ** self.t
    losses = []
    for i in range(STEPS):
      k_y, k_noise = jax.random.split(jax.random.fold_in(key, i + 1))
      y = jax.random.choice(k_y, C, (GEN_BATCH,), p=jnp.asarray(held / held.sum(), jnp.float32))
      noise = jax.random.uniform(k_noise, (GEN_BATCH, NOISE))
      grads, (self.stats, t_loss) = jax.grad(objective, has_aux=True)(self.g, self.stats, y, noise)
      losses.append(float(t_loss))
      self.adam_t += 1
      grads = jax.tree.map(lambda gr, p: np.asarray(gr, np.float64) + GEN_WD * np.asarray(p),
                           grads, self.g)
      self.m = jax.tree.map(lambda m, gr: 0.9 * m + 0.1 * gr, self.m, grads)
      self.v = jax.tree.map(lambda v, gr: 0.999 * v + 0.001 * gr * gr, self.v, grads)
      bc1, bc2 = 1 - 0.9 ** self.adam_t, 1 - 0.999 ** self.adam_t
      self.g = jax.tree.map(
          lambda p, m, v: jnp.asarray(np.asarray(p) - lr * (np.asarray(m) / bc1) /
                                      (np.sqrt(np.asarray(v) / bc2) + 1e-8), jnp.float32),
          self.g, self.m, self.v)
    self.teacher_losses.append(np.mean(losses))

  def round(self, exp, state, theta):
    ids, counts, batches = cohort_and_batches(exp, state)
    rkey = jax.random.fold_in(state.key, state.round)
    grad = jax.jit(jax.grad(self.client_loss), static_argnums=())
    finals, heads, label_counts = [], [], []
    for cid in ids:
      key = jax.random.fold_in(jax.random.fold_in(rkey, 1), int(cid))
      w = theta.astype(np.float64)
      for step, (x, y, mask) in enumerate(batches[int(cid)]):
        g = grad(jnp.asarray(w, jnp.float32), jnp.asarray(x, jnp.float32), jnp.asarray(y), mask,
                 key, step)
        w = w - LR * np.asarray(g, np.float64)
      finals.append(w)
      heads.append((jnp.asarray(w[:D * C].reshape(D, C), jnp.float32),
                    jnp.asarray(w[D * C:], jnp.float32)))
      rows = np.asarray(exp.data.client_index[int(cid)])[:int(counts[cid])]
      label_counts.append(np.bincount(np.asarray(exp.data.y)[rows], minlength=C))
    first_key = jax.random.fold_in(
        jax.random.fold_in(jax.random.fold_in(rkey, 1), int(ids[0])), fedgen._SERVER_TAG)
    self.train_generator(heads, label_counts, first_key)
    self.t += 1
    p = weights([int(i) for i in ids], counts)
    return sum(pi * w for pi, w in zip(p, finals))


def _flat(params):
  return np.concatenate([np.ravel(params['dense']['kernel']), np.ravel(params['dense']['bias'])])


@pytest.mark.parametrize('teacher', ['clients', 'ensemble'])
def test_fedgen_matches_reference(tiny_npz, unequal_partition, teacher):
  """Three rounds: round 1 without the local terms (no generator yet), rounds 2-3 with them,
  the generator trained after each; model, generator and its statistics compared."""
  exp = make(tiny_npz, unequal_partition, 'fedgen',
             **_flags(fedgen_alpha=2.0, fedgen_beta=3.0, fedgen_teacher=teacher))
  ref = Reference(2.0, 3.0, teacher)
  state, step = exp.state, jax.jit(exp.round_fn)
  theta = _flat(state.params)
  for r in range(3):
    theta = ref.round(exp, state, theta)
    state, metrics = step(state, exp.data)
    np.testing.assert_allclose(_flat(state.params), theta, atol=2e-5, rtol=1e-4,
                               err_msg=f'round {r + 1}')
    server = state.server['fedgen']
    chex.assert_trees_all_close(server['gen'], ref.g, atol=2e-5, rtol=1e-4)
    chex.assert_trees_all_close(server['stats'], ref.stats, atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(float(metrics['fedgen_teacher_loss']), ref.teacher_losses[-1],
                               rtol=1e-4)
    assert int(server['round']) == r + 1
  # The local terms were live: FedAvg from the same start differs.
  fedavg = _fedavg_params(tiny_npz, unequal_partition, clients_per_round=2)
  assert np.abs(_flat(fedavg) - theta).max() > 1e-3


def test_coefficients_zero_is_fedavg(tiny_npz, unequal_partition):
  exp = make(tiny_npz, unequal_partition, 'fedgen',
             **_flags(fedgen_alpha=0.0, fedgen_beta=0.0))
  reference = _fedavg_params(tiny_npz, unequal_partition, clients_per_round=2,
                             weighting=fedjax_drift.algorithms.weighting(exp.config))
  state = run_rounds(exp, 3)
  chex.assert_trees_all_equal(state.params, reference)
  assert float(jnp.abs(state.server['fedgen']['gen']['out']['kernel']).max()) > 0  # it trained


def test_label_weights_and_diversity():
  counts = np.array([[3.0, 0.0, 1.0], [1.0, 0.0, 0.0]], np.float32)
  w, held = fedgen.label_weights(jnp.asarray(counts))
  np.testing.assert_allclose(w, [[0.75, 0.25], [0.0, 0.0], [1.0, 0.0]])
  np.testing.assert_array_equal(held, [1.0, 0.0, 1.0])
  noise = jnp.array([[0.0, 0.0], [1.0, 1.0]])
  z = jnp.array([[0.0, 2.0, 4.0], [1.0, 2.0, 1.0]])
  # pairs (0,1) and (1,0): d2 = 1, d1 = 4/3; the diagonal is 0; mean over 4 entries
  np.testing.assert_allclose(fedgen.diversity_loss(noise, z), np.exp(-(2 * 4 / 3) / 4), rtol=1e-6)
  np.testing.assert_allclose(fedgen.decayed(10.0, 0.5, 3), 1.25)
  np.testing.assert_allclose(fedgen.decayed(1e-3, 0.5, 10), 1e-4)  # the code's floor
  assert float(fedgen.decayed(0.0, 0.5, 3)) == 0.0


@pytest.mark.parametrize('name,shape,projection', [
    ('mlp', (8, 8, 1), 0), ('cnn_cifar', (32, 32, 3), 0), ('resnet8', (16, 16, 3), 0),
    ('resnet20_bn', (16, 16, 3), 0), ('cnn_mnist', (28, 28, 1), 16)])
def test_head_of_penultimate_is_apply(name, shape, projection):
  model = models.get(name, 5, shape, projection_dim=projection)
  params = model.init(jax.random.key(0))
  x = jax.random.uniform(jax.random.key(1), (2,) + shape)
  z = model.penultimate(params, x)
  chex.assert_trees_all_close(model.head(params, z), model.apply(params, x), atol=1e-5)
  chex.assert_trees_all_close(model.head(model.head_params(params), z), model.apply(params, x),
                              atol=1e-5)
  assert fedgen.head_shape(model) == (z.shape[-1], 5)


def test_refuses_a_model_without_a_separate_output_layer():
  model = models.get('mlp', 5, (4,))
  odd = model._replace(head_params=lambda p: p)  # every layer's kernel: not one output layer
  with pytest.raises(fedjax_drift.UserError, match='fedgen'):
    fedgen.head_shape(odd)


@pytest.mark.slow
def test_two_seed_sweep_equals_single_runs_and_resumes(tiny_npz, tmp_path):
  """The generator, its statistics and Adam moments live in the server state: vmapped over
  seeds, and checkpointed (round 2 of a run resumed after round 1 uses the round-1 generator)."""
  check_sweep_equals_single_runs_and_resumes(
      tiny_npz, tmp_path, algo='fedgen', model='logreg', fedgen_steps=3, fedgen_hidden=8,
      fedgen_noise_dim=4, fedgen_client_batch=4)


@pytest.mark.slow
def test_grid_over_alpha_equals_single_runs(tiny_npz, tmp_path):
  """--fedgen_alpha and --fedgen_lr are gridable: traced scalars in one compiled program."""
  kw = dict(algo='fedgen', model='logreg', rounds=2, eval_every=2, fedgen_steps=2,
            fedgen_hidden=8, fedgen_noise_dim=4, fedgen_client_batch=4)
  fedjax_drift.run(sweep_config(tiny_npz, tmp_path / 'grid', grid='fedgen_alpha:0.5,5', **kw),
                   **QUIET)
  grid = csv_rows(tmp_path / 'grid' / 'metrics.csv')
  for i, alpha in enumerate((0.5, 5.0)):
    out = tmp_path / f'single-{alpha}'
    fedjax_drift.run(sweep_config(tiny_npz, out, fedgen_alpha=alpha, **kw), **QUIET)
    single = [float(r['test_loss']) for r in csv_rows(out / 'metrics.csv')]
    mine = [float(r['test_loss']) for r in grid if int(r['run']) == i]
    np.testing.assert_allclose(mine, single, rtol=1e-4, atol=1e-5)

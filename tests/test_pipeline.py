"""The training pipeline (data/pipeline.py) and the conventions offered as options:
augmentation, normalisation, gradient clipping, dropout keys, --kd_tau2, --gkd_loss=mse and
--local_optimizer=adam, each against a hand or numpy computation, each off by default."""
import csv
import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import engine
from fedjax_drift.algorithms import distill, fedadc, fedgkd, fedntd, local
from fedjax_drift.algorithms.parts import ClientContext
from fedjax_drift.data import pipeline
from fedjax_drift.errors import UserError
from fedjax_drift.state import Batch
from helpers import cohort_and_batches, one_round, run_rounds, tiny_config

QUIET = dict(log=lambda *_: None)


@pytest.fixture(scope='module')
def images(tmp_path_factory):
  """48 uint8 RGB 6x6 training images (3 classes) and 12 test images, split over 4 clients."""
  root = tmp_path_factory.mktemp('images')
  rng = np.random.default_rng(0)
  y = rng.integers(0, 3, 60)
  x = np.clip(rng.normal(60 + 50 * y[:, None, None, None], 40, (60, 6, 6, 3)), 0,
              255).astype(np.uint8)
  np.savez(root / 'img.npz', x_train=x[:48], y_train=y[:48], x_test=x[48:], y_test=y[48:])
  parts = [list(range(0, 7)), list(range(7, 19)), list(range(19, 30)), list(range(30, 48))]
  (root / 'parts.json').write_text(json.dumps(parts))
  return str(root / 'img.npz'), str(root / 'parts.json')


def _image_config(images, **kw):
  npz, parts = images
  return tiny_config(npz, parts, batch_size=4, local_steps=3, **kw)


def _leaves(tree):
  return [np.asarray(a) for a in jax.tree.leaves(tree)]


# --- augmentation: by hand ---------------------------------------------------------------

def _tiny_image():
  return np.arange(9, dtype=np.float32).reshape(3, 3, 1) + 1  # 1..9, row-major


def test_crop_by_hand():
  x = _tiny_image()
  np.testing.assert_array_equal(pipeline.crop(x, 1, 1, 1), x)  # the centre window: itself
  top_left = np.asarray(pipeline.crop(x, 0, 0, 1))[..., 0]
  np.testing.assert_array_equal(top_left, [[0, 0, 0], [0, 1, 2], [0, 4, 5]])
  bottom_right = np.asarray(pipeline.crop(x, 2, 2, 1))[..., 0]
  np.testing.assert_array_equal(bottom_right, [[5, 6, 0], [8, 9, 0], [0, 0, 0]])


def test_flip_and_rotate_by_hand():
  x = _tiny_image()
  np.testing.assert_array_equal(pipeline.hflip(x, True)[..., 0],
                                [[3, 2, 1], [6, 5, 4], [9, 8, 7]])
  np.testing.assert_array_equal(pipeline.hflip(x, False), x)
  np.testing.assert_array_equal(pipeline.rotate(x, 0.0), x)
  # Counter-clockwise, as torchvision's RandomRotation: the top-right pixel goes top-left.
  np.testing.assert_array_equal(pipeline.rotate(x, 90.0), np.rot90(x))
  np.testing.assert_array_equal(pipeline.rotate(x, -90.0), np.rot90(x, -1))
  np.testing.assert_array_equal(pipeline.rotate(x, 180.0), np.rot90(x, 2))
  # 45 degrees on a 3x3 image: the centre stays, corners map to edge midpoints by nearest
  # pixel; a 4x4 image turned 45 degrees loses its corners to the zero fill.
  r = np.asarray(pipeline.rotate(x, 45.0))[..., 0]
  assert r[1, 1] == 5
  big = np.ones((4, 4, 1), np.float32)
  assert np.asarray(pipeline.rotate(big, 45.0))[0, 0, 0] == 0


def test_augment_draws_stay_in_range_and_depend_on_the_key():
  x = jnp.asarray(np.random.default_rng(0).uniform(size=(5, 6, 6, 3)), jnp.float32)
  key = jax.random.key(3)
  for kind in ('crop_flip', 'flip_rotate'):
    a = pipeline.augment(x, key, kind, pad=2, degrees=30.0)
    np.testing.assert_array_equal(a, pipeline.augment(x, key, kind, pad=2, degrees=30.0))
    assert not np.array_equal(a, pipeline.augment(x, jax.random.key(4), kind, 2, 30.0))
    assert a.shape == x.shape
  # crop_flip only moves pixels: each output is a shifted, maybe mirrored window or zero.
  a = np.asarray(pipeline.augment(x, key, 'crop_flip', pad=2))
  for i in range(5):
    found = False
    for top in range(5):
      for left in range(5):
        window = np.asarray(pipeline.crop(x[i], top, left, 2))
        found |= np.array_equal(a[i], window) or np.array_equal(a[i], window[:, ::-1])
    assert found
  assert pipeline.augment(x, key, 'none') is x


@pytest.mark.slow
def test_batches_are_deterministic_and_differ_across_steps_and_clients(images):
  exp = fedjax_drift.prepare(_image_config(images, augment='crop_flip', augment_pad=2))
  data, pipe = exp.data, exp.pipeline
  count = int(data.client_count[1])

  def batch(cid_key, step, p=pipe):
    fn = engine.make_batch_fn(data, data.client_index[1], count, cid_key, 4, 3, pipeline=p)
    return fn(step)

  k1, k2 = jax.random.key(1), jax.random.key(2)
  np.testing.assert_array_equal(batch(k1, 0).x, batch(k1, 0).x)
  assert not np.array_equal(batch(k1, 0).x, batch(k1, 0, None).x)
  assert not np.array_equal(batch(k1, 1).x, batch(k2, 1).x)  # another client key
  # Full-batch steps see the same examples every step: only the augmentation differs.
  full = engine.make_batch_fn(data, data.client_index[1], count, k1, 0, 1, pipeline=pipe)
  plain = engine.make_batch_fn(data, data.client_index[1], count, k1, 0, 1)
  np.testing.assert_array_equal(plain(0).x, plain(1).x)
  assert not np.array_equal(full(0).x, full(1).x)
  # ... and across clients (keys): the same examples, augmented differently.
  other = engine.make_batch_fn(data, data.client_index[1], count, k2, 0, 1, pipeline=pipe)
  assert not np.array_equal(full(0).x, other(0).x)
  # Labels and masks are not touched; the default pipeline is to_float itself.
  np.testing.assert_array_equal(batch(k1, 1).y, batch(k1, 1, None).y)
  off = pipeline.Pipeline()
  np.testing.assert_array_equal(batch(k1, 1, off).x, batch(k1, 1, None).x)
  assert batch(k1, 1, off).rng is None


def test_step_keys_fold_run_round_client_and_step():
  key = jax.random.key(0)
  seen = {tuple(np.asarray(jax.random.key_data(k)).ravel())
          for s in range(4) for k in pipeline.step_keys(key, s)}
  assert len(seen) == 8  # augmentation and dropout keys, distinct at every step


# --- normalisation -----------------------------------------------------------------------

def test_channel_stats_match_numpy():
  x = np.random.default_rng(1).integers(0, 256, (30, 4, 4, 3)).astype(np.uint8)
  mean, std = pipeline.channel_stats(x, chunk=7)  # chunks that do not divide 30
  flat = x.reshape(-1, 3).astype(np.float64) / 255.0
  np.testing.assert_allclose(mean, flat.mean(0), rtol=1e-12)
  np.testing.assert_allclose(std, flat.std(0), rtol=1e-9)


def test_per_channel_normalisation_reaches_training_and_evaluation(images):
  npz, _ = images
  exp = fedjax_drift.prepare(_image_config(images, normalize='per_channel'))
  x_train = np.load(npz)['x_train'].reshape(-1, 3).astype(np.float64) / 255.0
  np.testing.assert_allclose(exp.pipeline.norm.mean, x_train.mean(0), rtol=1e-6)
  np.testing.assert_allclose(exp.pipeline.norm.std, x_train.std(0), rtol=1e-6)
  # Normalised training inputs have mean 0 and std 1 per channel over the training set.
  z = np.asarray(pipeline.preprocess(exp.data.x, exp.pipeline.norm)).reshape(-1, 3)
  np.testing.assert_allclose(z.mean(0), 0, atol=1e-5)
  np.testing.assert_allclose(z.std(0), 1, atol=1e-5)
  # A training batch (no augmentation) is preprocess of the gathered images.
  fn = engine.make_batch_fn(exp.data, exp.data.client_index[0], exp.data.client_count[0],
                            jax.random.key(0), 4, 2, pipeline=exp.pipeline)
  raw = engine.make_batch_fn(exp.data, exp.data.client_index[0], exp.data.client_count[0],
                             jax.random.key(0), 4, 2)
  np.testing.assert_allclose(fn(0).x, (np.asarray(raw(0).x) - exp.pipeline.norm.mean)
                             / exp.pipeline.norm.std, rtol=1e-6)
  # The evaluator normalises the test inputs the same way.
  evaluate = engine.make_evaluator(exp.model.apply, 5, exp.pipeline.norm)
  x_test, y_test = np.load(npz)['x_test'], np.load(npz)['y_test']
  logits = exp.model.apply(exp.state.params, pipeline.preprocess(x_test, exp.pipeline.norm))
  want = np.mean(np.argmax(np.asarray(logits), -1) == y_test)
  np.testing.assert_allclose(evaluate(exp.state.params, x_test, y_test)[1], want)


def test_fedgkd_vote_validation_inputs_are_normalised(images):
  exp = fedjax_drift.prepare(dataclasses.replace(
      _image_config(images, algo='fedgkd_vote', vote_val_size=6, normalize='per_channel'),
      partition='iid'))
  norm, x_val = exp.pipeline.norm, np.asarray(exp.server_data['x_val'])
  assert x_val.min() < 0  # standardised, not [0, 1]
  pixels = (x_val * np.asarray(norm.std) + np.asarray(norm.mean)) * 255
  np.testing.assert_allclose(pixels, np.round(pixels), atol=1e-3)  # back to uint8 values


def test_explicit_normalisation_and_its_errors(images):
  exp = fedjax_drift.prepare(_image_config(images, normalize_mean='0.5,0.4,0.3',
                                           normalize_std='0.2'))
  np.testing.assert_allclose(exp.pipeline.norm.mean, [0.5, 0.4, 0.3])
  np.testing.assert_allclose(exp.pipeline.norm.std, [0.2, 0.2, 0.2])
  with pytest.raises(UserError, match='--normalize_mean has 2 values'):
    fedjax_drift.prepare(_image_config(images, normalize_mean='0.5,0.4', normalize_std='1'))
  with pytest.raises(UserError, match='--normalize_mean needs --normalize_std'):
    _image_config(images, normalize_mean='0.5').validate()
  with pytest.raises(UserError, match='--normalize_std'):
    _image_config(images, normalize_mean='0.5', normalize_std='0,1,1').validate()


def test_augmentation_needs_images(tiny_npz, unequal_partition):
  with pytest.raises(UserError, match='--augment=crop_flip needs images'):
    fedjax_drift.prepare(tiny_config(tiny_npz, unequal_partition, augment='crop_flip'))


# --- gradient clipping and Adam against numpy --------------------------------------------

def _logreg_grad(params, x, y, mask, num_classes):
  """numpy gradient of the masked-mean cross-entropy of a logistic regression."""
  w, b = (np.asarray(params['dense'][k], np.float64) for k in ('kernel', 'bias'))
  x = np.asarray(x, np.float64).reshape(len(x), -1)
  z = x @ w + b
  p = np.exp(z - z.max(1, keepdims=True))
  p /= p.sum(1, keepdims=True)
  err = (p - np.eye(num_classes)[y]) * (mask / mask.sum())[:, None]
  return {'kernel': x.T @ err, 'bias': err.sum(0)}


def _one_client_config(tiny_npz, unequal_partition, **kw):
  return tiny_config(tiny_npz, unequal_partition, clients_per_round=1, local_steps=3,
                     batch_size=0, algo='fedavg', **kw)


def _replay(exp, update):
  """numpy local training of the round's single client: update(w, g, t) per step."""
  ids, _, batches = cohort_and_batches(exp)
  params = {k: np.asarray(v, np.float64) for k, v in exp.state.params['dense'].items()}
  state = {}
  for t, (x, y, mask) in enumerate(batches[int(ids[0])], start=1):
    g = _logreg_grad({'dense': params}, x, y, mask, 3)
    params = update(params, g, t, state)
  return params


def test_clip_by_global_norm_matches_numpy():
  tree = {'a': jnp.array([3.0, 4.0]), 'b': {'c': jnp.array([[12.0]])}}  # norm 13
  clipped = local.clip_by_global_norm(6.5)(tree)
  np.testing.assert_allclose(clipped['a'], [1.5, 2.0], rtol=1e-6)
  np.testing.assert_allclose(clipped['b']['c'], [[6.0]], rtol=1e-6)
  same = local.clip_by_global_norm(20.0)(tree)
  np.testing.assert_array_equal(same['a'], tree['a'])


def test_clipped_local_sgd_matches_numpy(tiny_npz, unequal_partition):
  lr, c, wd = 0.1, 0.05, 0.01
  exp = fedjax_drift.prepare(_one_client_config(tiny_npz, unequal_partition, lr=lr,
                                                clip_grad_norm=c, weight_decay=wd))

  def sgd(w, g, t, state):
    norm = np.sqrt(sum(np.sum(v * v) for v in g.values()))
    scale = min(1.0, c / norm)
    assert scale < 1  # the clip is active in this test
    # Clip the objective's gradient, then add the L2 term (torch: clip, then step with wd).
    return {k: w[k] - lr * (scale * g[k] + wd * w[k]) for k in w}

  want = _replay(exp, sgd)
  got = one_round(exp)[0].params['dense']
  for k in want:
    np.testing.assert_allclose(got[k], want[k], rtol=2e-5, atol=1e-7)


def test_local_adam_matches_numpy(tiny_npz, unequal_partition):
  lr, b1, b2, eps, wd = 0.05, 0.8, 0.95, 1e-6, 0.01
  exp = fedjax_drift.prepare(_one_client_config(
      tiny_npz, unequal_partition, lr=lr, local_optimizer='adam', adam_b1=b1, adam_b2=b2,
      adam_eps=eps, weight_decay=wd))

  def adam(w, g, t, state):
    out = {}
    for k in w:
      gk = g[k] + wd * w[k]  # L2 before the moments (torch.optim.Adam's weight_decay)
      m = b1 * state.get(('m', k), 0.0) + (1 - b1) * gk
      v = b2 * state.get(('v', k), 0.0) + (1 - b2) * gk * gk
      state[('m', k)], state[('v', k)] = m, v
      out[k] = w[k] - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    return out

  want = _replay(exp, adam)
  state, _ = one_round(exp)
  for k in want:
    np.testing.assert_allclose(state.params['dense'][k], want[k], rtol=2e-5, atol=3e-6)


def test_adam_state_resets_each_round(tiny_npz, unequal_partition):
  cfg = _one_client_config(tiny_npz, unequal_partition, local_optimizer='adam', lr=0.05)
  exp = fedjax_drift.prepare(cfg)
  state1, _ = one_round(exp)
  # A second round from state1 equals the first round of an experiment started at state1.
  state2, _ = one_round(exp, state1)
  ids, _, batches = cohort_and_batches(exp, state1)
  params = {k: np.asarray(v, np.float64) for k, v in state1.params['dense'].items()}
  m = {k: 0.0 for k in params}
  v = {k: 0.0 for k in params}
  for t, (x, y, mask) in enumerate(batches[int(ids[0])], start=1):
    g = _logreg_grad({'dense': params}, x, y, mask, 3)
    for k in params:
      m[k] = 0.9 * m[k] + 0.1 * g[k]
      v[k] = 0.999 * v[k] + 0.001 * g[k] ** 2
      params[k] = params[k] - 0.05 * (m[k] / (1 - 0.9 ** t)) / (
          np.sqrt(v[k] / (1 - 0.999 ** t)) + 1e-8)
  for k in params:
    np.testing.assert_allclose(state2.params['dense'][k], params[k], rtol=2e-5, atol=3e-6)


def test_pipeline_flags_refused_where_they_do_not_apply(tiny_npz, unequal_partition):
  for kw, match in [(dict(local_optimizer='adam', local_momentum=0.9), '--local_momentum'),
                    (dict(local_optimizer='adam', algo='fedadc_dm'), 'fedadc_dm'),
                    (dict(clip_grad_norm=-1.0), '--clip_grad_norm'),
                    (dict(augment_degrees=200.0), '--augment_degrees'),
                    (dict(adam_b2=1.0), '--adam_b2')]:
    with pytest.raises(UserError, match=match):
      tiny_config(tiny_npz, unequal_partition, **kw).validate()


# --- distillation conventions ------------------------------------------------------------

def _np_log_softmax(z):
  z = z - z.max(1, keepdims=True)
  return z - np.log(np.exp(z).sum(1, keepdims=True))


def _fedgkd_code_kd(student, teacher, temperature):
  """The FedGKD authors' `_divergence` (pcode/workers/worker_fedgkd.py) in numpy:
  T*T * F.kl_div(log_softmax(s/T), softmax(t/T), reduction='batchmean')."""
  log_p = _np_log_softmax(student / temperature)
  q = np.exp(_np_log_softmax(teacher / temperature))
  return temperature ** 2 * np.sum(q * (np.log(q) - log_p)) / len(student)


def _logits(seed, shape=(6, 5)):
  rng = np.random.default_rng(seed)
  return rng.normal(size=shape).astype(np.float32) * 2


@pytest.mark.parametrize('temperature', [0.5, 1.0, 2.0])
def test_kd_tau2_equals_the_fedgkd_code(temperature):
  s, t = _logits(0), _logits(1)
  mask = np.ones(6, np.float32)
  code = _fedgkd_code_kd(s.astype(np.float64), t.astype(np.float64), temperature)
  ours = distill.kd_loss(t, s, mask, temperature, tau2=True)
  np.testing.assert_allclose(ours, code, rtol=1e-5)
  plain = distill.kd_loss(t, s, mask, temperature)  # the default: the papers' formula
  np.testing.assert_allclose(plain * temperature ** 2, code, rtol=1e-5)
  if temperature == 0.5:
    np.testing.assert_allclose(plain / ours, 4.0, rtol=1e-5)


def _ctx(global_params, apply, label_hist=None):
  return ClientContext(global_params, {}, {}, 0.1, jnp.int32(1), jnp.int32(6),
                       label_hist if label_hist is not None else jnp.ones(5), 1, apply, None)


def test_kd_tau2_reaches_every_kl_term():
  s, t = jnp.asarray(_logits(2)), jnp.asarray(_logits(3))
  y = jnp.asarray([0, 1, 2, 3, 4, 0])
  batch = Batch(jnp.eye(6), y, jnp.ones(6))
  apply = lambda p, x: x @ p  # the teacher's logits are its params' rows
  temperature = 0.5
  ctx = _ctx(t, apply, jnp.asarray([5.0, 1.0, 0.0, 2.0, 3.0]))
  # FedNTD: the whole term scales by tau^2.
  ntd = [fedntd.not_true_distillation(0.3, temperature, tau2).loss(None, s, batch, ctx)
         for tau2 in (False, True)]
  np.testing.assert_allclose(ntd[1], ntd[0] * temperature ** 2, rtol=1e-5)
  # FedGKD (buffer of one: the teacher is the received model) and its MSE variant.
  part = fedgkd.ensemble_distillation(0.2, 1, temperature, 'kl', True)
  sent = {'fedgkd': {'teacher': t, 'on': jnp.ones(())}}
  gkd_ctx = ctx._replace(payload=sent)
  np.testing.assert_allclose(part.loss(None, s, batch, gkd_ctx),
                             0.1 * _fedgkd_code_kd(np.asarray(s, np.float64),
                                                   np.asarray(t, np.float64), temperature),
                             rtol=1e-5)
  # FedADC+ self-KD: lambda (tau^2 KL - CE) with tau2, lambda (KL - CE) without.
  kd = [fedadc.self_confidence_kd(0.35, temperature, tau2).loss(None, s, batch, ctx)
        for tau2 in (False, True)]
  ce = np.mean(-np.take_along_axis(_np_log_softmax(np.asarray(s, np.float64)),
                                   np.asarray(y)[:, None], 1))
  kl = kd[0] / 0.35 + ce
  np.testing.assert_allclose(kd[1], 0.35 * (temperature ** 2 * kl - ce), rtol=1e-5)


def test_gkd_mse_is_the_code_mse_loss():
  s, t = _logits(4), _logits(5)
  want = np.mean((s.astype(np.float64) - t) ** 2)  # torch F.mse_loss(s, t), 'mean'
  np.testing.assert_allclose(distill.logit_mse(t, s, np.ones(6, np.float32)), want, rtol=1e-6)
  mask = np.array([1, 1, 1, 0, 0, 0], np.float32)  # padding rows do not count
  np.testing.assert_allclose(distill.logit_mse(t, s, mask),
                             np.mean((s[:3].astype(np.float64) - t[:3]) ** 2), rtol=1e-6)
  part = fedgkd.ensemble_distillation(0.2, 1, 0.5, 'mse')  # no temperature, no tau^2
  sent = {'fedgkd': {'teacher': jnp.asarray(t), 'on': jnp.ones(())}}
  ctx = _ctx(None, lambda p, x: x @ p)._replace(payload=sent)
  batch = Batch(jnp.eye(6), jnp.zeros(6, jnp.int32), jnp.ones(6))
  np.testing.assert_allclose(part.loss(None, jnp.asarray(s), batch, ctx), 0.1 * want,
                             rtol=1e-6)
  # The student's gradient is (gamma/2) 2 (s - t) / (B C); the teacher gets none.
  grad = jax.grad(lambda z: part.loss(None, z, batch, ctx))(jnp.asarray(s))
  np.testing.assert_allclose(grad, 0.1 * 2 * (s - t) / s.size, rtol=1e-5, atol=1e-7)


# --- the default path is unchanged ---------------------------------------------------------

# Sum of squares of each parameter leaf after 2 rounds, computed with the code of commit
# 5d479f9 (before the pipeline existed) on this exact problem; every new flag at its default.
BEFORE = {'fedavg': [0.0042081976726935436, 2.901088569131689],
          'fedgkd': [0.0034522202426714036, 2.429938158080693],
          'fedadc_plus': [0.0012195210793205062, 2.813133171319729],
          'fedntd': [0.0041273916685358875, 2.538901618575009]}


def _before_config(npz, partition, algo, **kw):
  return tiny_config(npz, partition, algo=algo, batch_size=4, kd_temperature=0.5,
                     ntd_temperature=0.5, local_momentum=0.5 if algo == 'fedavg' else 0.0,
                     weight_decay=0.01, **kw)


@pytest.mark.parametrize('algo', [a if a == 'fedavg' else pytest.param(a, marks=pytest.mark.slow)
                                  for a in sorted(BEFORE)])
def test_defaults_reproduce_the_code_before_the_pipeline(tiny_npz, unequal_partition, algo):
  default = run_rounds(fedjax_drift.prepare(_before_config(tiny_npz, unequal_partition,
                                                           algo)), 2)
  sums = [float(np.sum(np.asarray(a, np.float64) ** 2)) for a in jax.tree.leaves(default.params)]
  np.testing.assert_allclose(sums, BEFORE[algo], rtol=1e-6)
  off = run_rounds(fedjax_drift.prepare(_before_config(
      tiny_npz, unequal_partition, algo, augment='none', normalize='none', clip_grad_norm=0.0,
      kd_tau2=False, gkd_loss='kl', local_optimizer='sgd')), 2)
  for a, b in zip(_leaves(default.params), _leaves(off.params)):
    np.testing.assert_array_equal(a, b)


# --- dropout keys ------------------------------------------------------------------------

@pytest.fixture(scope='module')
def grey_images(tmp_path_factory):
  root = tmp_path_factory.mktemp('grey')
  rng = np.random.default_rng(2)
  x = rng.integers(0, 256, (40, 8, 8, 1)).astype(np.uint8)
  y = rng.integers(0, 3, 40)
  np.savez(root / 'grey.npz', x_train=x[:32], y_train=y[:32], x_test=x[32:], y_test=y[32:])
  (root / 'parts.json').write_text(json.dumps([list(range(i, 32, 4)) for i in range(4)]))
  return str(root / 'grey.npz'), str(root / 'parts.json')


@pytest.mark.slow
def test_dropout_gets_a_key_per_step(grey_images):
  npz, parts = grey_images
  cfg = tiny_config(npz, parts, model='cnn_emnist', batch_size=4, local_steps=2,
                    clients_per_round=2)
  exp = fedjax_drift.prepare(cfg)
  assert exp.pipeline.dropout
  fn = engine.make_batch_fn(exp.data, exp.data.client_index[0], exp.data.client_count[0],
                            jax.random.key(0), 4, 2, pipeline=exp.pipeline)
  assert fn(0).rng is not None
  np.testing.assert_array_equal(jax.random.key_data(fn(0).rng),
                                jax.random.key_data(pipeline.step_keys(jax.random.key(0),
                                                                       0)[1]))
  a, b = one_round(exp)[0], one_round(exp)[0]
  for u, v in zip(_leaves(a.params), _leaves(b.params)):
    np.testing.assert_array_equal(u, v)  # reproducible
  off = one_round(fedjax_drift.prepare(dataclasses.replace(cfg, dropout=0.0)))[0]
  assert any(not np.array_equal(u, v) for u, v in zip(_leaves(a.params), _leaves(off.params)))


# --- one set-up, every way to run: equal with augmentation on ------------------------------

@pytest.mark.slow
def test_sequential_and_vmapped_clients_equal_with_augmentation(images):
  kw = dict(augment='crop_flip', augment_pad=2, normalize='per_channel', clip_grad_norm=1.0)
  seq = run_rounds(fedjax_drift.prepare(_image_config(
      images, client_parallelism='sequential', **kw)), 2)
  vec = run_rounds(fedjax_drift.prepare(_image_config(images, client_parallelism='vmap',
                                                      **kw)), 2)
  for a, b in zip(_leaves(seq.params), _leaves(vec.params)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  rot = run_rounds(fedjax_drift.prepare(_image_config(images, augment='flip_rotate',
                                                      client_parallelism='vmap')), 1)
  rot_seq = run_rounds(fedjax_drift.prepare(_image_config(
      images, augment='flip_rotate', client_parallelism='sequential')), 1)
  for a, b in zip(_leaves(rot.params), _leaves(rot_seq.params)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _rows(path, drop=('elapsed_s',), **match):
  with open(path) as f:
    return [{k: v for k, v in r.items() if k not in drop} for r in csv.DictReader(f)
            if all(r[k] == str(v) for k, v in match.items())]


def _run_config(images, out, **kw):
  npz, _ = images
  base = dict(dataset=f'npz:{npz}', partition='dirichlet', dirichlet_alpha=1.0, model='logreg',
              num_clients=4, clients_per_round=2, rounds=4, eval_every=2, local_steps=2,
              local_epochs=0, batch_size=4, lr=0.1, progress=False, out=str(out),
              augment='crop_flip', augment_pad=2, normalize='per_channel')
  base.update(kw)
  return fedjax_drift.Config(**base)


@pytest.mark.slow
def test_two_seed_sweep_equals_single_runs_with_augmentation(images, tmp_path):
  fedjax_drift.run(_run_config(images, tmp_path / 'sweep', seeds=2), **QUIET)
  saved = json.loads((tmp_path / 'sweep' / 'config.json').read_text())['_resolved']
  assert len(saved['normalization']['mean']) == 3  # the statistics used, for the record
  for run, seed in ((0, 0), (1, 1)):
    fedjax_drift.run(_run_config(images, tmp_path / f's{seed}', seed=seed), **QUIET)
    single = [float(r['test_loss']) for r in _rows(tmp_path / f's{seed}' / 'metrics.csv')]
    swept = [float(r['test_loss']) for r in _rows(tmp_path / 'sweep' / 'metrics.csv', run=run)]
    np.testing.assert_allclose(swept, single, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_resume_with_augmentation_is_bit_identical(images, tmp_path):
  kw = dict(augment='flip_rotate', checkpoint_every=2)
  fedjax_drift.run(_run_config(images, tmp_path / 'a', rounds=6, **kw), **QUIET)
  fedjax_drift.run(_run_config(images, tmp_path / 'b', rounds=4, **kw), **QUIET)
  fedjax_drift.resume(str(tmp_path / 'b'), rounds=6, **QUIET)
  assert _rows(tmp_path / 'a' / 'rounds.csv') == _rows(tmp_path / 'b' / 'rounds.csv')
  assert _rows(tmp_path / 'a' / 'metrics.csv') == _rows(tmp_path / 'b' / 'metrics.csv')


@pytest.mark.parametrize('normalize', ['none', 'per_channel'])
def test_run_header_names_the_pipeline(images, tmp_path, normalize):
  """The run's header line names what the inputs go through; augmentation alone (no
  statistics to show) crashed the header before (found by running --augment=crop_flip)."""
  lines = []
  fedjax_drift.run(_run_config(images, tmp_path / 'run', rounds=1, eval_every=1,
                               normalize=normalize), log=lines.append)
  header = [line for line in lines if line.startswith('inputs: ')]
  assert len(header) == 1 and '--augment=crop_flip' in header[0]
  assert ('normalised with mean' in header[0]) == (normalize == 'per_channel')

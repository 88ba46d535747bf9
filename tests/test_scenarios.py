"""Data scenarios: concept shift's label remapping, stateless long-tailed clients."""
import csv

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import engine
from fedjax_drift.data import federated, scenarios
from helpers import tiny_config


def test_concept_shift_moves_one_class_to_another_label():
  """The rate and statistics over long runs are in test_concept_shift.py."""
  scen = scenarios.concept_shift(10, prob=1.0)
  label_map = scen.init(None)
  np.testing.assert_array_equal(label_map, np.arange(10))
  moved = np.asarray(scen.before_round(label_map, jax.random.key(0), 0))
  assert np.sum(moved != np.arange(10)) == 1 and np.all((0 <= moved) & (moved < 10))
  still = scenarios.concept_shift(10, prob=0.0).before_round(moved, jax.random.key(1), 1)
  np.testing.assert_array_equal(still, moved)  # permanent: nothing moves back by itself


def test_concept_shift_train_and_test_labels_follow_the_map(tiny_npz, unequal_partition,
                                                            tmp_path):
  config = tiny_config(tiny_npz, unequal_partition, scenario='concept_shift',
                       concept_shift_prob=1.0, rounds=3, out=str(tmp_path / 'r'),
                       save_params=str(tmp_path / 'p.npz'))
  exp = fedjax_drift.prepare(config)
  state = exp.state
  step = jax.jit(exp.round_fn)
  for _ in range(3):
    state = step(state, exp.data)[0]
  label_map = np.asarray(state.scenario).reshape(-1, 3)[0]  # run 0 of the run axis
  assert np.any(label_map != np.arange(3))
  # Training batches see y -> label_map[y].
  row = exp.data.client_index[0]
  fn = engine.make_batch_fn(exp.data, row, exp.data.client_count[0], jax.random.key(0), 0, 1,
                            lambda y: jnp.asarray(label_map)[y])
  np.testing.assert_array_equal(np.asarray(fn(0).y)[:5],
                                label_map[np.asarray(exp.dataset.y_train)[np.asarray(row)[:5]]])
  # The evaluation uses the same map: recompute the final test accuracy by hand.
  fedjax_drift.run(config, log=lambda *_: None)
  saved = np.load(tmp_path / 'p.npz')
  logits = exp.dataset.x_test @ saved['dense/kernel'][0] + saved['dense/bias'][0]  # run 0
  expected = np.mean(np.argmax(logits, 1) == label_map[exp.dataset.y_test])
  rows = list(csv.DictReader(open(tmp_path / 'r' / 'metrics.csv')))
  assert abs(float(rows[-1]['test_accuracy']) - expected) < 1e-6


def test_longtail_stateless_clients_are_fresh_and_long_tailed():
  y = np.repeat(np.arange(10), 600)
  scen = scenarios.longtail_stateless(y, 10, fraction=0.1, ratio=0.01)
  data = federated.FederatedData(jnp.zeros((6000, 1)), jnp.asarray(y), None, None, None)
  rows, counts = jax.jit(scen.fresh_cohort, static_argnums=2)(data, jax.random.key(0), 64)
  rows, counts = np.asarray(rows), np.asarray(counts)
  assert rows.shape == (64, scen.max_examples) and np.all(counts < scen.max_examples)
  expected = 0.1 * 600 * np.sum(0.01 ** (np.arange(10) / 9))  # about 2.5% of the data
  assert abs(counts.mean() - expected) < 0.1 * expected
  heads = set()
  for r, c in zip(rows, counts):
    assert len(set(r[:c].tolist())) == c  # no example twice
    hist = np.bincount(y[r[:c]], minlength=10)
    heads.add(int(np.argmax(hist)))
    assert hist.max() >= 20 * max(hist.min(), 1) or hist.min() == 0
  assert len(heads) >= 5  # the class order is random per client
  rows2, _ = scen.fresh_cohort(data, jax.random.key(1), 64)
  assert not np.array_equal(rows, np.asarray(rows2))  # new clients every round


def test_longtail_stateless_refuses_stateful_algorithms(tiny_npz, unequal_partition):
  with pytest.raises(fedjax_drift.UserError, match='per-client state'):
    fedjax_drift.prepare(tiny_config(tiny_npz, unequal_partition, algo='scaffold',
                                     scenario='longtail_stateless'))
  exp = fedjax_drift.prepare(tiny_config(tiny_npz, unequal_partition, algo='fedfor',
                                         scenario='longtail_stateless', local_epochs=1,
                                         local_steps=0, batch_size=4))
  state, metrics = jax.jit(exp.round_fn)(exp.state, exp.data)
  assert np.isfinite(float(metrics['train_loss']))


def write_digits(tmp_path):
  """Tiny MNIST (IDX) and USPS (npz) copies under tmp_path/mnist and tmp_path/usps."""
  from test_sources import _write_idx
  from fedjax_drift.data.sources import IDX_FILES
  rng = np.random.default_rng(0)
  (tmp_path / 'mnist').mkdir()
  (tmp_path / 'usps').mkdir()
  mnist = [rng.integers(0, 256, (50, 28, 28)), rng.integers(0, 10, 50),
           rng.integers(0, 256, (25, 28, 28)), rng.integers(0, 10, 25)]
  for name, a in zip(IDX_FILES, mnist):
    _write_idx(tmp_path / 'mnist' / name, a)
  np.savez(tmp_path / 'usps' / 'usps.npz', x_train=rng.random((12, 16, 16), np.float32),
           y_train=rng.integers(0, 10, 12), x_test=rng.random((6, 16, 16), np.float32),
           y_test=rng.integers(0, 10, 6))
  return mnist


def test_digits_domains_covariate_shift(tmp_path):
  from fedjax_drift.data import domains
  mnist = write_digits(tmp_path)
  ds = domains.load_digits_domains(str(tmp_path))
  d_train = ds.domains_train
  assert ds.x_train.shape == (62, 28, 28, 1) and ds.x_train.dtype == np.uint8
  assert set(d_train.tolist()) == set(range(6)) and np.sum(d_train == 1) == 12
  # The inverted domain holds 255 - x of MNIST images no other domain holds.
  inv = ds.x_train[d_train == 3][..., 0].astype(int)
  originals = {im.tobytes() for im in mnist[0].astype(np.uint8)}
  assert all((255 - im).astype(np.uint8).tobytes() in originals for im in inv)
  assert not any(im.astype(np.uint8).tobytes() in originals for im in inv)
  parts, _, _ = domains.domain_partition(d_train, ds.domains_test, 12, np.random.default_rng(0))
  assert all(len(set(d_train[p].tolist())) == 1 for p in parts)
  with pytest.raises(fedjax_drift.UserError, match='fewer than the 6 domains'):
    domains.domain_partition(d_train, ds.domains_test, 5, np.random.default_rng(0))
  exp = fedjax_drift.prepare(fedjax_drift.Config(
      dataset='digits_domains', data_dir=str(tmp_path), partition='domains', num_clients=6,
      clients_per_round=3, model='mlp', rounds=1, progress=False))
  state, _ = jax.jit(exp.round_fn)(exp.state, exp.data)
  assert int(state.round) == 1

"""Compressed uploads with error feedback (algorithms/compression.py) against numpy.

Setting of tests/test_algorithms.py (four clients of 5, 9, 14, 20 examples, H_i = 2..5), a
cohort of 3 of the 4: the numpy reference keeps every client's residual e_i across rounds,
sends C(delta_i + e_i) and averages what was sent with the n_i/n weights.
"""
import csv
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_drift
from fedjax_drift.algorithms import compression
from helpers import (check_sweep_equals_single_runs_and_resumes, cohort_and_batches,
                     run_rounds, tiny_config)
from reference import LogReg, flat
from test_algorithms import ce_grad, local_sgd, make, weights


def np_topk(v, fraction, sizes):
  """Top-k per parameter array of the flat vector v (arrays of `sizes`, in flat order)."""
  out, start = np.zeros_like(v), 0
  for size in sizes:
    a = v[start:start + size]
    k = max(1, int(np.ceil(fraction * size)))
    keep = np.argsort(-np.abs(a), kind='stable')[:k]
    out[start + keep] = a[keep]
    start += size
  return out


def _sizes(exp):
  # reference.flat orders the parameters kernel then bias
  p = exp.state.params['dense']
  return [p['kernel'].size, p['bias'].size]


@pytest.mark.parametrize('feedback', [True, False])
def test_topk_against_numpy(tiny_npz, unequal_partition, feedback):
  exp = make(tiny_npz, unequal_partition, 'fedavg', local_terms='topk', topk_fraction=0.3,
             error_feedback=feedback, clients_per_round=3)
  sizes, model = _sizes(exp), LogReg(6, 3)
  residual = {i: np.zeros(sum(sizes)) for i in range(4)}
  state, step = exp.state, jax.jit(exp.round_fn)
  theta = flat(state.params)
  for r in range(4):
    ids, counts, batches = cohort_and_batches(exp, state)
    ids = [int(i) for i in ids]
    sent = []
    for i in ids:
      v = theta - local_sgd(model, theta, batches[i], ce_grad(model))
      v = v + residual[i] if feedback else v
      c = np_topk(v, 0.3, sizes)
      if feedback:
        residual[i] = v - c
      sent.append(c)
    theta = theta - sum(p * c for p, c in zip(weights(ids, counts), sent))
    state, metrics = step(state, exp.data)
    np.testing.assert_allclose(flat(state.params), theta, atol=2e-5, rtol=1e-4,
                               err_msg=f'round {r + 1}')
    if feedback:  # the per-client table holds the residuals
      got = np.asarray(jnp.concatenate([state.clients['topk']['dense']['kernel'].reshape(4, -1),
                                        state.clients['topk']['dense']['bias']], axis=1))
      np.testing.assert_allclose(got, np.stack([residual[i] for i in range(4)]), atol=2e-5)
    # 18 kernel entries keep 6, 3 bias entries keep 1: (6 + 1) (value, index) pairs of 8 bytes
    assert float(metrics['upload_bytes']) == 3 * 8 * 7


def test_qsgd_against_numpy_draws():
  """Q_s with the same uniform draws, computed by hand; unbiased over many keys."""
  rng = np.random.default_rng(0)
  v = {'a': jnp.asarray(rng.normal(size=(4, 3)), jnp.float32),
       'b': jnp.asarray(rng.normal(size=5), jnp.float32)}
  key, s = jax.random.PRNGKey(3), 4
  got = compression.qsgd_compress(v, s, key)
  for i, name in enumerate(('a', 'b')):
    a = np.asarray(v[name], np.float64)
    u = np.asarray(jax.random.uniform(jax.random.fold_in(key, i), a.shape, jnp.float32))
    norm = np.sqrt((a ** 2).sum())
    scaled = np.abs(a) * s / norm
    low = np.floor(scaled)
    xi = low + (u < scaled - low)
    np.testing.assert_allclose(np.asarray(got[name]), norm * np.sign(a) * xi / s, rtol=1e-5)
    levels = np.abs(np.asarray(got[name])) * s / norm
    np.testing.assert_allclose(levels, np.round(levels), atol=1e-4)  # on the grid
  many = jax.vmap(lambda k: compression.qsgd_compress(v, s, k))(
      jax.random.split(jax.random.PRNGKey(1), 20000))
  for name in v:
    np.testing.assert_allclose(np.asarray(many[name]).mean(axis=0), np.asarray(v[name]),
                               atol=0.03)


def test_qsgd_run_keeps_residual(tiny_npz, unequal_partition):
  """Error feedback: what was sent plus the new residual is the delta plus the old residual."""
  exp = make(tiny_npz, unequal_partition, 'fedavg', local_terms='qsgd', qsgd_levels=2,
             clients_per_round=3)
  state = run_rounds(exp, 2)
  residual = state.clients['qsgd']
  assert float(jnp.abs(residual['dense']['kernel']).sum()) > 0
  # bytes: per array a float32 norm plus 1 sign + 2 level bits per entry, 3 clients
  _, metrics = jax.jit(exp.round_fn)(state, exp.data)
  assert float(metrics['upload_bytes']) == 3 * ((4 + np.ceil(18 * 3 / 8)) + (4 + np.ceil(9 / 8)))


def test_topk_fraction_one_is_fedavg_bit_for_bit(tiny_npz, unequal_partition):
  got = run_rounds(make(tiny_npz, unequal_partition, 'fedavg', local_terms='topk',
                        topk_fraction=1.0, clients_per_round=3), 3).params
  want = run_rounds(make(tiny_npz, unequal_partition, 'fedavg', clients_per_round=3), 3).params
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_topk_on_other_algorithms(tiny_npz, unequal_partition):
  """A compression part composes with a stateful method: SCAFFOLD's c_i and the residual
  live side by side in the per-client table."""
  exp = make(tiny_npz, unequal_partition, 'scaffold', local_terms='topk', clients_per_round=2)
  state = run_rounds(exp, 2)
  assert set(state.clients) == {'scaffold', 'topk'}
  assert np.all(np.isfinite(flat(state.params)))


@pytest.mark.parametrize('term', ['topk', 'qsgd'])
@pytest.mark.slow
def test_sweep_equals_single_runs_and_resumes(tiny_npz, tmp_path, term):
  """The residuals are per-client state: vmapped over seeds and checkpointed."""
  check_sweep_equals_single_runs_and_resumes(tiny_npz, tmp_path, local_terms=term,
                                             model='logreg', topk_fraction=0.2, qsgd_levels=2)


@pytest.mark.parametrize('algo,term', [('fedavg', 'topk'), ('fedavg', 'qsgd'),
                                       ('scaffold', 'topk'), ('fedavg', '')])
def test_summary_counts_the_bytes_rounds_csv_counts(tiny_npz, unequal_partition, tmp_path,
                                                     algo, term):
  """summary.json's communication figures come from the compressor's own count: up bytes per
  client times K is rounds.csv's upload_bytes (plus 4 bytes per float of what else a client
  sends, SCAFFOLD's control variate), and the float figure is that many float32 words, never
  the dense delta's; uncompressed, 4 bytes per float of the messages."""
  config = tiny_config(tiny_npz, unequal_partition, algo=algo, local_terms=term,
                       topk_fraction=0.3, qsgd_levels=3, clients_per_round=3, rounds=2,
                       out=str(tmp_path / 'run'))
  fedjax_drift.run(config, log=lambda *_: None)
  summary = json.loads((tmp_path / 'run' / 'summary.json').read_text())
  sent, floats = summary['communication_bytes_per_client'], summary[
      'communication_floats_per_client']
  dense = (6 * 3 + 3)  # logreg: kernel 6 x 3, bias 3
  others = dense if algo == 'scaffold' else 0  # SCAFFOLD's c_i delta, uncompressed
  assert sent['down'] == 4 * floats['down'] and floats['up'] == sent['up'] / 4
  assert summary['communication_bytes_per_round'] == {k: 3 * v for k, v in sent.items()}
  if not term:
    assert floats['up'] == dense and sent['up'] == 4 * dense
    return
  with open(tmp_path / 'run' / 'rounds.csv') as f:
    uploads = {float(r['upload_bytes']) for r in csv.DictReader(f)}
  assert uploads == {3 * (sent['up'] - 4 * others)}
  assert sent['up'] - 4 * others < 4 * dense and floats['up'] < dense + others

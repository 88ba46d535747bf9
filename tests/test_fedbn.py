"""FedBN: BatchNorm layers stay local; BatchNorm statistics are trained in local steps."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_drift
from fedjax_drift.algorithms import fedbn
from fedjax_drift.algorithms.parts import ClientContext
from helpers import tiny_config


def _run(tiny_npz, unequal_partition, rounds=3, **kw):
  base = dict(model='mlp_bn', local_steps=0, local_epochs=1, batch_size=4, clients_per_round=2)
  base.update(kw)
  exp = fedjax_drift.prepare(tiny_config(tiny_npz, unequal_partition, **base))
  state, step = exp.state, jax.jit(exp.round_fn)
  for _ in range(rounds):
    state = step(state, exp.data)[0]
  return exp, state


def test_batch_statistics_are_trained(tiny_npz, unequal_partition):
  exp, state = _run(tiny_npz, unequal_partition, rounds=1, algo='fedavg')
  before = exp.state.params['batch_stats']['bn0']['mean']
  after = state.params['batch_stats']['bn0']['mean']
  assert np.abs(np.asarray(after) - np.asarray(before)).max() > 1e-3


def test_norm_layers_stay_local(tiny_npz, unequal_partition):
  exp, state = _run(tiny_npz, unequal_partition, algo='fedbn')
  rows, initial = state.clients['fedbn']['norms'], fedbn.norm_leaves(exp.state.params)
  trained = [c for c in range(4) if not all(np.array_equal(r[c], i)
                                            for r, i in zip(rows, initial))]
  assert trained  # a client's rows change only when it trains (test_evaluation.py: the others)
  # Local training starts from the client's own norm layers.
  cid = trained[0]
  own = jax.tree.map(lambda a: a[cid], state.clients['fedbn'])
  ctx = ClientContext(state.params, {}, {'fedbn': own}, 0.1, 1, 1, jnp.ones(3), 2, None, None)
  start = fedbn.local_norms().start(ctx)
  for got, mine in zip(fedbn.norm_leaves(start), own['norms']):
    np.testing.assert_array_equal(got, mine)
  np.testing.assert_array_equal(start['params']['dense0']['kernel'],
                                state.params['params']['dense0']['kernel'])
  # Dropping the mechanism changes the result.
  _, plain = _run(tiny_npz, unequal_partition, algo='fedavg', weighting='examples')
  diff = jax.tree.map(lambda a, b: np.abs(np.asarray(a) - np.asarray(b)).max(), state.params,
                      plain.params)
  assert max(jax.tree.leaves(diff)) > 1e-4


def test_fedbn_without_norm_layers_is_refused(tiny_npz, unequal_partition):
  # It would silently be FedAvg; a model without norm layers is a mistake worth naming.
  with pytest.raises(fedjax_drift.UserError, match='--model=mlp has none'):
    _run(tiny_npz, unequal_partition, algo='fedbn', model='mlp')


def test_fedbn_vmap_equals_sequential(tiny_npz, unequal_partition):
  _, a = _run(tiny_npz, unequal_partition, algo='fedbn', client_parallelism='vmap')
  _, b = _run(tiny_npz, unequal_partition, algo='fedbn', client_parallelism='sequential')
  chex.assert_trees_all_close(a.params, b.params, atol=1e-5, rtol=1e-5)
  chex.assert_trees_all_close(a.clients, b.clients, atol=1e-5, rtol=1e-5)

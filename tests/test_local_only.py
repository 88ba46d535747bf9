"""--algo=local_only against a numpy reference, and evaluation on the clients' own test
splits (--test_partition=like_train: client_* columns; --eval_protocol=local) against numpy."""
import jax
import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import evaluation, sampling, study
from fedjax_drift.errors import UserError
from helpers import run_rounds, tiny_config
from reference import logreg_grad, to_numpy_params

ROUNDS, STEPS, LR = 3, 2, 0.1


def _data(npz):
  with np.load(npz) as f:
    return {k: f[k] for k in f.files}


def _cohorts(exp, rounds):
  """The engine's cohort ids of rounds 0..rounds-1, replayed from the run key."""
  return [np.asarray(sampling.sample_cohort(
      jax.random.fold_in(jax.random.fold_in(exp.state.key, t), 0), len(exp.train_parts),
      exp.config.clients_per_round)) for t in range(rounds)]


def _row(tree, i):
  return jax.tree.map(lambda a: a[i], tree)


def test_each_client_trains_alone_as_numpy_does(tiny_npz, unequal_partition):
  """After R rounds, client i's model is full-batch gradient descent on its own data alone
  for H steps in every round that sampled it (K=2 of N=4 clients, unequal sizes), from the
  shared initial model; the global model never moves."""
  config = tiny_config(tiny_npz, unequal_partition, algo='local_only', clients_per_round=2,
                       local_steps=STEPS, lr=LR, test_partition='like_train')
  exp = study.prepare(config)
  state = run_rounds(exp, ROUNDS)
  data = _data(tiny_npz)
  sampled = np.concatenate(_cohorts(exp, ROUNDS))
  assert min(np.sum(sampled == i) for i in range(4)) < ROUNDS  # some client sat rounds out
  W0, b0 = to_numpy_params(exp.state.params)
  for i, part in enumerate(exp.train_parts):
    W, b = W0.copy(), b0.copy()
    for _ in range(int(np.sum(sampled == i)) * STEPS):
      gW, gb = logreg_grad(W, b, data['x_train'][part], data['y_train'][part])
      W, b = W - LR * gW, b - LR * gb
    got = to_numpy_params(_row(state.clients['local_only']['params'], i))
    np.testing.assert_allclose(got[0], W, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got[1], b, rtol=1e-4, atol=1e-6)
  for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(exp.state.params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert exp.algo.communication(exp.state.params) == {'down': 0, 'up': 0}


def _accuracy(params, x, y):
  W, b = to_numpy_params(params)
  return float(np.mean(np.argmax(x.reshape(len(x), -1) @ W + b, -1) == y))


def _evaluate(config, rounds):
  """(the study, its state after `rounds` compiled rounds, the evaluation of that state)."""
  s = study.build(config)
  state, step = s.state, jax.jit(s.step)
  for _ in range(rounds):
    state = step(state, s.data, s.inputs)[0]
  ev = evaluation.make(s, study.eval_protocol(s.config))
  return s, state, jax.device_get(ev.evaluate(state, ev.inputs))


def _client_stats(accs):
  accs = np.asarray(accs)
  return accs.mean(), accs.std(), accs.min()


def test_local_protocol_reports_own_splits_and_the_whole_test_set(tiny_npz, unequal_partition):
  config = tiny_config(tiny_npz, unequal_partition, algo='local_only', clients_per_round=4,
                       local_steps=STEPS, lr=LR, test_partition='like_train',
                       eval_batch_size=4)  # splits of up to 12 examples: several batches
  s, state, result = _evaluate(config, 2)
  data = _data(tiny_npz)
  exp = s.experiments[0]
  models = [_row(_row(state.clients['local_only']['params'], 0), i)
            for i in range(len(exp.train_parts))]
  own = [_accuracy(m, data['x_test'][p], data['y_test'][p])
         for m, p in zip(models, exp.test_parts) if len(p)]
  whole = [_accuracy(m, data['x_test'], data['y_test']) for m in models]
  mean, std, worst = _client_stats(own)
  assert study.eval_protocol(config) == 'local'
  np.testing.assert_allclose(result['accuracy'][0], mean, rtol=1e-6)
  np.testing.assert_allclose(result['client_mean_accuracy'][0], mean, rtol=1e-6)
  np.testing.assert_allclose(result['client_std_accuracy'][0], std, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(result['client_worst_accuracy'][0], worst, rtol=1e-6)
  np.testing.assert_allclose(result['global_test_mean_accuracy'][0], np.mean(whole),
                             rtol=1e-6)


def test_global_model_on_every_clients_split(tiny_npz, unequal_partition):
  """--test_partition=like_train with FedAvg: the pooled accuracy as before, and the global
  model's accuracy on each client's split summarised as mean, std and worst client."""
  config = tiny_config(tiny_npz, unequal_partition, clients_per_round=3, local_steps=STEPS,
                       lr=LR, test_partition='like_train')
  s, state, result = _evaluate(config, 2)
  data = _data(tiny_npz)
  params = _row(state.params, 0)
  exp = s.experiments[0]
  own = [_accuracy(params, data['x_test'][p], data['y_test'][p]) for p in exp.test_parts
         if len(p)]
  mean, std, worst = _client_stats(own)
  np.testing.assert_allclose(result['accuracy'][0],
                             _accuracy(params, data['x_test'], data['y_test']), rtol=1e-6)
  np.testing.assert_allclose(result['client_mean_accuracy'][0], mean, rtol=1e-6)
  np.testing.assert_allclose(result['client_std_accuracy'][0], std, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(result['client_worst_accuracy'][0], worst, rtol=1e-6)
  assert 'global_test_mean_accuracy' not in result


@pytest.mark.slow
def test_a_sweep_writes_the_client_columns_and_resumes_exactly(tiny_npz, unequal_partition,
                                                               tmp_path):
  """Two seeds in one program: every evaluation row has the client columns, and a run
  resumed from its round-1 checkpoint (the clients' models are in it) writes the same rows
  as an uninterrupted one."""
  def run(out, rounds):
    return fedjax_drift.run(tiny_config(
        tiny_npz, unequal_partition, algo='local_only', clients_per_round=2, rounds=rounds,
        test_partition='like_train', out=str(out), seeds=2), log=lambda *a: None)

  summary = run(tmp_path / 'whole', 2)
  assert summary['communication_floats_per_client'] == {'down': 0, 'up': 0}
  run(tmp_path / 'split', 1)
  fedjax_drift.simulation.resume(str(tmp_path / 'split'), log=lambda *a: None, rounds=2)
  rows = {}
  for name in ('whole', 'split'):
    with open(tmp_path / name / 'metrics.csv') as f:
      header, *lines = f.read().splitlines()
    keep = [i for i, k in enumerate(header.split(',')) if k != 'elapsed_s']
    rows[name] = [[line.split(',')[i] for i in keep] for line in lines]
    # every client column but the global model's on the clients' splits: local_only has none
    assert set(evaluation.CLIENT_COLUMNS) - set(header.split(',')) == \
        {'global_client_mean_accuracy'}
  assert len(rows['whole']) == 2 * 3  # two seeds x rounds 0, 1, 2
  assert rows['whole'] == rows['split']


@pytest.mark.parametrize('flags,message', [
    (dict(algo='local_only'), '--test_partition=like_train'),
    (dict(algo='local_only', test_partition='like_train', personalize='calibrate'),
     '--personalize=calibrate'),
    (dict(algo='local_only', test_partition='like_train', save_params='p.npz'),
     '--save_params'),
])
def test_config_refusals(flags, message):
  with pytest.raises(UserError, match=message):
    fedjax_drift.Config(**flags).validate()


@pytest.mark.parametrize('flags,message', [
    (dict(algo='local_only', local_terms='prox'), '--local_terms does not combine'),
    (dict(algo='local_only', server_momentum=0.9), '--server_momentum does not combine'),
    (dict(algo='local_only', eval_protocol='global'), '--eval_protocol=global'),
    (dict(algo='fedavg', eval_protocol='local'), '--eval_protocol=local'),
])
def test_combinations_that_mean_nothing_are_refused(flags, message):
  config = fedjax_drift.Config(test_partition='like_train', **flags)
  with pytest.raises(UserError, match=message):
    fedjax_drift.algorithms.recipe(config)
    study.eval_protocol(config)

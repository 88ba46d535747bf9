"""evaluation.py's protocols (--eval_protocol), here FedBN's: each client's own model (global
weights + its BatchNorm rows) on its own domain's test split, per-domain accuracies and their
mean; checked by hand, in a sweep and across a resume. The clients' own test splits under
--eval_protocol=local: test_local_only.py."""
import csv

import jax
import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import evaluation, models, simulation
from fedjax_drift import study as study_lib
from fedjax_drift.algorithms import fedbn
from fedjax_drift.checkpoint import Checkpointer
from test_domains import write_domain_npz

QUIET = dict(log=lambda *_: None)


def _config(npz, out='', **kw):
  base = dict(dataset=f'npz:{npz}', partition='domains', num_clients=4, clients_per_round=2,
              model='mlp_bn', algo='fedbn', rounds=1, eval_every=1, local_steps=2,
              local_epochs=0, batch_size=4, lr=0.1, progress=False, out=str(out))
  base.update(kw)
  return fedjax_drift.Config(**base)


def _rows(path):
  with open(path) as f:
    return list(csv.DictReader(f))


@pytest.mark.parametrize('kw,expected', [
    (dict(algo='fedbn'), 'fedbn'),
    (dict(algo='fedbn', local_terms='prox'), 'fedbn'),           # FedFOR's FedBN backbone
    (dict(algo='fedfor', local_terms='fedbn'), 'fedbn'),
    (dict(algo='fedavg'), 'global'),                             # BatchNorm is averaged
    (dict(algo='fedbn', partition='dirichlet'), 'global'),       # no client test splits
    (dict(algo='fedbn', partition='dirichlet', test_partition='like_train'), 'fedbn'),
    (dict(algo='fedbn', eval_protocol='global'), 'global'),
])
def test_auto_protocol(kw, expected):
  base = dict(partition='domains', model='mlp_bn')
  base.update(kw)
  assert study_lib.eval_protocol(fedjax_drift.Config(**base)) == expected


def test_fedbn_protocol_refused_where_it_cannot_hold():
  with pytest.raises(fedjax_drift.UserError, match='--algo=fedavg keeps none local'):
    study_lib.eval_protocol(fedjax_drift.Config(algo='fedavg', partition='domains',
                                                eval_protocol='fedbn'))
  with pytest.raises(fedjax_drift.UserError, match='--partition=domains or --test_partition'):
    study_lib.eval_protocol(fedjax_drift.Config(algo='fedbn', partition='iid',
                                                eval_protocol='fedbn'))


def _numpy_logits(named, x):
  """mlp_bn in numpy: dense -> BatchNorm (running statistics) -> relu, twice, then the head."""
  for i in range(2):
    x = x @ named[f'params/dense{i}/kernel'] + named[f'params/dense{i}/bias']
    mean, var = named[f'batch_stats/bn{i}/mean'], named[f'batch_stats/bn{i}/var']
    x = (x - mean) / np.sqrt(var + 1e-5) * named[f'params/bn{i}/scale'] + \
        named[f'params/bn{i}/bias']
    x = np.maximum(x, 0)
  return x @ named['params/head/kernel'] + named['params/head/bias']


@pytest.mark.slow
def test_per_domain_accuracies_by_hand(tmp_path):
  npz = write_domain_npz(tmp_path / 'd.npz')
  config = _config(npz, tmp_path / 'run', save_params=str(tmp_path / 'params.npz'))
  summary = fedjax_drift.run(config, **QUIET)
  ds = fedjax_drift.prepare(config)  # the same partition (and test splits) as the run's
  state, _ = Checkpointer(str(tmp_path / 'run')).restore(study_lib.build(config).state)
  saved = dict(np.load(tmp_path / 'params.npz'))
  rows = state.clients['fedbn']['norms']
  # Two of the four clients trained in the one round; the others keep the initial layers.
  initial = fedbn.norm_leaves(ds.state.params)
  fresh = [c for c in range(4) if all(np.array_equal(r[0, c], i) for r, i in zip(rows, initial))]
  assert len(fresh) == 2
  tree = jax.tree.map(lambda a: a[0], state.params)
  correct, count = np.zeros(3), np.zeros(3)
  for c, test in enumerate(ds.test_parts):
    own = fedbn.with_norm_leaves(tree, [r[0, c] for r in rows])
    named = models.flatten_names(own)
    for k, v in saved.items():  # the saved global weights are the non-norm layers
      if not any(k.startswith(p) for p in ('batch_stats/', 'params/bn')):
        np.testing.assert_array_equal(named[k], v[0])
    pred = _numpy_logits(named, ds.dataset.x_test[test]).argmax(-1)
    d = ds.dataset.domains_test[test]
    np.add.at(correct, d, pred == ds.dataset.y_test[test])
    np.add.at(count, d, 1)
  per_domain = correct / count
  last = _rows(tmp_path / 'run' / 'metrics.csv')[-1]
  got = [float(last[f'acc_domain_site_{d}']) for d in range(3)]
  np.testing.assert_allclose(got, per_domain, atol=1e-6)
  np.testing.assert_allclose(float(last['test_accuracy']), per_domain.mean(), atol=1e-6)
  assert summary['final_accuracy'] == float(last['test_accuracy'])
  assert set(summary['final_domain_accuracy']) == {f'acc_domain_site_{d}' for d in range(3)}


@pytest.mark.slow
def test_global_protocol_reports_domains_too(tmp_path):
  npz = write_domain_npz(tmp_path / 'd.npz')
  fedjax_drift.run(_config(npz, tmp_path / 'run', eval_protocol='global', rounds=1), **QUIET)
  row = _rows(tmp_path / 'run' / 'metrics.csv')[-1]
  per = np.array([float(row[f'acc_domain_site_{d}']) for d in range(3)])
  # Pooled over the whole test set: 15 test examples per domain, so the pooled accuracy is
  # their mean here too; the domain columns are the global model's.
  np.testing.assert_allclose(float(row['test_accuracy']), per.mean(), atol=1e-6)


@pytest.mark.slow
def test_sweep_equals_single_runs_and_resume_is_bit_identical(tmp_path):
  npz = write_domain_npz(tmp_path / 'd.npz')
  columns = ['test_accuracy', 'test_loss', 'best_accuracy'] + \
      [f'acc_domain_site_{d}' for d in range(3)]
  fedjax_drift.run(_config(npz, tmp_path / 'sweep', seeds=2, rounds=2), **QUIET)
  sweep = _rows(tmp_path / 'sweep' / 'metrics.csv')
  for seed in (0, 1):
    fedjax_drift.run(_config(npz, tmp_path / f'single{seed}', seed=seed, rounds=2), **QUIET)
    single = _rows(tmp_path / f'single{seed}' / 'metrics.csv')
    mine = [r for r in sweep if r['run'] == str(seed)]
    assert [r['round'] for r in mine] == [r['round'] for r in single] == ['0', '1', '2']
    for c in columns:
      np.testing.assert_allclose([float(r[c]) for r in mine], [float(r[c]) for r in single],
                                 rtol=1e-5, atol=1e-6, err_msg=c)
  # Stopped after round 1 and resumed to round 2: the same rows, bit for bit.
  fedjax_drift.run(_config(npz, tmp_path / 'resumed', seeds=2, rounds=1), **QUIET)
  simulation.resume(str(tmp_path / 'resumed'), rounds=2, **QUIET)
  resumed = _rows(tmp_path / 'resumed' / 'metrics.csv')
  assert [{c: r[c] for c in ['run', 'round'] + columns} for r in resumed] == \
      [{c: r[c] for c in ['run', 'round'] + columns} for r in sweep]

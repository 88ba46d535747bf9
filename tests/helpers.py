"""Shared test helpers: build an experiment on the tiny problem and replay its batches."""
import functools
import os

import jax
import numpy as np

import fedjax_drift
from fedjax_drift import engine


def tiny_config(npz, partition, **overrides):
  base = dict(dataset=f'npz:{npz}', partition=f'file:{partition}', model='logreg',
              clients_per_round=4, num_clients=4, rounds=1, local_steps=3, local_epochs=0,
              batch_size=0, lr=0.1, weighting='auto', progress=False, eval_every=1)
  base.update(overrides)
  return fedjax_drift.Config(**base)


def one_round(exp, state=None):
  return jax.jit(exp.round_fn)(exp.state if state is None else state, exp.data)


@functools.partial(jax.jit, static_argnames='batch_size')
def _batch(data, row, count, key, spe, step, batch_size):
  """The engine's own batch function, compiled (op by op it dominated the suite's time)."""
  return engine.make_batch_fn(data, row, count, key, batch_size, spe)(step)


def cohort_and_batches(exp, state=None, extra_steps=0):
  """Replays round `state.round`'s cohort ids and each client's batches (x, y, mask) in numpy."""
  state = exp.state if state is None else state
  rkey = jax.random.fold_in(state.key, state.round)
  n_clients = len(exp.train_parts)
  ids = np.asarray(engine.sample_cohort(jax.random.fold_in(rkey, 0), n_clients,
                                        exp.config.clients_per_round))
  counts = np.asarray(exp.data.client_count)
  steps = engine.client_steps(counts, exp.schedule)
  spe = np.asarray(engine.steps_per_epoch(counts, exp.schedule.batch_size))
  batches = {}
  for cid in ids:
    key = jax.random.fold_in(jax.random.fold_in(rkey, 1), int(cid))
    batch = functools.partial(_batch, exp.data, exp.data.client_index[int(cid)],
                              int(counts[cid]), key, int(spe[cid]),
                              batch_size=exp.schedule.batch_size)
    batches[int(cid)] = [tuple(np.asarray(a) for a in batch(s)[:3])  # x, y, mask
                         for s in range(int(steps[cid]) + extra_steps)]
  return ids, counts, batches


def run_rounds(exp, rounds):
  """The engine's state after `rounds` compiled rounds from exp.state."""
  state, step = exp.state, jax.jit(exp.round_fn)
  for _ in range(rounds):
    state = step(state, exp.data)[0]
  return state


def evaluated_rounds(run_dir):
  """How many rounds after round 0 a run directory's metrics.csv holds (0 while absent):
  how far a CLI run started by a test has got, before the test signals or kills it."""
  path = os.path.join(run_dir, 'metrics.csv')
  if not os.path.exists(path):
    return 0
  with open(path) as f:
    return max(0, sum(1 for _ in f) - 2)


def check_sweep_equals_single_runs_and_resumes(npz, tmp_path, **kw):
  """A 2-seed, 2-round sweep of config `kw` (test_sweep._config's flags) compiles once, each
  seed's test losses equal its single run, and the sweep stopped after round 1 and resumed
  writes the same metrics.csv: the algorithm's state is vmapped over runs and checkpointed."""
  from test_sweep import QUIET, _config, _rows  # pylint: disable=g-import-not-at-top
  kw = dict(kw, rounds=2, eval_every=1)
  summary = fedjax_drift.run(_config(npz, tmp_path / 'sweep', seeds=2, **kw), **QUIET)
  assert summary['segment_compilations'] == 1
  sweep = _rows(tmp_path / 'sweep' / 'metrics.csv')
  for seed in (0, 1):
    out = tmp_path / f'single-{seed}'
    fedjax_drift.run(_config(npz, out, seed=seed, **kw), **QUIET)
    single = [float(r['test_loss']) for r in _rows(out / 'metrics.csv')]
    run = [r for r in _rows(tmp_path / 'sweep' / 'runs.csv') if int(r['seed']) == seed][0]
    mine = [float(r['test_loss']) for r in sweep if r['run'] == run['run']]
    assert len(mine) == 3
    np.testing.assert_allclose(mine, single, rtol=1e-4, atol=1e-5)
  kw['rounds'] = 1
  fedjax_drift.run(_config(npz, tmp_path / 'resumed', seeds=2, **kw), **QUIET)
  fedjax_drift.resume(str(tmp_path / 'resumed'), rounds=2, **QUIET)
  resumed = _rows(tmp_path / 'resumed' / 'metrics.csv')
  assert [(r['run'], r['round'], r['test_loss']) for r in resumed] == \
      [(r['run'], r['round'], r['test_loss']) for r in sweep]

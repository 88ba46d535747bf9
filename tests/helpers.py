"""Shared test helpers: build an experiment on the tiny problem and replay its batches."""
import csv
import functools
import os

import jax
import numpy as np

import fedjax_drift
from fedjax_drift import engine, sampling


# Keyword arguments that silence fedjax_drift.run's console lines.
QUIET = dict(log=lambda *_: None)


def sweep_config(npz, out, **kw):
  """The sweep tests' Config: the npz problem over 6 Dirichlet(1) clients, 3 a round, an MLP,
  4 rounds of one local epoch, evaluated every 2, written to `out`; `kw` overrides."""
  base = dict(dataset=f'npz:{npz}', partition='dirichlet', dirichlet_alpha=1.0, model='mlp',
              num_clients=6, clients_per_round=3, rounds=4, eval_every=2, local_steps=0,
              local_epochs=1, batch_size=4, lr=0.1, progress=False, out=str(out))
  base.update(kw)
  return fedjax_drift.Config(**base)


def csv_rows(path, **match):
  """The rows of CSV file `path` (dicts of strings) whose columns equal `match`'s values."""
  with open(path) as f:
    return [r for r in csv.DictReader(f) if all(r[k] == str(v) for k, v in match.items())]


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
  ids = np.asarray(sampling.sample_cohort(jax.random.fold_in(rkey, 0), n_clients,
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
  """A 2-seed, 2-round sweep of config `kw` (sweep_config's flags) compiles once, each
  seed's test losses equal its single run, and the sweep stopped after round 1 and resumed
  writes the same metrics.csv: the algorithm's state is vmapped over runs and checkpointed."""
  kw = dict(kw, rounds=2, eval_every=1)
  summary = fedjax_drift.run(sweep_config(npz, tmp_path / 'sweep', seeds=2, **kw), **QUIET)
  assert summary['segment_compilations'] == 1
  sweep = csv_rows(tmp_path / 'sweep' / 'metrics.csv')
  for seed in (0, 1):
    out = tmp_path / f'single-{seed}'
    fedjax_drift.run(sweep_config(npz, out, seed=seed, **kw), **QUIET)
    single = [float(r['test_loss']) for r in csv_rows(out / 'metrics.csv')]
    run = [r for r in csv_rows(tmp_path / 'sweep' / 'runs.csv') if int(r['seed']) == seed][0]
    mine = [float(r['test_loss']) for r in sweep if r['run'] == run['run']]
    assert len(mine) == 3
    np.testing.assert_allclose(mine, single, rtol=1e-4, atol=1e-5)
  kw['rounds'] = 1
  fedjax_drift.run(sweep_config(npz, tmp_path / 'resumed', seeds=2, **kw), **QUIET)
  fedjax_drift.resume(str(tmp_path / 'resumed'), rounds=2, **QUIET)
  resumed = csv_rows(tmp_path / 'resumed' / 'metrics.csv')
  assert [(r['run'], r['round'], r['test_loss']) for r in resumed] == \
      [(r['run'], r['round'], r['test_loss']) for r in sweep]

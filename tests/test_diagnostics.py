"""The diagnostics behind the papers' figures (fedjax_drift/diagnostics.py), each against a
numpy computation: client models' accuracy, penultimate features, IGFL's attention matrix and
pair match rate, personalised accuracy at every evaluation; in a sweep, on resume, and at no
cost when off (the compiled round program is unchanged).

Problem: logistic regression on 4 classes, IGFL's paired population (IGFL Fig. 2: clients 0
and 1 hold labels {0, 1}, clients 2 and 3 hold {2, 3}), full-batch local steps.
"""
import csv
import inspect
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import diagnostics, engine, study as study_mod
from fedjax_drift.errors import UserError
from conftest import make_npz
from helpers import cohort_and_batches
from reference import LogReg, flat, softmax

LR = 0.1
QUIET = dict(log=lambda *a, **k: None)


@pytest.fixture(scope='module')
def paired(tmp_path_factory):
  """(npz, partition file): 4 classes, two clients per label pair, unequal sizes."""
  root = tmp_path_factory.mktemp('paired')
  npz = make_npz(root / 'four.npz', n_train=80, n_test=40, classes=4, seed=3)
  y = np.load(npz)['y_train']
  parts = []
  for pair in ((0, 1), (2, 3)):
    idx = np.flatnonzero(np.isin(y, pair))
    cut = len(idx) // 3  # unequal partners
    parts += [idx[:cut].tolist(), idx[cut:].tolist()]
  (root / 'pairs.json').write_text(json.dumps(parts))
  return str(npz), str(root / 'pairs.json')


def config(paired, out='', **overrides):
  npz, parts = paired
  base = dict(dataset=f'npz:{npz}', partition=f'file:{parts}', model='logreg', num_clients=4,
              clients_per_round=4, rounds=2, local_steps=3, local_epochs=0, batch_size=0,
              lr=LR, progress=False, eval_every=1, out=str(out))
  base.update(overrides)
  return fedjax_drift.Config(**base)


def rows(path):
  with open(path) as f:
    return list(csv.DictReader(f))


def local_models(exp, state):
  """{client: flat float64 params after local training} of round state.round's cohort, and
  the cohort ids, by plain local SGD in numpy (FedAvg's and IGFL-S's clients)."""
  model = LogReg(6, 4)
  theta = flat(state.params)
  ids, _, batches = cohort_and_batches(exp, state)
  out = {}
  for cid in ids:
    th = theta.copy()
    for x, y, mask in batches[int(cid)]:
      th = th - LR * model.grad(th, x, model.ce_dlogits(th, x, y), mask)
    out[int(cid)] = th
  return [int(i) for i in ids], out


def states(exp, rounds):
  """The engine's state before each of `rounds` rounds and after the last."""
  out, step = [exp.state], jax.jit(exp.round_fn)
  for _ in range(rounds):
    out.append(step(out[-1], exp.data)[0])
  return out


# ------------------------------------------------------------------------ pure functions

def test_label_partners_and_match_rate_by_hand():
  hist = np.array([[3, 2, 0, 0], [1, 4, 0, 0], [0, 0, 2, 2], [0, 0, 5, 1], [0, 0, 0, 7]])
  partners = diagnostics.label_partners(hist)
  expect = np.zeros((5, 5), bool)
  expect[0, 1] = expect[1, 0] = expect[2, 3] = expect[3, 2] = True
  np.testing.assert_array_equal(partners, expect)
  # Rows: 0 -> 1 (match), 1 -> 0 (match, its diagonal 0.9 left out), 2 -> 4 (miss),
  # 3 -> 2 (match); client 4 has no partner and does not count.
  a = np.array([[.5, .3, .1, .05, .05], [.2, .9, .03, .03, .02], [.1, .1, .3, .2, .3],
                [.1, .1, .4, .3, .1], [.2, .2, .2, .2, .2]])
  rate, count = diagnostics.pair_match_rate(a, partners)
  assert (rate, count) == (0.75, 4)
  assert diagnostics.pair_match_rate(a, np.zeros((5, 5), bool)) == (None, 0)


def test_mean_attention_by_client_id():
  cohorts = np.array([[2, 0], [0, 1]])
  mats = np.array([[[.6, .4], [.3, .7]], [[.5, .5], [.2, .8]]])
  mean = diagnostics.mean_attention(cohorts, mats, 3)
  np.testing.assert_allclose(mean[0, 0], (.7 + .5) / 2)
  np.testing.assert_allclose([mean[2, 0], mean[0, 2], mean[0, 1], mean[2, 2]], [.4, .3, .5, .6])
  assert np.isnan(mean[1, 2]) and np.isnan(mean[2, 1])


# ------------------------------------------------------------------------ the files

def test_client_probe_only_in_evaluation_rounds(paired):
  """The compiled step's per-client accuracies: NaN in round 1 (not evaluated with
  eval_every=2 and 3 rounds), the local models' test accuracy in round 2."""
  cfg = config(paired, rounds=3, eval_every=2, clients_per_round=3, diag_client_acc=True)
  st = study_mod.build(cfg)
  exp = fedjax_drift.prepare(cfg)
  step = jax.jit(st.step)
  state, first = step(st.state, st.data, st.inputs)
  assert np.isnan(np.asarray(first['diag']['client'])).all()
  _, second = step(state, st.data, st.inputs)
  ids, local = local_models(exp, jax.tree.map(lambda a: a[0], state))
  test = np.load(paired[0])
  hand = [np.mean(np.argmax(LogReg(6, 4).logits(local[i], test['x_test']), -1)
                  == test['y_test']) for i in ids]
  np.testing.assert_array_equal(np.asarray(second['diag']['ids'][0]), ids)
  np.testing.assert_allclose(np.asarray(second['diag']['client'][0]), hand, atol=1e-6)


@pytest.mark.slow
def test_client_accuracy_of_local_models(paired, tmp_path):
  """client_acc.csv: at evaluation rounds only (eval_every=2, last round 3), each cohort
  client's model after local training on the whole test set, as numpy computes it."""
  cfg = config(paired, tmp_path / 'run', rounds=3, eval_every=2, clients_per_round=3,
               diag_client_acc=True)
  fedjax_drift.run(cfg, **QUIET)
  got = rows(tmp_path / 'run' / 'client_acc.csv')
  assert sorted({int(r['round']) for r in got}) == [2, 3]
  exp = fedjax_drift.prepare(cfg)
  before = states(exp, 3)
  test = np.load(paired[0])
  model = LogReg(6, 4)
  for rnd in (2, 3):
    ids, local = local_models(exp, before[rnd - 1])
    mine = [r for r in got if int(r['round']) == rnd]
    assert [int(r['client']) for r in mine] == ids  # cohort order
    for r in mine:
      pred = np.argmax(model.logits(local[int(r['client'])], test['x_test']), -1)
      np.testing.assert_allclose(float(r['accuracy']), np.mean(pred == test['y_test']),
                                 atol=1e-6)


@pytest.mark.slow
def test_features_of_the_global_model(paired, tmp_path):
  cfg = config(paired, tmp_path / 'run', model='mlp', diag_features_rounds='0,2,7',
               diag_features_n=9)
  fedjax_drift.run(cfg, **QUIET)
  with np.load(tmp_path / 'run' / 'features.npz') as f:
    assert f['rounds'].tolist() == [0, 2]  # round 7 is after --rounds
    feats, labels = f['features'], f['labels']
  test = np.load(paired[0])
  np.testing.assert_array_equal(labels, test['y_test'][:9])
  exp = fedjax_drift.prepare(cfg)
  for i, state in enumerate(states(exp, 2)[::2]):
    z = exp.model.penultimate(state.params, jnp.asarray(test['x_test'][:9]))
    assert feats.shape == (1, 2, 9, 200)
    np.testing.assert_allclose(feats[0, i], np.asarray(z), rtol=1e-5, atol=1e-6)
    # the penultimate layer is the output layer's input
    kernel = np.asarray(state.params['head']['kernel'])
    bias = np.asarray(state.params['head']['bias'])
    np.testing.assert_allclose(feats[0, i] @ kernel + bias,
                               np.asarray(exp.model.apply(state.params,
                                                          jnp.asarray(test['x_test'][:9]))),
                               rtol=1e-4, atol=1e-5)


def self_attention_by_hand(exp, state, temperature):
  """(cohort ids, IGFL-S's softmax_j(<dw_i, dw_j> / T)) of round state.round, with dw_i the
  client's local model minus the global one (the paper's sign), all in numpy."""
  ids, local = local_models(exp, state)
  theta = flat(state.params)
  V = np.stack([local[i] - theta for i in ids])
  return ids, softmax(V @ V.T / temperature)


def test_attention_is_the_rounds_aux_output(paired):
  """The compiled step's metrics['diag'] carries the attention matrix of the round, in cohort
  order, as numpy computes it (the engine passes on what the algorithm's server step gave)."""
  cfg = config(paired, algo='igfl_s', attention='self', attention_temperature=0.05,
               clients_per_round=3, diag_attention=True)
  st = study_mod.build(cfg)
  exp = fedjax_drift.prepare(cfg)
  _, metrics = jax.jit(st.step)(st.state, st.data, st.inputs)
  ids, hand = self_attention_by_hand(exp, exp.state, 0.05)
  np.testing.assert_array_equal(np.asarray(metrics['diag']['ids'][0]), ids)
  np.testing.assert_allclose(np.asarray(metrics['diag']['server']['attention'][0]), hand,
                             rtol=1e-4, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize('temperature', [1.0])
def test_attention_matrix_by_hand(paired, tmp_path, temperature):
  """attention.npz holds IGFL-S's self-attention softmax_j(<dw_i, dw_j> / T) of each round
  (dw_i = the client's local model minus the global one, computed in numpy), in cohort
  order; attention.csv the pair match rate of each matrix, mean_attention the mean by client
  id and mean_match_rate its match rate."""
  cfg = config(paired, tmp_path / 'run', algo='igfl_s', attention='self', rounds=3,
               attention_temperature=temperature, diag_attention=True)
  fedjax_drift.run(cfg, **QUIET)
  with np.load(tmp_path / 'run' / 'attention.npz') as f:
    got = {k: f[k] for k in f}
  exp = fedjax_drift.prepare(cfg)
  partners = np.zeros((4, 4), bool)
  partners[0, 1] = partners[1, 0] = partners[2, 3] = partners[3, 2] = True
  hand, cohorts = [], []
  for state in states(exp, 3)[:3]:
    ids, a = self_attention_by_hand(exp, state, temperature)
    hand.append(a)
    cohorts.append(ids)
  assert got['rounds'].tolist() == [1, 2, 3]
  np.testing.assert_array_equal(got['cohort'][0], cohorts)
  np.testing.assert_allclose(got['attention'][0], hand, rtol=1e-4, atol=1e-6)
  rates = []
  for ids, a in zip(cohorts, hand):
    off = a - 10 * np.eye(4)
    best = np.argmax(off, 1)
    rates.append(np.mean([partners[ids[i], ids[best[i]]] for i in range(4)]))
  assert [float(r['match_rate']) for r in rows(tmp_path / 'run' / 'attention.csv')] == rates
  mean = np.zeros((4, 4))
  for ids, a in zip(cohorts, hand):
    mean[np.ix_(ids, ids)] += a / 3
  np.testing.assert_allclose(got['mean_attention'][0], mean, rtol=1e-4, atol=1e-6)
  off = mean - 10 * np.eye(4)
  assert got['mean_match_rate'][0] == np.mean(partners[np.arange(4), np.argmax(off, 1)])


@pytest.mark.slow
def test_personalized_accuracy_every_evaluation(paired, tmp_path):
  cfg = config(paired, tmp_path / 'run', test_partition='like_train', personalize='calibrate',
               personalize_every_eval=True)
  summary = fedjax_drift.run(cfg, **QUIET)
  got = rows(tmp_path / 'run' / 'metrics.csv')
  assert [int(r['round']) for r in got] == [0, 1, 2]
  accs = [float(r['personalized_accuracy']) for r in got]
  assert accs[-1] == pytest.approx(summary['personalization']['calibrated_mean_accuracy'],
                                   abs=1e-7)
  # Round 0 calibrates the initial model: by hand from personalization's own function.
  from fedjax_drift import personalize  # pylint: disable=g-import-not-at-top
  exp = fedjax_drift.prepare(cfg)
  calibrate, num_test = personalize.for_experiment(exp)
  before, after = calibrate(exp.state.params)
  keep = num_test > 0
  assert accs[0] == pytest.approx(float(np.asarray(after)[keep].mean()), abs=1e-7)
  assert accs[0] != accs[-1]


def test_refused_in_one_line(paired, tmp_path):
  with pytest.raises(UserError, match='--personalize_every_eval'):
    fedjax_drift.run(config(paired, tmp_path / 'a', personalize_every_eval=True), **QUIET)
  with pytest.raises(UserError, match='--diag_attention'):
    fedjax_drift.run(config(paired, tmp_path / 'b', diag_attention=True), **QUIET)
  with pytest.raises(UserError, match='--diag_attention'):
    fedjax_drift.run(config(paired, tmp_path / 'c', algo='igfl_s', attention='global',
                            diag_attention=True), **QUIET)
  with pytest.raises(UserError, match='--diag_features_rounds'):
    fedjax_drift.run(config(paired, tmp_path / 'd', diag_features_rounds='1,x'), **QUIET)
  with pytest.raises(UserError, match='--diag_features_n'):
    fedjax_drift.run(config(paired, tmp_path / 'e', diag_features_rounds='1',
                            diag_features_n=0), **QUIET)


ALL = dict(algo='igfl_s', attention='self', diag_client_acc=True, diag_attention=True,
           diag_features_rounds='1,3', diag_features_n=6, clients_per_round=3)


def _files(run_dir):
  out = {name: (run_dir / name).read_text() for name in ('client_acc.csv', 'attention.csv')}
  for name in ('features.npz', 'attention.npz'):
    with np.load(run_dir / name) as f:
      out.update({f'{name}:{k}': f[k] for k in f})
  return out


@pytest.mark.slow
def test_resume_writes_the_files_of_an_uninterrupted_run(paired, tmp_path):
  """Stopped after round 2 and resumed to 4: every diagnostic file equals the one run's."""
  fedjax_drift.run(config(paired, tmp_path / 'whole', rounds=4, **ALL), **QUIET)
  fedjax_drift.run(config(paired, tmp_path / 'resumed', rounds=2, **ALL), **QUIET)
  fedjax_drift.resume(str(tmp_path / 'resumed'), rounds=4, **QUIET)
  whole, resumed = _files(tmp_path / 'whole'), _files(tmp_path / 'resumed')
  assert whole.keys() == resumed.keys()
  for k in whole:
    np.testing.assert_array_equal(resumed[k], whole[k], err_msg=k)


@pytest.mark.slow
def test_resume_after_a_lost_checkpoint(paired, tmp_path):
  """A run whose files got ahead of its last checkpoint (files written at rounds 3 and 4,
  the round-4 checkpoint lost, as when a run is killed while saving): --resume continues from
  round 2, drops what the files hold beyond it, and ends with the uninterrupted run's files."""
  import shutil  # pylint: disable=g-import-not-at-top
  kw = dict(rounds=4, checkpoint_every=2, keep_checkpoints=3, **ALL)
  fedjax_drift.run(config(paired, tmp_path / 'whole', **kw), **QUIET)
  fedjax_drift.run(config(paired, tmp_path / 'cut', **kw), **QUIET)
  shutil.rmtree(tmp_path / 'cut' / 'checkpoints' / '4')
  lines = []
  fedjax_drift.resume(str(tmp_path / 'cut'), log=lambda *a, **k: lines.append(str(a[0])))
  assert 'resumed from the checkpoint at round 2' in lines
  whole, resumed = _files(tmp_path / 'whole'), _files(tmp_path / 'cut')
  assert whole.keys() == resumed.keys()
  for k in whole:
    np.testing.assert_array_equal(resumed[k], whole[k], err_msg=k)


@pytest.mark.slow
def test_sweep_equals_single_runs(paired, tmp_path):
  """Two seeds in one vmapped program give each seed's single-run diagnostics (run r's rows
  and array slices)."""
  fedjax_drift.run(config(paired, tmp_path / 'sweep', rounds=3, seeds=2, **ALL), **QUIET)
  sweep = _files(tmp_path / 'sweep')
  for seed in (0, 1):
    fedjax_drift.run(config(paired, tmp_path / f's{seed}', rounds=3, seed=seed, **ALL),
                     **QUIET)
    single = _files(tmp_path / f's{seed}')
    for name in ('client_acc.csv', 'attention.csv'):
      mine = [r for r in csv.DictReader(sweep[name].splitlines()) if r['run'] == str(seed)]
      theirs = list(csv.DictReader(single[name].splitlines()))
      assert [{**r, 'run': '0'} for r in mine] == theirs, name
    for k in single:
      if k.endswith('rounds') or k.endswith('labels'):
        np.testing.assert_array_equal(sweep[k], single[k])
      elif ':' in k:
        np.testing.assert_allclose(sweep[k][seed], single[k][0], rtol=1e-6, atol=1e-7,
                                   err_msg=k)


# ------------------------------------------------------------------------ no cost when off

def _lowered(cfg, monkeypatch=None, skip=False):
  """The lowered text of the study's compiled segment. skip: with the diagnostics code path
  cut out where it joins the program (the engine built with no probe and no aux, the
  algorithm's server_update truncated to (params, server), no diagnostic step input)."""
  if skip:
    make_round = engine.make_round

    def without(algo, *args, **kwargs):
      bound = inspect.signature(make_round).bind(algo, *args, **kwargs)
      bound.arguments.update(client_probe=None, keep_aux=False)
      update = algo.server_update
      bound.arguments['algo'] = algo._replace(server_update=lambda *a: update(*a)[:2])
      return make_round(*bound.args, **bound.kwargs)

    monkeypatch.setattr(engine, 'make_round', without)
    monkeypatch.setattr(diagnostics, 'step_inputs', lambda exp: None)
  st = study_mod.build(cfg)
  seg = engine.make_segment(st.step, cfg.eval_every)
  return st, seg.lower(st.state, st.data, st.inputs, jnp.int32(1)).as_text()


@pytest.mark.parametrize('algo', ['fedavg', 'igfl_s'])
def test_off_the_round_program_is_unchanged(paired, monkeypatch, algo):
  """With every diagnostic flag at its default, the compiled segment (a 2-seed sweep, so the
  run vmap is in it too) is the same program, to the character, as with the diagnostics code
  path cut out; IGFL's attention matrix is computed for its mixing weights anyway and its
  aux output is dropped. With --diag_attention / --diag_client_acc the program differs (the
  comparison can see them)."""
  cfg = config(paired, algo=algo, seeds=2)
  st, off = _lowered(cfg)
  assert 'diag' not in st.inputs
  metrics = jax.eval_shape(st.step, st.state, st.data, st.inputs)[1]
  assert 'diag' not in metrics
  with monkeypatch.context() as m:
    _, skipped = _lowered(cfg, m, skip=True)
  assert off == skipped
  on = dict(diag_client_acc=True)
  if algo == 'igfl_s':
    on['diag_attention'] = True
  _, with_diag = _lowered(config(paired, algo=algo, seeds=2, **on))
  assert with_diag != off


@pytest.mark.slow
def test_diag_cost_compares_lowered_programs():
  """benchmarks/diag_cost.py --lowered against this checkout itself: the same program."""
  import os  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  proc = subprocess.run([sys.executable, os.path.join(root, 'benchmarks', 'diag_cost.py'),
                         f'--baseline_repo={root}', '--lowered', '--flags=--model=logreg'],
                        capture_output=True, text=True, check=True)
  assert proc.stdout.splitlines()[-1] == 'same program: True'

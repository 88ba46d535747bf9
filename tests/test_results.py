"""results.py: one grid-selection rule and one seed statistic for summary.json, the presets'
tables (tables.select, tables.summarise) and compare.py.

The disputed case (issue 32): lr=0.1 lost one of its three seeds to divergence and its two
survivors score 0.80; lr=0.01 kept all three at 0.70. A mean over survivors flatters lr=0.1,
so only the points with the fewest diverged seeds compete and lr=0.01 is chosen, in
summary.json as in the tables. Checked against the old rule two ways: (1) running this file
with results.competing replaced by `lambda points: list(points)` (every point competes, as
summary.json's rule did) fails the three selection tests, each choosing lr=0.1; (2) the old
simulation._selected (simulation.py at commit d64f80b), applied to the groups built here,
returns lr=0.1 for select_on test and validation.
"""
import math
import types

import pytest

from fedjax_drift import compare, results, stats, tables
from fedjax_drift.config import Config

KEEPS, LOSES = {'lr': 0.01}, {'lr': 0.1}
ROUNDS = 10
METRICS = ('final_accuracy', 'best_accuracy', 'last10_mean_accuracy', 'mean_best_accuracy')


def _run(index, seed, point, accuracy):
  """One run_summary entry: every metric `accuracy` (validation too), or diverged (None)."""
  base = {'run': index, 'seed': seed, **point}
  keys = METRICS + stats.VALIDATION_KEYS
  if accuracy is None:
    return {**base, 'status': 'diverged', 'diverged_round': 5, 'diverged_client': 0,
            **{k: None for k in keys}, 'rounds_to_target': None}
  return {**base, 'status': 'ok', 'diverged_round': None, 'diverged_client': None,
          **{k: accuracy for k in keys}, 'rounds_to_target': None}


def _per_run():
  """lr=0.1 first (grid order would break a tie in its favour): seeds 0 and 1 at 0.80, seed 2
  diverged; lr=0.01: seeds 0, 1 and 2 at 0.70."""
  return ([_run(s, s, LOSES, 0.80 if s < 2 else None) for s in range(3)]
          + [_run(3 + s, s, KEEPS, 0.70) for s in range(3)])


def _specs(per_run):
  return [types.SimpleNamespace(index=r['run'], seed=r['seed'], point={'lr': r['lr']})
          for r in per_run]


def test_summary_json_selects_the_point_that_kept_its_seeds():
  per_run = _per_run()
  groups = results.grid_summaries(results.grid_points(_specs(per_run)), per_run,
                                  validation=True)
  lost = groups[0]
  assert lost['grid_point'] == LOSES and lost['diverged'] == 1
  assert lost['last10_mean_accuracy']['mean'] == pytest.approx(0.80)  # over its 2 survivors
  # The old rule (best mean over the survivors, stats.best_point alone) takes lr=0.1.
  assert stats.best_point(groups, lambda g: g['last10_mean_accuracy']['mean']) is lost
  for on in ('test', 'validation'):
    chosen = results.selected(on, groups)
    assert chosen['grid_point'] == KEEPS, on
    assert chosen['last10_mean_accuracy']['mean'] == pytest.approx(0.70)
  # A point that lost seeds competes when every point lost as many.
  everywhere = [dict(g, diverged=1) for g in groups]
  assert results.selected('test', everywhere)['grid_point'] == LOSES


def test_summary_selects_through_the_path_simulation_uses(monkeypatch):
  """results.summary, which simulation._finish writes to summary.json, with a stand-in study
  (only what summary reads; its partitions' test-class coverage is tests/test_splits.py's)."""
  monkeypatch.setattr(results.splits, 'coverage_warning', lambda partition, experiments: '')
  per_run = _per_run()
  exp = types.SimpleNamespace(
      algo=types.SimpleNamespace(communication=lambda params: {'up': 10, 'down': 10}),
      state=types.SimpleNamespace(params={}, clients={}, server={}), dataset=types.SimpleNamespace(
          name='tiny'), chunk=1, strategy='vmap', model=types.SimpleNamespace(family='dense'))
  for config in (Config(rounds=ROUNDS), Config(rounds=ROUNDS, val_fraction=0.2)):
    study = types.SimpleNamespace(config=config, experiments=[exp], runs=_specs(per_run),
                                  width=6)
    compiled = types.SimpleNamespace(compile_s=0.0, memory_bytes=0,
                                     evaluate=types.SimpleNamespace(protocol='global'))
    summary = results.summary(study, per_run, '/nowhere', compiled, 1.0, 1.0)
    assert summary['selected']['select_on'] == config.resolved_select_on()
    assert summary['selected']['grid_point'] == KEEPS
    assert [g['diverged'] for g in summary['grid_points']] == [1, 0]


def _curve(accuracy, diverged=False):
  """Evaluations at rounds 0, 5 and 10; a diverged run stops after round 5 (at 0.95)."""
  return [(0, 0.1), (5, 0.95)] if diverged else [(0, 0.1), (5, accuracy), (10, accuracy)]


def test_tables_select_the_same_point():
  runs = ([tables.Run(s, LOSES, _curve(0.80, s == 2), _curve(0.80, s == 2)) for s in range(3)]
          + [tables.Run(s, KEEPS, _curve(0.70), _curve(0.70)) for s in range(3)])
  points = tables.summarise(runs, ROUNDS, 0.9)
  assert points[0]['grid_point'] == LOSES and points[0]['diverged'] == 1
  assert points[0]['last10']['mean'] == pytest.approx(0.80)
  for on in ('test', 'validation'):
    chosen, on_test = tables.select(points, 'last10', on)
    assert chosen['grid_point'] == on_test['grid_point'] == KEEPS, on


def test_one_seed_statistic_for_summary_tables_and_compare(tmp_path):
  values = [0.5, 0.7, 0.6]
  s = results.seed_stats(values + [None, math.nan])  # diverged seeds are left out
  assert s['n'] == 3 and s['mean'] == pytest.approx(0.6) and s['std'] == pytest.approx(
      math.sqrt(0.02 / 3))
  per_run = [_run(i, i, KEEPS, v) for i, v in enumerate(values)]
  (group,) = results.grid_summaries([KEEPS], per_run)
  assert group['final_accuracy'] == {'mean': s['mean'], 'std': s['std'],
                                     'ci95': [s['lo'], s['hi']]}
  (point,) = tables.summarise([tables.Run(i, {}, [(0, 0.1), (1, v)], [])
                               for i, v in enumerate(values)], 1, 0.9)
  assert point['final'] == s
  (tmp_path / 'config.json').write_text(
      '{"algo": "fedavg", "_resolved": {"runs": [{"run": 0, "seed": 0}, {"run": 1, "seed": 1},'
      ' {"run": 2, "seed": 2}]}}')
  (tmp_path / 'runs.csv').write_text('run,seed,status,final_accuracy,best_accuracy\n'
                                     '0,0,ok,0.5,0.5\n1,1,ok,0.7,0.7\n2,2,ok,0.6,0.6\n')
  (tmp_path / 'metrics.csv').write_text('run,round,test_accuracy\n0,1,0.5\n1,1,0.7\n2,1,0.6\n')
  (row,) = compare.groups([compare.read_run_dir(str(tmp_path))])
  assert (row['final_accuracy_mean'], row['final_accuracy_std'], row['final_accuracy_ci95_lo'],
          row['final_accuracy_ci95_hi']) == (s['mean'], s['std'], s['lo'], s['hi'])

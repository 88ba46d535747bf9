"""tables.py: a results table's numbers from run directories, each against a hand computation:
per-curve metrics, seeds summarised per grid point (a diverged seed counted, not averaged),
selection on validation, paired differences, and read_runs joining runs.csv with metrics.csv.

One selection rule with summary.json and compare: test_results.py; the committed tables:
test_collect_results.py."""
import math

import pytest

from fedjax_drift import report, tables

# Rounds 0 (the initial model, never counted) and 2..10 every 2.
CURVE = [(0, 0.9), (2, 0.30), (4, 0.55), (6, 0.50), (8, 0.72), (10, 0.70)]


def test_run_metrics_by_hand():
  m = tables.run_metrics(CURVE, rounds=10, target=0.5, at=(4, 5))
  # last 10% of 10 rounds: round 10 alone; half budget: rounds <= 5.
  assert (m['final'], m['best'], m['best_half'], m['last10']) == (0.70, 0.72, 0.55, 0.70)
  assert m['rounds_to_target'] == 4  # round 0's 0.9 does not count
  assert m['at'][4] == 0.55 and math.isnan(m['at'][5])
  m20 = tables.run_metrics(CURVE + [(20, 0.6)], rounds=20, target=0.99)
  assert m20['last10'] == pytest.approx(0.6) and m20['rounds_to_target'] is None
  # The last 10% of 20 rounds are rounds 19-20; of 30 rounds, 28-30 (here: 28 and 30).
  m30 = tables.run_metrics([(26, 0.1), (28, 0.2), (30, 0.4)], rounds=30, target=1)
  assert m30['last10'] == pytest.approx(0.3)


def test_average_best_by_hand_and_shown_only_where_reported():
  m = tables.run_metrics(CURVE, rounds=10, target=0.5)
  # best so far over rounds 2..10: 0.30, 0.55, 0.55, 0.72, 0.72 (round 0 not counted)
  assert m['avg_best'] == pytest.approx((0.30 + 0.55 + 0.55 + 0.72 + 0.72) / 5)
  runs = [tables.Run(s, {}, CURVE, []) for s in (0, 1)]
  row = {'method': 'a', 'chosen': {}, 'seeds': [0, 1],
         **tables.summarise(runs, 10, 0.5)[0]}
  assert row['avg_best']['mean'] == pytest.approx(m['avg_best'])
  assert 'average best' in tables._results_rows([row], 'avg_best')[0]
  assert 'average best' not in tables._results_rows([row], 'best')[0]


def test_at_best_validation_takes_the_first_peak():
  val = [(0, 1.0), (2, 0.4), (4, 0.6), (6, 0.6), (8, 0.5)]
  test = [(0, 0.0), (2, 0.1), (4, 0.2), (6, 0.3), (8, 0.4)]
  assert tables.at_best_validation(test, val) == 0.2


def _run(seed, lr, finals, val=()):
  curve = [(t, a) for t, a in zip((2, 4), finals)]
  return tables.Run(seed, {'lr': lr}, curve, [(t, a) for t, a in zip((2, 4), val)])


def test_summarise_per_point_and_a_diverged_seed_is_counted_not_averaged():
  runs = [_run(0, 0.1, (0.5, 0.6), (0.4, 0.9)), _run(1, 0.1, (0.5, 0.8), (0.3, 0.2)),
          _run(0, 0.01, (0.4, 0.7), (0.5, 0.5)), tables.Run(1, {'lr': 0.01}, [(2, 0.3)],
                                                           [(2, 0.2)])]
  points = tables.summarise(runs, rounds=4, target=0.75)
  assert [p['grid_point'] for p in points] == [{'lr': 0.1}, {'lr': 0.01}]
  a, b = points
  assert a['final']['mean'] == pytest.approx(0.7)
  assert a['final']['std'] == pytest.approx(0.1)  # the spread of these seeds (ddof=0)
  assert a['per_seed']['final'] == {0: 0.6, 1: 0.8}
  assert a['rounds_to_target'] == {'reached': '1/2', 'mean': 4.0}
  # at best validation: seed 0 peaks at round 4 (test 0.6), seed 1 at round 2 (test 0.5).
  assert a['per_seed']['at_best_val'] == {0: 0.6, 1: 0.5}
  assert a['curve'] == [(2, 0.5, 0.0), (4, pytest.approx(0.7), pytest.approx(0.1))]
  assert b['diverged'] == 1 and b['final']['mean'] == pytest.approx(0.7)
  assert math.isnan(b['per_seed']['final'][1])
  assert b['curve'] == [(2, 0.4, 0.0), (4, 0.7, 0.0)]  # the mean curve of the finished seed


def test_select_on_validation_and_on_test():
  points = [{'grid_point': {'lr': 0.1}, 'final': {'mean': 0.8}, 'val': {'final': {'mean': 0.5}}},
            {'grid_point': {'lr': 0.2}, 'final': {'mean': 0.7}, 'val': {'final': {'mean': 0.6}}}]
  chosen, on_test = tables.select(points, 'final', 'validation')
  assert chosen['grid_point'] == {'lr': 0.2} and on_test['grid_point'] == {'lr': 0.1}
  assert tables.select(points, 'final', 'test') == (on_test, on_test)


def test_differences_pair_the_seeds_two_methods_share():
  rows = [{'method': 'fedavg', 'per_seed': {'final': {0: 0.5, 1: 0.6, 2: 0.7}}},
          {'method': 'mine', 'per_seed': {'final': {0: 0.6, 1: 0.8}}}]
  diff = tables.differences(rows, 'final', ['fedavg'])
  assert diff['fedavg'] == {}  # not compared with itself
  assert diff['mine']['fedavg']['mean'] == pytest.approx(0.15)  # seeds 0 and 1 only


def test_read_runs_joins_runs_csv_with_metrics_csv(tmp_path):
  report.write_csv(tmp_path / 'runs.csv', [{'run': 0, 'seed': 3, 'lr': 0.1},
                                           {'run': 1, 'seed': 4, 'lr': 0.1}])
  report.write_csv(tmp_path / 'metrics.csv', [
      {'run': r, 'round': t, 'test_accuracy': a}
      for r, t, a in ((0, 2, 0.2), (1, 2, 1.2), (0, 1, 0.1), (1, 1, 1.1))])
  runs = tables.read_runs(str(tmp_path), grid_names=('lr',))
  assert [(r.seed, r.point, r.curve, r.val_curve) for r in runs] == [
      (3, {'lr': 0.1}, [(1, 0.1), (2, 0.2)], []), (4, {'lr': 0.1}, [(1, 1.1), (2, 1.2)], [])]
  report.write_csv(tmp_path / 'metrics.csv', [{'round': 1, 'test_accuracy': 0.5}])
  assert tables.read_runs(str(tmp_path), seed=7)[0][:3] == (7, {}, [(1, 0.5)])

"""experiments/RESULTS.md is exactly what experiments/collect_results.py builds from the
committed raw results (experiments/results/*/results.json and provenance.json), and each
committed table's cells are the statistics of the per-seed values stored beside them."""
import glob
import json
import math
import os
import sys

import numpy as np
from scipy.stats import t

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'experiments'))
import collect_results  # noqa: E402


def test_results_md_is_built_from_the_committed_results():
  with open(collect_results.OUT) as f:
    assert f.read() == collect_results.build(), 'run python experiments/collect_results.py'


def _committed():
  return sorted(glob.glob(os.path.join(collect_results.RESULTS, '*', 'results.json')))


def test_every_committed_result_names_its_commit_command_and_tier():
  assert _committed(), 'no committed results'
  for path in _committed():
    with open(path) as f:
      results = json.load(f)
    with open(os.path.join(os.path.dirname(path), 'provenance.json')) as f:
      prov = json.load(f)
    assert results['mode'] in ('cpu', 'short', 'full')
    words = prov['command'].split()
    assert f'--mode={results["mode"]}' in words
    assert results['preset'] in words or ('all' in words and prov['presets_in_command'] > 1)
    assert len(prov['commit']) >= 7 and prov['wall_s'] > 0
    assert not glob.glob(os.path.join(os.path.dirname(path), '**', 'checkpoints'),
                         recursive=True)


def test_cells_are_the_t_intervals_of_the_stored_per_seed_values():
  """Every selected row's reported-metric interval, recomputed by hand (mean +- t(0.975,
  n-1) s / sqrt(n)) from its per-seed values."""
  for path in _committed():
    with open(path) as f:
      results = json.load(f)
    metric = results['metric']
    for rows in results['scenarios'].values():
      for r in rows:
        assert len(r['per_seed'][metric]) >= 3  # the cpu tier's seeds
        values = np.array([v for v in r['per_seed'][metric].values() if v is not None],
                          np.float64)  # a diverged run is null (nan), left out of the cell
        assert len(values) == len(r['per_seed'][metric]) - r.get('diverged', 0)
        cell = r[metric]
        if len(values) < 2:  # one run left (the others diverged): no interval
          assert cell['lo'] is None and cell['n'] == len(values)
          continue
        half = t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values))
        assert abs(cell['mean'] - values.mean()) < 1e-9 and cell['n'] == len(values)
        assert abs(cell['lo'] - (values.mean() - half)) < 1e-9
        assert abs(cell['hi'] - (values.mean() + half)) < 1e-9


def test_a_diverged_run_is_counted_not_scored_by_its_accuracy_before_diverging():
  from fedjax_drift import tables  # pylint: disable=g-import-not-at-top
  curve = [(0, 0.1), (3, 0.5), (6, 0.7)]
  runs = [tables.Run(s, {}, curve, []) for s in (0, 1)] + [tables.Run(2, {}, curve[:2], [])]
  (point,) = tables.summarise(runs, 6, 0.6)
  assert point['diverged'] == 1 and point['final']['n'] == 2
  assert point['final']['mean'] == 0.7 and math.isnan(point['per_seed']['final'][2])
  assert point['rounds_to_target']['reached'] == '2/3' and len(point['curve']) == 3
  rows = [dict(point, method='m', chosen={}, select_on='test')]
  text = tables.markdown({'metric': 'final', 'mode': 'cpu', 'date': 'd', 'scenarios': {'s': rows}})
  assert '| 3 (1 diverged) |' in text


def test_a_point_or_row_that_lost_seeds_ranks_below_those_that_kept_them():
  from fedjax_drift import tables  # pylint: disable=g-import-not-at-top
  good, great = [(0, 0.1), (6, 0.6)], [(0, 0.1), (6, 0.9)]
  runs = ([tables.Run(s, {'lr': 0.1}, good, good) for s in (0, 1, 2)] +
          [tables.Run(0, {'lr': 1.0}, great, great), tables.Run(1, {'lr': 1.0}, good[:1], [])])
  points = tables.summarise(runs, 6, 0.6)
  lost = next(p for p in points if p['grid_point'] == {'lr': 1.0})
  assert lost['diverged'] == 1 and lost['final']['mean'] == 0.9  # its survivor scores higher
  for on in ('validation', 'test'):
    chosen, on_test = tables.select(points, 'final', on)
    assert chosen['grid_point'] == on_test['grid_point'] == {'lr': 0.1}
  rows = [dict(p, method=f'lr{p["grid_point"]["lr"]}', chosen={}, select_on='test')
          for p in reversed(points)]
  text = tables.markdown({'metric': 'final', 'mode': 'cpu', 'date': 'd', 'scenarios': {'s': rows}})
  assert text.index('| lr0.1 |') < text.index('| lr1.0 |')


def test_a_method_whose_every_run_diverges_is_reported_not_fatal(tmp_path, monkeypatch):
  import fedjax_drift  # pylint: disable=g-import-not-at-top
  import presets  # pylint: disable=g-import-not-at-top
  from fedjax_drift import tables  # pylint: disable=g-import-not-at-top

  def fake_run(config, sweep=True):  # uniform diverges everywhere; cover_classes trains
    if 'uniform' in config.out:
      raise fedjax_drift.errors.DivergenceError('every run diverged (first in round 1)')
    return [tables.Run(s, {}, [(0, 0.1), (1, 0.5 + s / 10)], []) for s in range(3)]

  monkeypatch.setattr('presetlib.jobs.run_method', fake_run)  # what the jobs call
  results = presets.run_preset('fedadc_cohort', 'cpu', rounds=1, out_root=str(tmp_path),
                               log=lambda *_: None)
  assert list(results['scenarios']) == ['cover_classes']
  assert results['diverged'] == ['fedadc @ uniform: every run diverged (first in round 1)']
  assert 'Every run diverged, so no row: fedadc @ uniform' in (tmp_path / 'table.md').read_text()

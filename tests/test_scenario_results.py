"""Results per scenario (issue 46 item 4): a grid over scenario axes selects the
hyperparameters within each scenario (the best lr at each alpha, never across alphas), reports
a selection line per scenario, and an algo: grid tables and pairs each method per scenario
(paired by seed and scenario)."""
import json

import numpy as np

import fedjax_drift
from fedjax_drift import methods, results
from helpers import csv_rows, sweep_config


def _group(alpha, lr, val, seeds=2):
  stat = {'mean': val, 'std': 0.0, 'ci95': None}
  return {'grid_point': {'dirichlet_alpha': alpha, 'lr': lr}, 'seeds': seeds, 'diverged': 0,
          **{k: stat for k in ('final_accuracy', 'best_accuracy', 'last10_mean_accuracy',
                               'val_last10_mean_accuracy')}}


def test_selection_is_within_each_scenario():
  # Across alphas, (0.1, lr 0.1) would lose to both points at alpha 1; within alpha 0.1 it wins.
  groups = [_group(.1, .1, .60), _group(.1, .05, .50), _group(1., .1, .80),
            _group(1., .05, .90)]
  chosen = results.selected_per_scenario('validation', groups)
  assert [c['scenario'] for c in chosen] == [{'dirichlet_alpha': .1}, {'dirichlet_alpha': 1.}]
  assert [c['grid_point']['lr'] for c in chosen] == [.1, .05]
  assert [c['points'] for c in chosen] == [2, 2]
  assert [c['last10_mean_accuracy']['mean'] for c in chosen] == [.60, .90]
  # no scenario axes: one scenario, {}, and the one selection
  plain = [{**g, 'grid_point': {'lr': g['grid_point']['lr']}} for g in groups[2:]]
  alone = results.selected_per_scenario('test', plain)
  assert len(alone) == 1 and alone[0]['scenario'] == {}
  assert {k: v for k, v in alone[0].items() if k not in ('scenario', 'points')} == \
      results.selected('test', plain)
  line = results.selection_line(chosen[0], 'fedavg')
  assert line.startswith('selected at dirichlet_alpha=0.1 on validation') and \
      ': lr=0.1;' in line


def _runs(values):
  """runs of one method: {(alpha, lr): [final accuracy per seed]}."""
  return [dict(seed=s, status='ok', dirichlet_alpha=a, lr=lr, final_accuracy=v, best_accuracy=v,
               last10_mean_accuracy=v) for (a, lr), vs in values.items()
          for s, v in enumerate(vs)]


def _method_summary(values):
  runs = _runs(values)
  groups = [{'grid_point': {'dirichlet_alpha': a, 'lr': lr}, 'seeds': len(vs), 'diverged': 0,
             **{k: {'mean': float(np.mean(vs)), 'std': float(np.std(vs)), 'ci95': None}
                for k in ('final_accuracy', 'best_accuracy', 'last10_mean_accuracy')}}
            for (a, lr), vs in values.items()]
  return {'grid_points': groups, 'runs': runs, 'grid': {}, 'weighting': 'examples',
          'num_runs': len(runs), 'seeds': [0, 1], 'dataset': 'toy', 'warnings': []}


def test_methods_table_and_pairs_are_per_scenario():
  first = _method_summary({(.1, .1): [.60, .62], (.1, .05): [.50, .52],
                           (1., .1): [.80, .82], (1., .05): [.90, .93]})
  second = _method_summary({(.1, .1): [.65, .70], (.1, .05): [.10, .10],
                            (1., .1): [.85, .80], (1., .05): [.70, .70]})
  config = sweep_config('unused.npz', 'out', grid='algo:fedavg,fedprox;dirichlet_alpha:0.1,1;'
                        'lr:0.1,0.05', select_on='test')
  summary = methods._summary(config, ['fedavg', 'fedprox'], [config, config],
                             {'fedavg': first, 'fedprox': second}, 'out')
  rows = [(r['algo'], r['dirichlet_alpha'], r['grid_point']) for r in summary['table']]
  assert rows == [('fedavg', .1, 'lr=0.1'), ('fedavg', 1., 'lr=0.05'),
                  ('fedprox', .1, 'lr=0.1'), ('fedprox', 1., 'lr=0.1')]
  assert 'paired' not in summary and 'selected' not in summary['per_method']['fedavg']
  by_alpha = {p['scenario']['dirichlet_alpha']: p['paired']['fedprox']['final_accuracy']
              for p in summary['paired_per_scenario']}
  # each at its own choice in the scenario, paired by seed: (.65-.60, .70-.62) at alpha 0.1
  np.testing.assert_allclose(by_alpha[.1]['mean'], np.mean([.05, .08]))
  np.testing.assert_allclose(by_alpha[1.]['mean'], np.mean([.85 - .90, .80 - .93]))
  np.testing.assert_allclose(summary['table'][3]['final_accuracy_minus_fedavg_mean'],
                             by_alpha[1.]['mean'])


def test_a_scenario_sweep_selects_per_scenario_end_to_end(tiny_npz, tmp_path):
  lines = []
  summary = fedjax_drift.run(
      sweep_config(tiny_npz, tmp_path / 'run', seeds=1, rounds=1,
                   grid='dirichlet_alpha:0.1,1;lr:0.1,0.05'), log=lines.append)
  chosen = summary['selected_per_scenario']
  assert 'selected' not in summary
  assert [c['scenario'] for c in chosen] == [{'dirichlet_alpha': .1}, {'dirichlet_alpha': 1.}]
  for c in chosen:  # each the best of its own scenario's points
    mine = [g for g in summary['grid_points']
            if g['grid_point']['dirichlet_alpha'] == c['scenario']['dirichlet_alpha']]
    assert c['grid_point'] == results.selected('test', mine)['grid_point'] or \
        c['select_on'] == 'validation'
  assert sum(line.startswith('selected at dirichlet_alpha=') for line in lines) == 2
  on_disk = json.loads((tmp_path / 'run' / 'summary.json').read_text())
  assert on_disk['selected_per_scenario'] == chosen
  assert len(csv_rows(tmp_path / 'run' / 'runs.csv')) == 4

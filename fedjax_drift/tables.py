"""Results tables from run directories: per-run metrics, grid selection, statistics over seeds.

The pieces, in the order a table is built (experiments/presets.py runs them per method):
  read_runs(run_dir, grid_names, seed)   -> [Run]: each run's test (and validation) curve
  run_metrics(curve, rounds, target, at) -> final / best / best_half / last10 / ... of one curve
  summarise(runs, rounds, target, at)    -> per grid point: each metric's mean, std and 95%
                                            t-interval over seeds, and its value per seed
  select(points, metric, select_on)      -> the grid point a protocol picks
  differences(rows, metric, references)  -> each method's paired difference to references
  markdown(results)                      -> the tables, each saying what it reports

Reported metrics (stats.METRICS): final, best, best up to half the rounds, last-10% mean (all
of the test accuracy; a table whose metric is the average best, FedFOR Table 5's, adds it),
and, with a validation split, the test accuracy at the evaluation with
the best validation accuracy. Round 0 (the initial model) is not counted.
"""
import csv
import math
import os
from typing import NamedTuple

import numpy as np

from fedjax_drift import results, stats

COLUMNS = ('final', 'best', 'best_half', 'last10')
HEADERS = {'final': 'final', 'best': 'best', 'best_half': 'best by half budget',
           'last10': 'last-10% mean', 'at_best_val': 'at best validation',
           'avg_best': 'average best'}
# The mark of a row whose chosen point has a run that failed a sanity check, and its legend.
MARK = '⚠'
LEGEND = (f'{MARK} after a method: a run of its chosen grid point failed a sanity check '
          '(validation or test accuracy exactly 0 or 1 at every evaluation, or a loss that never '
          'changes; results.json lists them under the row\'s warnings, each run\'s summary.json '
          'too). Its numbers are shown, not refused.')
# Metrics a preset may report that its tables show only then (FedFOR Table 5's average best).
OPTIONAL = ('avg_best',)
# The metrics.csv column a table's curves are read from, and what its cells then are.
ACCURACY = {'test_accuracy': 'the test accuracy',
            'personalized_accuracy': 'the personalised test accuracy (the mean over clients of '
                                     'each client\'s accuracy on its own test split after '
                                     'calibrating the last layer on its own data, at every '
                                     'evaluation: --personalize_every_eval)'}


class Run(NamedTuple):
  seed: int
  point: dict        # grid values
  curve: list        # [(round, test accuracy)], in round order
  val_curve: list    # [(round, validation accuracy)], [] without a validation split
  warnings: tuple = ()  # results.sanity_warnings of the run: a table marks its row (MARK)


def _csv(path):
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return list(csv.DictReader(f))


def read_runs(run_dir, grid_names=(), seed=0, column='test_accuracy') -> list:
  """[Run] of a run directory: runs.csv (seed and grid values per run) joined with
  metrics.csv (one row per run and evaluation). grid_names: the swept flags; seed: the seed of
  a directory whose metrics.csv has no run column; column: the curve's column (ACCURACY)."""
  metrics = _csv(os.path.join(run_dir, 'metrics.csv'))
  info = {r['run']: r for r in _csv(os.path.join(run_dir, 'runs.csv'))}
  rows = ([{**info.get(r['run'], {}), **r} for r in metrics] if metrics and 'run' in metrics[0]
          else [dict(r, run='0', seed=str(seed)) for r in metrics])
  out, evals = {}, {}
  for r in rows:
    key = r.get('run', '0')
    if key not in out:
      out[key] = Run(int(float(r.get('seed', seed))), {k: float(r[k]) for k in grid_names},
                     [], [])
    out[key].curve.append((int(r['round']), float(r[column])))
    if r.get('val_accuracy') not in (None, ''):
      out[key].val_curve.append((int(r['round']), float(r['val_accuracy'])))
    evals.setdefault(key, []).append(r)
  recorded = results.recorded_warnings(run_dir)
  return [run._replace(curve=sorted(run.curve), val_curve=sorted(run.val_curve),
                       warnings=tuple(recorded.get(int(key), ()) if recorded
                                      else _warnings(evals[key])))
          for key, run in out.items()]


def _warnings(rows):
  """results.sanity_warnings of one run's metrics.csv rows (a directory whose summary.json
  does not record them)."""
  num = lambda x: float(x) if x not in (None, '') else math.nan  # noqa: E731
  rows = sorted(rows, key=lambda r: int(r['round']))
  return results.sanity_warnings(
      [int(r['round']) for r in rows], [num(r.get('test_accuracy')) for r in rows],
      [num(r.get('test_loss')) for r in rows],
      [num(r['val_accuracy']) for r in rows if r.get('val_accuracy') not in (None, '')])


def run_metrics(curve, rounds, target, at=(), half_round=None):
  """final, best, best up to half the budget (FedFOR Table 2: up to `half_round`, default
  rounds // 2), last-10% mean (IGFL), rounds to the target accuracy, and accuracy at the
  rounds `at` (FedGKD Table 6), from one run's evaluations [(round, accuracy)] (round 0, the
  initial model, is left out)."""
  acc = {t: a for t, a in curve if t > 0}
  ts = sorted(acc)
  last = [acc[t] for t in ts if t > rounds - max(1, math.ceil(rounds / 10))] or [acc[ts[-1]]]
  half_round = rounds // 2 if half_round is None else half_round
  half = [acc[t] for t in ts if t <= half_round] or [float('nan')]
  reached = [t for t in ts if acc[t] >= target]
  return {'final': acc[ts[-1]], 'best': max(acc.values()), 'best_half': max(half),
          'last10': float(np.mean(last)),
          'avg_best': float(np.mean(np.maximum.accumulate([acc[t] for t in ts]))),
          'rounds_to_target': reached[0] if reached else None,
          'at': {t: acc.get(t, float('nan')) for t in at}}


def at_best_validation(curve, val_curve):
  """The test accuracy at the first evaluation (round > 0) with the best validation accuracy."""
  val = {t: a for t, a in val_curve if t > 0}
  test = dict(curve)
  peak = max(sorted(val), key=lambda t: val[t])  # first of equals: sorted, max keeps the first
  return test[peak]


def _diverged_metrics(at=()):
  """run_metrics' keys for a run that diverged: nan (no accuracy), never reached the target."""
  return {**{k: math.nan for k in COLUMNS + OPTIONAL},
          'rounds_to_target': None, 'at': {t: math.nan for t in at}}


def summarise(runs, rounds, target, at=(), half_round=None):
  """Per grid point of `runs` ([Run]): for each metric its statistics over the seeds
  (results.seed_stats) and its value per seed ('per_seed': {metric: {seed: value}}, for
  paired differences); 'val': the same metrics of the validation curve (selection), when
  there is one; the mean curve. half_round: run_metrics' (default rounds // 2)."""
  points = {}
  for run in runs:
    points.setdefault(tuple(sorted(run.point.items())), []).append(run)
  out = []
  for key, mine in points.items():
    # A diverged run's evaluations stop before the last round: its metrics are nan (left out
    # of the means and intervals, counted in 'diverged'), not its accuracy before diverging.
    ok = [bool(r.curve) and r.curve[-1][0] >= rounds for r in mine]
    ms = [run_metrics(r.curve, rounds, target, at, half_round) if good
          else _diverged_metrics(at) for r, good in zip(mine, ok)]
    has_val = all(r.val_curve for r in mine)
    if has_val:
      for m, r, good in zip(ms, mine, ok):
        m['at_best_val'] = at_best_validation(r.curve, r.val_curve) if good else math.nan
    names = COLUMNS + OPTIONAL + (('at_best_val',) if has_val else ())
    point = {'grid_point': dict(key), 'seeds': [r.seed for r in mine]}
    point.update({k: results.seed_stats([m[k] for m in ms]) for k in names})
    point['per_seed'] = {k: {r.seed: m[k] for r, m in zip(mine, ms)} for k in names}
    point['at'] = {t: results.seed_stats([m['at'][t] for m in ms]) for t in at}
    reached = [m['rounds_to_target'] for m in ms if m['rounds_to_target'] is not None]
    point['rounds_to_target'] = {'reached': f'{len(reached)}/{len(ms)}',
                                 'mean': float(np.mean(reached)) if reached else None}
    if not all(ok):
      point['diverged'] = len(ok) - sum(ok)
    warned = [f'seed {r.seed}: {w}' for r in mine for w in r.warnings]
    if warned:  # results.sanity_warnings of its runs: the table marks the row
      point['warnings'] = warned
    if has_val:
      vms = [run_metrics(r.val_curve, rounds, target, (), half_round) if good
             else _diverged_metrics() for r, good in zip(mine, ok)]
      point['val'] = {k: results.seed_stats([m[k] for m in vms]) for k in COLUMNS + OPTIONAL}
    kept = [r for r, good in zip(mine, ok) if good] or mine  # the mean curve of the finished
    rounds_ = [t for t, _ in min((r.curve for r in kept), key=len)]
    acc = np.array([[a for _, a in r.curve[:len(rounds_)]] for r in kept])
    point['curve'] = [(t, float(m), float(s)) for t, m, s in zip(rounds_, acc.mean(0),
                                                                 acc.std(0))]
    out.append(point)
  return out


def select(points, metric, select_on):
  """(chosen point, the point selection on test would choose) among summarise's points:
  the best mean `metric` on the validation split (select_on='validation'; points without a
  validation split fall back to test, which the caller labels) or on the test set. Only the
  points with the fewest diverged seeds compete: a mean over the seeds that survived would
  flatter a point that lost some. The rule is results.select_point, summary.json's too."""
  on_test = results.select_point(points, lambda p: p[metric]['mean'])
  if select_on != 'validation' or any('val' not in p for p in results.competing(points)):
    return on_test, on_test
  return results.select_point(points, lambda p: p['val'][metric]['mean']), on_test


def differences(rows, metric, references):
  """{method: {reference: stats.paired_difference}} of `metric` over the seeds each method
  shares with each reference method (a label in rows; a method is not compared with itself).
  rows: one scenario's results entries (each with 'method' and 'per_seed')."""
  by = {r['method']: r.get('per_seed', {}).get(metric, {}) for r in rows}  # older files: none
  return {r['method']: {ref: stats.paired_difference(by[r['method']], by[ref])
                        for ref in references if ref in by and ref != r['method']}
          for r in rows}


def reference_methods(methods, paper):
  """The labels a table compares every method with: FedAvg (the method whose algorithm is
  fedavg) and the paper's own method (the label named as the paper, else the first label
  containing that name; the paper's name is its first word, e.g. 'FedADC (Ozfatura ...)').
  methods: {label: algorithm}. Missing ones are left out."""
  refs = [label for label, algo in methods.items() if algo == 'fedavg'][:1]
  family = paper.split()[0].lower()
  own = [label for label in methods if label.lower() == family] or \
      [label for label in methods if family in label.lower()]
  return refs + [label for label in own[:1] if label not in refs]


def _cell(stat):
  return stats.fmt_interval(stat)


def _splits(results, sel):
  """Sorted distinct (val_fraction, val_source, own split's name) of the rows selected on
  validation: each row's config where it has one (a scenario may use its dataset's own
  split, --val_source=dataset), else the results' selection."""
  out = set()
  for rows in results['scenarios'].values():
    for r in (r for r in rows if r.get('select_on') == 'validation'):
      cfg = {**sel, **r.get('config', {})}
      source = cfg.get('val_source', 'clients')
      out.add((cfg.get('val_fraction', 0.0), source,
               stats.own_split_name(cfg.get('dataset', '')) if source == 'dataset' else ''))
  return sorted(out)


def protocol_lines(results) -> list:
  """The sentences that say how points were chosen and what the cells are."""
  sel = results.get('selection', {})
  metric = results['metric']
  used = {r.get('select_on', 'test') for rows in results['scenarios'].values() for r in rows}
  lines = []
  for on in ('validation', 'test'):
    if on == 'test' and on in used:
      lines.append(stats.selection_label(on, metric=metric))
    if on == 'validation':  # one sentence per kind of split the rows were selected on
      lines += [stats.selection_label(on, *split, metric, name)
                for *split, name in _splits(results, sel)]
  if sel.get('select_on') == 'validation' and 'test' in used:
    lines.append('Runs marked "test" in the selected-on column could not hold a validation '
                 f'split out ({sel.get("fallback", "see the notes")}), so they fall back to the '
                 'papers\' protocol.')
  val = any('at_best_val' in r for rows in results['scenarios'].values() for r in rows)
  shown = COLUMNS + tuple(k for k in OPTIONAL if k == metric) + (('at_best_val',) if val else ())
  what = ACCURACY[results.get('accuracy', 'test_accuracy')]
  lines.append(f'Cells: mean [95% t-interval] over the seeds of {what}: '
               + '; '.join(f'{HEADERS[k]} = {stats.METRICS[k]}' for k in shown)
               + f'. Rows are ranked by {HEADERS.get(metric, metric)}, rows with diverged seeds '
               'last.')
  return lines


def markdown(results) -> str:
  """Every scenario of a preset's results (experiments/presets.py run_preset): the results
  table, then the paired differences of the reported metric to the reference methods."""
  metric = results['metric']
  lines = [f'### Results, mode `{results["mode"]}`, {results["date"]}', '']
  lines += [' '.join(protocol_lines(results)), '']
  if results.get('cuts'):
    lines += [f'Departures from the paper ({results["mode"]} mode): '
              + '; '.join(results['cuts']) + '.', '']
  if any(r.get('warnings') for rows in results['scenarios'].values() for r in rows):
    lines += [LEGEND, '']
  for scen, rows in results['scenarios'].items():
    lines += [f'#### {scen}', ''] + _results_rows(rows, metric)
    refs = results.get('references') or []
    diffs = differences(rows, metric, refs) if refs else {}
    shown = [ref for ref in refs if any(ref in d for d in diffs.values())]
    if shown:
      lines += ['', f'Paired differences in {HEADERS.get(metric, metric)} (method − reference, '
                'over the seeds both ran: same partitions, validation split and initial '
                'model), mean [95% t-interval]; "within noise" when the interval holds 0.', '',
                '| method | ' + ' | '.join(f'− {ref}' for ref in shown) + ' |',
                '|---|' + '---|' * len(shown)]
      for r in sorted(rows, key=lambda r: _rank(r, metric)):
        lines.append(f'| {r["method"]} | ' + ' | '.join(
            stats.fmt_difference(diffs[r['method']].get(ref)) for ref in shown) + ' |')
    lines.append('')
  return '\n'.join(lines) + '\n'


def _mean(stat):
  return stat['mean'] if stat.get('mean') is not None else -math.inf


def _rank(row, metric):
  """Table order: rows whose seeds all finished first, each group by mean `metric`, best first
  (a mean over the seeds that survived divergence is not comparable with a full one)."""
  return bool(row.get('diverged')), -_mean(row[metric])


def _results_rows(rows, metric):
  at = list(rows[0].get('at', {}))
  val = any('at_best_val' in r for r in rows)
  cols = list(COLUMNS) + [k for k in OPTIONAL if k == metric] + (['at_best_val'] if val else [])
  lines = ['| method | chosen | selected on | chosen on test | seeds | '
           + ' | '.join(HEADERS[k] for k in cols) + ' | rounds to target (reached) |'
           + ''.join(f' round {t} |' for t in at),
           '|---|---|---|---|---|' + '---|' * (len(cols) + 1) + '---|' * len(at)]
  for r in sorted(rows, key=lambda r: _rank(r, metric)):
    rt = r['rounds_to_target']
    reach = (f'{rt["mean"]:.0f} ({rt["reached"]})' if rt['mean'] is not None
             else f'– ({rt["reached"]})')
    on_test = r.get('chosen_on_test', r['chosen'])
    same = on_test == r['chosen']
    lines.append(f'| {r["method"]}{f" {MARK}" if r.get("warnings") else ""} | '
                 f'{_point(r["chosen"])} | {r.get("select_on", "test")} | '
                 f'{"same" if same else _point(on_test)} | {len(r["seeds"])}'
                 + (f' ({r["diverged"]} diverged)' if r.get('diverged') else '') + ' | '
                 + ' | '.join(_cell(r.get(k)) for k in cols) + f' | {reach} |'
                 + ''.join(f' {_cell(r["at"][t])} |' for t in at))
  return lines


def _point(point):
  return ', '.join(f'{k}={v:g}' for k, v in point.items()) or '–'

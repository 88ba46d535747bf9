"""The results of a run (simulation.run): per-run and per-grid-point summaries, the one grid
selection rule and the one seed statistic (which the presets' tables and compare.py use too),
the run directory's result files, its plots and the closing report.

Run directory (the same layout for one run and for many):
  config.json    the resolved config, the runs (seed and grid values) and derived settings
  runs.csv       one row per run: seed, grid values, status, diverged round, final/best/...
  metrics.csv    one row per run and evaluation: test accuracy and loss, best so far
  rounds.csv     one row per run and round: drift diagnostics (and algorithm diagnostics)
  shifts.csv     --scenario=concept_shift: one row per run and shift, with its recovery
  summary.json   per run and per grid point (mean +- std over the seeds that did not diverge);
                 with one run, that run's metrics are also at the top level; with several
                 grid points, the selection within each scenario (selected_per_scenario:
                 the hyperparameters chosen at each alpha, E, K; selected: the one selection
                 when the grid has no scenario axes); warnings: the
                 sanity checks a run failed (sanity_warnings), after a partition that leaves
                 some test class to no client (splits.coverage_warning)
  accuracy.png, drift.png, partition.png, checkpoints/, personalization.csv (calibrate)
  .fedjax-drift.json  the run's record (rundir.Record): run id, flags' hash, every entry the
                 run created there; --overwrite, --resume and clean-up touch only those

This module never imports simulation.py (simulation imports it).
"""
import json
import math
import os

import jax
import numpy as np

from fedjax_drift import (algorithms, evaluation, metrics, personalize, registry, report, splits,
                          stats, tensorboard)
from fedjax_drift.algorithms import dp
from fedjax_drift.config import SCENARIO_AXES
from fedjax_drift.data import federated
from fedjax_drift.errors import DivergenceError

# Per-round values that describe the run so far (rounds.csv): each evaluation's row of
# metrics.csv carries the value of its round, and the summary the last one as final_<name>.
CARRIED_COLUMNS = ('dp_epsilon',)

SHIFT_COLUMNS = ('run', 'seed', 'round', 'kind', 'classes', 'pre_shift_accuracy', 'best_since',
                 'mean_since', 'evaluations_since', 'until_round', 'rounds_to_recover')


# Statistics over seeds and grid selection: one implementation for every caller.

def seed_stats(values) -> dict:
  """One metric over seeds: stats.interval's {'mean', 'lo', 'hi', 'n'} (the mean and 95%
  t-interval of the finite values, clipped to [0, 1] by stats.clip_unit: lo = hi = None with
  one value, mean None too with none) and 'std' (ddof=0: the spread of these seeds; None
  without a finite value). values: one accuracy in [0, 1] per seed; None and nan (a diverged
  seed) are left out."""
  ci = stats.clip_unit(stats.interval(values))
  finite = [v for v in values if v is not None and math.isfinite(v)]
  return {**ci, 'std': float(np.std(finite)) if finite else None}


def _summary_stats(values):
  """seed_stats in summary.json's shape: {'mean', 'std', 'ci95': [lo, hi] or None}."""
  s = seed_stats(values)
  return {'mean': s['mean'], 'std': s['std'],
          'ci95': None if s['lo'] is None else [s['lo'], s['hi']]}


def competing(points) -> list:
  """The grid points a selection chooses among: those with the fewest diverged seeds.
  points: dicts whose 'diverged' counts the point's diverged seeds (absent: none); not empty.
  A mean over the seeds that survived would flatter a point that lost some, so such a point
  competes only when every point lost as many."""
  least = min(p.get('diverged', 0) for p in points)
  return [p for p in points if p.get('diverged', 0) == least]


def select_point(points, score):
  """The one grid-selection rule (summary.json's 'selected', tables.select): among
  competing(points), the point with the highest score(point), a mean over seeds; None and nan
  scores are skipped and the first of equals wins (stats.best_point). None when no competing
  point has a score."""
  return stats.best_point(competing(points), score)


def selected(select_on, groups) -> dict:
  """summary.json 'selected': the grid point with the best mean last-10% accuracy on the
  validation split (select_on='validation') or on the test set ('test'), chosen by
  select_point among grid_summaries' `groups`, with that point's test final, best and
  last-10% mean statistics."""
  key = ('val_' if select_on == 'validation' else '') + 'last10_mean_accuracy'
  chosen = select_point(groups, lambda g: g[key]['mean'])
  tested = ('final_accuracy', 'best_accuracy', 'last10_mean_accuracy')
  return {'select_on': select_on, 'by': key,
          'grid_point': chosen['grid_point'] if chosen is not None else None,
          **{k: chosen[k] if chosen is not None else None for k in tested}}


def scenario_of(point) -> dict:
  """The scenario axes' values of a grid point ({flag: value}, config.SCENARIO_AXES: the
  data's heterogeneity, the cohort size, the local work), in the point's order."""
  return {k: v for k, v in point.items() if k in SCENARIO_AXES}


def by_scenario(groups) -> list:
  """[(scenario, its groups)]: grid_summaries' groups (or anything with a 'grid_point')
  grouped by scenario_of their point, scenarios in first-seen order. A grid without
  scenario axes is one scenario, {}."""
  out = {}
  for g in groups:
    scenario = scenario_of(g['grid_point'])
    out.setdefault(tuple(scenario.items()), (scenario, []))[1].append(g)
  return list(out.values())


def selected_per_scenario(select_on, groups) -> list:
  """summary.json 'selected_per_scenario': selected() within each scenario of `groups`, as
  [{'scenario': {flag: value}, 'points': how many it chose among, **selected(...)}]. The
  hyperparameters are chosen at each scenario (the best lr at each alpha), never across
  scenarios: a point's score at another alpha says nothing about this one."""
  return [{'scenario': scenario, 'points': len(mine), **selected(select_on, mine)}
          for scenario, mine in by_scenario(groups)]


def grid_points(specs) -> list:
  """The distinct grid points ({flag: value}) of a study's run specs, in run order."""
  return list({tuple(s.point.items()): dict(s.point) for s in specs}.values())


def grid_summaries(points, per_run, validation=False) -> list:
  """summary.json 'grid_points': per grid point of `points` (grid_points), its seeds, how many
  diverged, and the mean, std (ddof=0: the spread of these seeds) and 95% t-interval ('ci95':
  [lo, hi], None with one seed) of each metric over its seeds that did not diverge.
  per_run: run_summary of every run; validation: the runs have a validation split."""
  groups = []
  for point in points:
    mine = [r for r in per_run if all(r[k] == v for k, v in point.items())]
    ok = [r for r in mine if r['status'] == 'ok']
    group = {'grid_point': point, 'seeds': len(mine), 'diverged': len(mine) - len(ok)}
    keys = ('final_accuracy', 'best_accuracy', 'last10_mean_accuracy', 'mean_best_accuracy')
    for key in keys + (stats.VALIDATION_KEYS if validation else ()):
      group[key] = _summary_stats([r[key] for r in ok])
    reached = [r['rounds_to_target'] for r in ok if r['rounds_to_target'] is not None]
    group['rounds_to_target'] = {'reached': f'{len(reached)}/{len(mine)}',
                                 'mean': float(np.mean(reached)) if reached else None}
    shifted = [r['concept_shift'] for r in ok if r.get('concept_shift')]
    if shifted:  # shifts over the seeds: how many were recovered from, how many never
      group['concept_shift'] = {k: sum(c[k] for c in shifted) for k in (
          'shift_count', 'recovered', 'never_recovered', 'unmeasured')}
    groups.append(group)
  return groups


# One run's results.

def carried(round_rows, run, round_) -> dict:
  """{column: value} of the CARRIED_COLUMNS in `run`'s rounds.csv row of round `round_` (the
  rows are in round order; {} when there is none, e.g. at round 0)."""
  for row in reversed(round_rows):
    if row['run'] == run and row['round'] == round_:
      return {k: row[k] for k in CARRIED_COLUMNS if k in row}
  return {}


def sanity_warnings(rounds, test_accuracy, test_loss, val_accuracy=None, train_loss=None):
  """One line per sanity check one run fails (issue 43 item 5), [] when it passes them all:
  its validation or test accuracy exactly 0 (or exactly 1) at every evaluation after round 0
  (the initial model's round 0 when there is no other), its test loss the same at every
  evaluation from round 0 on (two or more), or its training loss the same in every round
  (two or more). These say a split, a label or a step is broken, not that a method is poor:
  nothing is refused, the run's summary.json lists them, the run ends with one line, and
  compare and the presets' tables mark its rows. rounds, test_accuracy, test_loss,
  val_accuracy: one value per evaluation (metrics.csv's columns; val None or [] without a
  split); train_loss: one value per round (rounds.csv's)."""
  out = []
  later = [i for i, t in enumerate(rounds) if t > 0] or list(range(len(rounds)))
  span = (f'round {rounds[later[0]]}' if len(later) == 1
          else f'{len(later)} evaluations, rounds {rounds[later[0]]}-{rounds[later[-1]]}')
  for values, what in ((val_accuracy, 'validation accuracy'), (test_accuracy, 'test accuracy')):
    values = [float(values[i]) for i in later] if values else []
    for stuck in (0.0, 1.0):
      if values and all(v == stuck for v in values):
        out.append(f'{what} is exactly {stuck:g} at every evaluation ({span})')
  losses = [float(v) for v in test_loss]
  if len(losses) > 1 and all(v == losses[0] for v in losses):
    out.append(f'test loss is {losses[0]:.6g} at every evaluation from round {rounds[0]} on '
               f'({len(losses)}): the model does not change')
  train = [float(v) for v in train_loss or ()]
  if len(train) > 1 and all(v == train[0] for v in train):
    out.append(f'training loss is {train[0]:.6g} in every round ({len(train)}) from the first')
  return out


def run_warnings(per_run, labels=None) -> list:
  """summary.json's top-level 'warnings': each run's sanity_warnings, named by its run
  (labels: {run: label}) when there are several."""
  if len(per_run) == 1:
    return list(per_run[0].get('warnings') or [])
  return [f'run {r["run"]}' + (f' ({labels[r["run"]]})' if labels else '') + f': {w}'
          for r in per_run for w in r.get('warnings') or []]


def recorded_warnings(run_dir) -> dict:
  """{run: its sanity_warnings} as the run directory's summary.json records them, for the
  runs that do (a directory written before the checks: {}); {} without a readable one."""
  try:
    with open(os.path.join(run_dir, 'summary.json')) as f:
      runs = json.load(f).get('runs', [])
    return {int(r['run']): list(r['warnings']) for r in runs
            if isinstance(r, dict) and isinstance(r.get('warnings'), list)}
  except (OSError, ValueError, KeyError, TypeError, AttributeError):
    return {}


def run_summary(study, prog, spec) -> dict:
  """summary.json's entry (and runs.csv's row) of the run `spec`: seed, grid values, status
  and, from the host loop's record `prog` (its eval_rows, round_rows and diverged runs), the
  run's metrics; a diverged run has None for each."""
  cfg = study.config
  rows = [row for row in prog.eval_rows if row['run'] == spec.index]
  base = {'run': spec.index, 'seed': spec.seed, **spec.point}
  if spec.index in prog.diverged:
    rnd, client = prog.diverged[spec.index]
    keys = ('final_accuracy', 'final_loss', 'best_accuracy', 'mean_best_accuracy',
            'last10_mean_accuracy', 'rounds_to_target')
    keys += stats.VALIDATION_KEYS if cfg.has_validation else ()
    # target_accuracy too: runs.csv's header comes from the first run, which may diverge
    return {**base, 'status': 'diverged', 'diverged_round': rnd, 'diverged_client': client,
            **{k: None for k in keys}, 'target_accuracy': cfg.target_accuracy}
  result = metrics.summarize([r['round'] for r in rows], [r['test_accuracy'] for r in rows],
                             [r['test_loss'] for r in rows], cfg.rounds, cfg.target_accuracy)
  if cfg.has_validation:  # runs.csv gains the validation curve's metrics
    result.update(stats.validation_summary([r['round'] for r in rows],
                                           [r['test_accuracy'] for r in rows],
                                           [r['val_accuracy'] for r in rows], cfg.rounds))
  domains = {k: v for k, v in rows[-1].items() if k.startswith('acc_domain_')}
  result.update({f'final_{k}': v for k, v in
                 carried(prog.round_rows, spec.index, rows[-1]['round']).items()})
  if domains:  # metrics.csv has every evaluation's; the summary keeps the final ones
    result['final_domain_accuracy'] = domains
  if 'global_client_mean_accuracy' in rows[-1]:  # a personalised method: both models
    result['final_global_vs_personal'] = {
        'personal': rows[-1]['client_mean_accuracy'],
        'global': rows[-1]['global_client_mean_accuracy']}
  if cfg.scenario == 'concept_shift':
    shifts = concept_shifts(prog, spec.index, cfg.concept_shift_kind)
    result['concept_shifts'] = shifts
    result['concept_shift'] = metrics.concept_shift_metrics(
        [r['round'] for r in rows], [r['test_accuracy'] for r in rows], shifts)
  result['warnings'] = sanity_warnings(
      [r['round'] for r in rows], [r['test_accuracy'] for r in rows],
      [r['test_loss'] for r in rows], [r['val_accuracy'] for r in rows if 'val_accuracy' in r],
      [r['train_loss'] for r in prog.round_rows if r['run'] == spec.index and 'train_loss' in r])
  return {**base, 'status': 'ok', 'diverged_round': None, 'diverged_client': None, **result}


def concept_shifts(prog, run, kind) -> list:
  """[{round, kind, class, new_label[, other_class]}] of a run, from the scenario's per-round
  diagnostics (rounds.csv): the shifts as the compiled rounds drew them. other_class: the
  class a swap exchanged labels with."""
  shifts = []
  for r in prog.round_rows:
    if r['run'] == run and r.get('shift_class', -1) >= 0:
      shift = {'round': r['round'], 'kind': kind, 'class': int(r['shift_class']),
               'new_label': int(r['shift_label'])}
      if kind == 'swap':
        shift['other_class'] = int(r['shift_other'])
      shifts.append(shift)
  return shifts


def shift_rows(per_run) -> list:
  """shifts.csv: one row per run and shift; classes 'c->l' (class c now labelled l) or
  'c<->d' (a swap); rounds_to_recover is a number, 'never' (not within the shift's window)
  or 'unmeasured' (no evaluation before the shift or in its window)."""
  rows = []
  for run in per_run:
    for s in (run.get('concept_shift') or {}).get('shifts', []):
      classes = (f"{s['class']}<->{s['other_class']}" if s['kind'] == 'swap'
                 else f"{s['class']}->{s['new_label']}")
      outcome = {True: s['rounds_to_recover'], False: 'never', None: 'unmeasured'}
      rows.append({'run': run['run'], 'seed': run['seed'], 'round': s['round'],
                   'kind': s['kind'], 'classes': classes,
                   **{k: s[k] for k in SHIFT_COLUMNS[5:-1]},
                   'rounds_to_recover': outcome[s['recovered']]})
  return rows


def log_shifts(per_run, log):
  """One line per run: how many shifts it recovered from, and how fast."""
  for run in per_run:
    cs = run.get('concept_shift')
    if not cs:
      continue
    mean = cs['mean_rounds_to_recover']
    which = f' (run {run["run"]})' if len(per_run) > 1 else ''
    log(f'concept shift{which}: '
        f'{cs["shift_count"]} shift(s), {cs["recovered"]} recovered'
        + (f' (mean {mean:.1f} rounds)' if mean is not None else '')
        + f', {cs["never_recovered"]} never, {cs["unmeasured"]} unmeasured; average best '
        f'since the last shift {cs["average_best_since_shift"]:.4f} -> shifts.csv')


# The whole study's results.

def communication_bytes(floats, server, params) -> dict:
  """{'down', 'up'}: bytes one participating client receives and sends per round. floats:
  the algorithm's message sizes (FederatedAlgorithm.communication), 4 bytes per float32; a
  compressing part (--local_terms=topk|qsgd, algorithms/compression.py) replaces the delta's
  share of 'up' by its own count, the bytes_per_client in its server buffer (`server`), the
  figure rounds.csv's upload_bytes sums over the cohort."""
  up = 4 * floats['up']
  for buffer in server.values() if isinstance(server, dict) else ():
    if isinstance(buffer, dict) and 'bytes_per_client' in buffer:
      up += int(buffer['bytes_per_client']) - 4 * sum(a.size for a in jax.tree.leaves(params))
  return {'down': 4 * floats['down'], 'up': up}


def summary(study, per_run, run_dir, compiled, total_s, train_s) -> dict:
  """summary.json: the study's settings, timings (compiled: simulation.Compiled), every run
  (run_summary), every grid point (grid_summaries), the selected point when there are several
  and, with one run, that run's metrics at the top level."""
  cfg, exp = study.config, study.experiments[0]
  sent = communication_bytes(exp.algo.communication(exp.state.params), exp.state.server,
                             exp.state.params)
  comm = {k: v // 4 if v % 4 == 0 else v / 4 for k, v in sent.items()}  # float32 words
  out = {
      'algo': cfg.algo, 'dataset': exp.dataset.name, 'rounds': cfg.rounds,
      # which model the accuracies are for (evaluation.SCORED): the global one, or each
      # client's own (personal, or the global weights with its own BatchNorm layers)
      'eval_protocol': compiled.evaluate.protocol,
      'scored_model': evaluation.scored_model(compiled.evaluate.protocol),
      'weighting': algorithms.weighting(cfg),
      'weighting_source': algorithms.weighting_source(cfg), 'num_runs': len(study.runs),
      'seeds': sorted({s.seed for s in study.runs}),
      'grid': {k: sorted({s.point[k] for s in study.runs}) for k in study.runs[0].point},
      'communication_floats_per_client': comm,
      'communication_floats_per_round': {k: v * cfg.clients_per_round for k, v in comm.items()},
      'communication_bytes_per_client': sent,
      'communication_bytes_per_round': {k: v * cfg.clients_per_round for k, v in sent.items()},
      'wall_time_s': total_s, 'train_time_s': train_s, 'compile_s': compiled.compile_s,
      'memory_estimate_bytes': compiled.memory_bytes,
      'segment_compilations': 1,  # compiled ahead of time; every call reuses it
      'cohort_chunk': exp.chunk, 'strategy': exp.strategy, 'run_chunk': study.width,
      'conv_impl': conv_impl(exp),
      'per_client_state_bytes': federated.nbytes(exp.state.clients),
      'run_dir': run_dir,
      'runs': per_run,
      'grid_points': grid_summaries(grid_points(study.runs), per_run, cfg.has_validation),
  }
  if len(out['grid_points']) > 1:
    per_scenario = selected_per_scenario(cfg.resolved_select_on(), out['grid_points'])
    out['selected_per_scenario'] = per_scenario
    if len(per_scenario) == 1:  # one scenario: its selection is the study's
      out['selected'] = selected(cfg.resolved_select_on(), out['grid_points'])
  if len(study.runs) == 1:
    out.update({k: v for k, v in per_run[0].items() if k not in ('run', 'seed')})
  # the data's warnings, before the runs'
  uncovered = splits.coverage_warning(cfg.partition, study.experiments)
  out['warnings'] = ([w.removeprefix('warning: ') for w in (uncovered, dp_warning(study))
                      if w] + run_warnings(per_run, {s.index: run_label(s) for s in study.runs}))
  return out


def dp_warning(study) -> str:
  """dp.noise_warning for the study's DP aggregator (--algo=dp_fedavg, --aggregator=
  dp_gaussian), '' otherwise: the run says it before training and summary.json lists it."""
  cfg, exp = study.config, study.experiments[0]
  return dp.noise_warning(algorithms.recipe(cfg).aggregator, cfg.dp_clip, cfg.dp_noise,
                          cfg.clients_per_round,
                          sum(int(np.size(a)) for a in jax.tree.leaves(exp.state.params)))


def write(run_dir, summary_, per_run, log, concept_shift):
  """runs.csv (the runs' scalar columns), summary.json and, with concept_shift (the run's
  --scenario=concept_shift), shifts.csv and one line per run about its shifts."""
  report.write_csv(os.path.join(run_dir, 'runs.csv'),
                   [{k: v for k, v in r.items() if not isinstance(v, (dict, list))}
                    for r in per_run])
  report.write_json(os.path.join(run_dir, 'summary.json'), summary_)
  if concept_shift:
    report.write_csv(os.path.join(run_dir, 'shifts.csv'), shift_rows(per_run), SHIFT_COLUMNS)
    log_shifts(per_run, log)


def write_metrics(run_dir, prog):
  """metrics.csv and rounds.csv from the host loop's record `prog`, its diagnostics' files,
  and with --tensorboard the rows added since the last call."""
  # round 0's rows have no CARRIED_COLUMNS yet: the header is every row's keys, in order
  report.write_csv(os.path.join(run_dir, 'metrics.csv'), prog.eval_rows,
                   list(dict.fromkeys(k for row in prog.eval_rows for k in row)))
  report.write_csv(os.path.join(run_dir, 'rounds.csv'), prog.round_rows)
  if prog.diag:
    prog.diag.write()
  if prog.study.config.tensorboard:
    _write_tensorboard(run_dir, prog)


def _write_tensorboard(run_dir, prog):
  """The rows added since the last call, as scalars in RUN_DIR/tensorboard/run<r>."""
  for rows, prefix, key in ((prog.eval_rows, 'eval/', 'eval'), (prog.round_rows, 'train/',
                                                                'rounds')):
    for row in rows[prog.tensorboard_written[key]:]:
      r = row['run']
      if r not in prog.tensorboard_writers:
        report.will_create(os.path.join(run_dir, 'tensorboard'))  # enter it in the record
        prog.tensorboard_writers[r] = tensorboard.ScalarWriter(
            os.path.join(run_dir, 'tensorboard', f'run{r}'))
      prog.tensorboard_writers[r].write({k: v for k, v in row.items() if k != 'run'},
                                        tag_prefix=prefix)
    prog.tensorboard_written[key] = len(rows)
  for writer in prog.tensorboard_writers.values():
    writer.flush()


def conv_impl(exp):
  """The convolution implementation that ran (--conv_impl resolved), None without convolutions."""
  return exp.model.conv_impl if exp.model.family == 'conv' else None


def label(point, algo) -> str:
  """'lr=0.1, beta=0.5': a grid point as plots and logs name it (--algo without one)."""
  return ', '.join(f'{k}={v:g}' for k, v in point.items()) or algo


def run_label(spec) -> str:
  """'seed 0, lr=2.5': a run as the warnings name it."""
  return ', '.join([f'seed {spec.seed}'] + [f'{k}={v:g}' for k, v in spec.point.items()])


def _point_line(group) -> str:
  """'final 0.7000 +- 0.0100, best 0.7200 +- 0.0050 over 3 seeds' for a grid_summaries
  group; one seed: 'final 0.7000, best 0.7200 (1 seed)', no spread to show."""
  n, final, best = group['seeds'] - group['diverged'], group['final_accuracy'], \
      group['best_accuracy']
  if n == 1:
    return f'final {final["mean"]:.4f}, best {best["mean"]:.4f} (1 seed)'
  return (f'final {final["mean"]:.4f} +- {final["std"]:.4f}, best {best["mean"]:.4f} +- '
          f'{best["std"]:.4f} over {stats.seeds_words(n)}')


def plot(study, prog, run_dir):
  """accuracy.png (one run's curve with its shifts marked, or each grid point's mean +- std
  over its seeds that did not diverge) and drift.png (the first run's diagnostics)."""
  cfg, ds = study.config, study.experiments[0].dataset
  title = f'{cfg.algo} on {ds.name} ({cfg.partition})'
  if len(study.runs) == 1:
    rows = prog.eval_rows
    accs = [r['test_accuracy'] for r in rows]
    report.plot_accuracy(os.path.join(run_dir, 'accuracy.png'), [r['round'] for r in rows],
                         accs, metrics.best_so_far(accs), title,
                         # the shift of round r falls between the evaluations r-1 and r
                         marks=[shift['round'] - 0.5 for shift in
                                concept_shifts(prog, 0, cfg.concept_shift_kind)],
                         diverged_at=prog.diverged[0][0] if 0 in prog.diverged else None)
  else:
    curves = {}
    for point in grid_points(study.runs):
      runs = [s.index for s in study.runs if s.point == point and s.index not in prog.diverged]
      mine = [r for r in prog.eval_rows if r['run'] in runs]
      if not mine:
        continue
      rounds = sorted({r['round'] for r in mine})
      acc = np.array([[r['test_accuracy'] for r in mine if r['round'] == t] for t in rounds])
      curves[label(point, cfg.algo)] = (rounds, acc.mean(1), acc.std(1))
    if curves:  # no curve when every run diverged
      report.plot_mean_curves(os.path.join(run_dir, 'accuracy.png'), curves,
                              f'{title}: {len(study.runs)} runs')
  first = [r for r in prog.round_rows if r['run'] == prog.round_rows[0]['run']] \
      if prog.round_rows else []
  if first:
    report.plot_drift(os.path.join(run_dir, 'drift.png'), first)


def personalize_all(study, state, per_run, run_dir, log):
  """--personalize=calibrate: each run that did not diverge calibrated on every client;
  personalization.csv (one row per run and client) and each run's summary 'personalization'
  (per_run's entries gain it)."""
  rows = []
  for spec, run_ in zip(study.runs, per_run):
    if run_['status'] != 'ok':
      continue
    exp = study.experiments[spec.index]
    params = jax.tree.map(lambda a, i=spec.index: a[i], state.params)
    before, after, num_test = _calibrate(exp, params)
    rows += [{'run': spec.index, 'client': i, 'num_test': int(n),
              'global_model_accuracy': float(b), 'calibrated_accuracy': float(a)}
             for i, (b, a, n) in enumerate(zip(before, after, num_test))]
    result = personalize.summarize(before, after, num_test)
    run_['personalization'] = result
    log(f'personalisation (run {spec.index}): per-client accuracy '
        f'{result["global_model_mean_accuracy"]:.4f} +- {result["global_model_std_accuracy"]:.4f}'
        f' (global model) -> {result["calibrated_mean_accuracy"]:.4f} +- '
        f'{result["calibrated_std_accuracy"]:.4f} (calibrated) over '
        f'{result["clients_evaluated"]} clients')
  report.write_csv(os.path.join(run_dir, 'personalization.csv'), rows)


def _calibrate(exp, params):
  calibrate, num_test = personalize.for_experiment(exp)  # --personalize_every_eval's too
  before, after = calibrate(params)
  return np.asarray(before), np.asarray(after), num_test


def target_words(rounds, target) -> str:
  """'70% reached at round 12', or '70% not reached' (rounds None), for the closing line."""
  if rounds is None:
    return f'{target:.0%} not reached'
  return f'{target:.0%} reached at round {rounds}'


def privacy_words(run, delta) -> str:
  """', epsilon 2.31 at delta 1e-05' for a run whose summary has final_dp_epsilon (DP-FedAvg,
  --aggregator=dp_gaussian; delta: --dp_delta), for the closing line; '' for any other run."""
  epsilon = run.get('final_dp_epsilon')
  if epsilon is None:
    return ''
  return f', epsilon {epsilon:.4g} at delta {delta:g}'


def report_end(study, summary_, per_run, total_s, compile_s, log) -> dict:
  """The closing lines: one run's metrics, or each grid point's and the selected one; a
  warning naming the diverged runs. Returns summary_; raises DivergenceError when every run
  diverged."""
  cfg = study.config
  timing = f'{total_s:.1f}s in all ({compile_s:.1f}s compiling)'
  ok = [r for r in per_run if r['status'] == 'ok']
  if len(per_run) == 1 and ok:
    r = ok[0]
    log(f'done: final accuracy {r["final_accuracy"]:.4f}, best {r["best_accuracy"]:.4f}, '
        f'last-10% mean {r["last10_mean_accuracy"]:.4f}, '
        f'{target_words(r["rounds_to_target"], cfg.target_accuracy)}'
        f'{privacy_words(r, cfg.dp_delta)}; {timing} -> {summary_["run_dir"]}')
  elif ok:
    for g in summary_['grid_points']:
      if g['final_accuracy']['mean'] is None:
        continue
      log(f'{label(g["grid_point"], cfg.algo)}: {_point_line(g)}'
          + (f' ({g["diverged"]} diverged)' if g['diverged'] else ''))
    for chosen in summary_.get('selected_per_scenario', []):
      if chosen['grid_point'] is not None and chosen['points'] > 1:
        log(selection_line(chosen, cfg.algo))
    log(f'done: {len(per_run)} runs; {timing} -> {summary_["run_dir"]}')
  if summary_.get('warnings'):  # one line, whatever the count: summary.json has them all
    log(f'warning: sanity check{"s" * (len(summary_["warnings"]) > 1)} failed: '
        + '; '.join(summary_['warnings']) + ' (summary.json warnings)')
  bad = [r for r in per_run if r['status'] == 'diverged']
  if bad and not ok:
    raise DivergenceError(divergence_message(bad, summary_['run_dir'], cfg.algo, cfg.lr,
                                             lambda k: getattr(cfg, k)))
  if bad:
    log(f'warning: {len(bad)} of {len(per_run)} runs diverged: '
        + '; '.join(f'run {r["run"]} ({run_label(study.runs[r["run"]])}) in round '
                    f'{r["diverged_round"]}' for r in bad))
  return summary_


def selection_line(chosen, algo) -> str:
  """'selected at dirichlet_alpha=0.1 on validation (...): lr=0.1; its test last-10% mean
  0.8000 [0.7900, 0.8100]' for a selected_per_scenario entry (no 'at' without scenario axes)."""
  test, scenario = chosen['last10_mean_accuracy'], chosen.get('scenario') or {}
  rest = {k: v for k, v in chosen['grid_point'].items() if k not in scenario}
  where = f' at {label(scenario, algo)}' if scenario else ''
  return (f'selected{where} on {chosen["select_on"]} ({chosen["by"]}): {label(rest, algo)}; '
          f'its test last-10% mean {test["mean"]:.4f}'
          + (f' [{test["ci95"][0]:.4f}, {test["ci95"][1]:.4f}]' if test['ci95'] else ''))


def divergence_message(bad, run_dir, algo, lr, value_of) -> str:
  """The DivergenceError's one line for runs that all diverged: `bad`, their summary.json
  records (diverged_round, diverged_client), written to `run_dir` by --algo `algo` at --lr
  `lr`, value_of(flag) the run's other values; names the round, the last checkpoint from
  before it and the flags to lower."""
  hint = f'lower --lr (now {lr:g}){_own_knobs(algo, value_of)} or check the data'
  first = min(r['diverged_round'] for r in bad)
  note = _checkpoint_note(run_dir, first)
  if len(bad) == 1:
    r = bad[0]
    where = f', first at client {r["diverged_client"]}' if r['diverged_client'] >= 0 else ''
    return (f'diverged: non-finite global model or client update in round '
            f'{r["diverged_round"]}{where}; {note}; {hint}')
  return f'every run diverged (first in round {first}); {note}; {hint}'


def _own_knobs(algo, value_of):
  """', --for_alpha (now 5), --for_scale (now paper)': the flags of the run's method (its
  recipe's step_knobs) that set how far a step moves, which a divergence may come from.
  algo: --algo; value_of(flag): that flag's value in the run."""
  names = algo.split(',')
  knobs = [k for n in names if registry.find('algorithm', n) is not None
           for k in algorithms.recipes.get(n).step_knobs]
  now = lambda v: f'{v:g}' if isinstance(v, float) else v
  return ''.join(f', --{k} (now {now(value_of(k))})' for k in dict.fromkeys(knobs))


def checkpoint_rounds(run_dir) -> list:
  """Rounds with a checkpoint directory in run_dir/checkpoints (orbax renames each into place
  when complete), sorted; [] without one. Reads the directory only, not orbax (its import
  takes seconds)."""
  directory = os.path.join(run_dir, 'checkpoints')
  return sorted(int(d) for d in os.listdir(directory) if d.isdigit()) \
      if os.path.isdir(directory) else []


def _checkpoint_note(run_dir, diverged_round):
  """Where the last checkpoint from before `diverged_round` is (a later one, which a sweep's
  other runs went on to write, holds the diverged runs)."""
  directory = os.path.join(run_dir, 'checkpoints')
  rounds = [r for r in checkpoint_rounds(run_dir) if r < diverged_round]
  if not rounds:
    return 'no checkpoint from before it is kept'
  return f'the last good checkpoint (round {rounds[-1]}) is in {directory}'

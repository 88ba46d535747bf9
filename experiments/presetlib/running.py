"""Running a preset: its live runs as Runner jobs, then results.json, table.md and the curves.

start_preset checks and submits; the finish() it returns waits for the jobs and writes the
tables, so that `all` keeps every worker busy across presets. A sweep whose resolved settings
another sweep of the same command already has reads that one's runs (presetlib/sharing.py).
The table's statistics are fedjax_drift/tables.py's.
"""
import dataclasses
import os
import time

import fedjax_drift
from fedjax_drift import report, stats, tables
from presetlib import grouping
from presetlib.documents import cuts, results_table, settings_table
from presetlib.jobs import Runner, accuracy_column, check_data, summarise
from presetlib.loading import PRESETS, ROOT
from presetlib.plans import pending_line, plan, to_config
from presetlib.sharing import Sharing
from presetlib.tiers import NO_SPLIT, SELECTION, half_round

COMMITTED = os.path.join(ROOT, 'experiments', 'results')
OVERWRITE = 'yes'  # Config.overwrite: replace only what fedjax-drift wrote
# Run flags a preset sets its own way: passing them through would break its tables.
OWN_FLAGS = {'algo': 'pick methods with --only', 'grid': 'the preset\'s tables tune its grid',
             'out': 'presets.py --out is the results directory',
             'resume': 'presets.py --resume continues the preset',
             'seeds': 'presets.py --seeds sets them',
             'overwrite': 'presets.py --overwrite starts it again'}


def default_out(name, mode):
  """Outside the repository's tracked files: runs/presets/<preset>-<mode> (runs/ is ignored)."""
  return os.path.join('runs', 'presets', f'{name}-{mode}')


def check_out(out_dir, overwrite, resume=False):
  """Refuses to replace earlier results (the committed ones above all) without --overwrite
  (start again) or --resume (keep their runs, write the tables again)."""
  if overwrite or resume or not os.path.exists(os.path.join(out_dir, 'results.json')):
    return
  where = (' (committed results of the repository)'
           if os.path.abspath(out_dir).startswith(COMMITTED + os.sep) else '')
  raise fedjax_drift.UserError(f'--out={out_dir} already holds results{where}; pass '
                               '--overwrite to replace them, --resume to keep their runs and '
                               'write the tables again, or choose another --out')


def selection_overrides(select_on='validation', val_fraction=None):
  """Config values a --select_on/--val_fraction choice sets over the preset's: the papers'
  protocol (test) holds no split out unless --val_fraction says so."""
  if select_on not in ('validation', 'test'):
    raise fedjax_drift.UserError(f'--select_on={select_on} is not one of validation, test')
  if val_fraction is not None:
    if select_on == 'validation' and not val_fraction:
      raise fedjax_drift.UserError('--select_on=validation needs --val_fraction > 0')
    return {'val_fraction': val_fraction}
  return {'val_fraction': 0.0} if select_on == 'test' else {}


def run_flags(flags):
  """{Config field: value} of run flags set over every run of a preset (`presets.py
  --image_size=32 ...`), checked: the fields that a preset's command sets in its own way are
  refused in one line, naming that way."""
  flags = dict(flags or {})
  for name, way in OWN_FLAGS.items():
    if name in flags:
      raise fedjax_drift.UserError(f'--{name} is set by the preset itself; {way}')
  fields = {f.name for f in dataclasses.fields(fedjax_drift.Config)}
  unknown = sorted(set(flags) - fields)
  if unknown:
    raise fedjax_drift.UserError(f'--{unknown[0]} is not a run flag (fedjax-drift --help)')
  return flags


def _split_values(preset, replace):
  """{'val_fraction', 'val_source'} the preset's runs use (before NO_SPLIT's fallback)."""
  values = {**SELECTION, **{k: v for k, (v, _) in preset['setting'].items()}, **replace}
  return {k: values[k] for k in ('val_fraction', 'val_source')}


def run_preset(name, mode, data_dir='', dataset='', rounds=None, seeds=None, out_root=None,
               only=None, overwrite=False, log=print, select_on='validation',
               val_fraction=None, runner=None, resume=False, flags=None, share=True,
               group=True):
  """Runs a preset's live runs; dataset/data_dir/rounds/seeds override it, `only` keeps some
  methods; select_on/val_fraction choose the selection protocol (selection_overrides);
  runner (a Runner, default one method at a time) runs the methods; flags: {Config field:
  value} set over every run (run_flags); share: sweeps with the same settings run once
  (presetlib/sharing.py; False runs each on its own); group: a method's scenarios that differ
  only in scenario axes run as one sweep (presetlib/grouping.py; False: a sweep per scenario).
  Run directories already in out_root are kept
  (finished) or resumed (interrupted) unless `overwrite`; `resume` allows an out_root that
  holds results. A preset with no live run is refused in one line naming what it needs.
  Returns the results (results.json)."""
  own = runner is None
  runner = runner or Runner(1)
  try:
    return start_preset(name, mode, data_dir, dataset, rounds, seeds, out_root, only,
                        overwrite, log, select_on, val_fraction, runner, resume, flags,
                        Sharing(runner, share), group)()
  finally:
    if own:
      runner.close()

def start_preset(name, mode, data_dir, dataset, rounds, seeds, out_root, only, overwrite, log,
                 select_on, val_fraction, runner, resume=False, flags=None, sharing=None,
                 group=True):
  """run_preset's checks, then its methods submitted to `runner` through `sharing` (a
  sharing.Sharing: one per command shares runs across its presets; default, one for this
  preset; `group`: its scenarios run as few sweeps as their axes allow, presetlib/grouping.py);
  returns finish(), which waits for them and writes results.json, table.md and the
  curves (so `all` keeps every worker busy across presets)."""
  preset = PRESETS[name]
  out_dir = out_root or default_out(name, mode)
  flags = run_flags(flags)
  replace = {**({'dataset': dataset} if dataset else {}),
             **({'data_dir': data_dir} if data_dir else {}),
             **selection_overrides(select_on, val_fraction), **flags}
  rows = plan(name, mode, only, rounds, seeds, replace)
  live = [(s, m, to_config(v, g, n)) for s, m, v, g, n, r in rows if not r]
  if not live:
    raise fedjax_drift.UserError(f'preset {name} is {pending_line(name, mode, only, rows)}')
  check_out(out_dir, overwrite, resume)
  for ds, dd in {(c.dataset, c.data_dir) for _, _, c in live}:
    try:
      check_data(ds, dd)
    except fedjax_drift.UserError as e:
      raise fedjax_drift.UserError(f'preset {name} ({mode}) needs --dataset={ds}: {e}') from None
  os.makedirs(out_dir, exist_ok=True)
  changed = ([f'dataset {dataset} instead of the paper\'s'] if dataset else []) + \
      ([f'only the methods {", ".join(only)}'] if only else []) + \
      (['run flags set on the command line: ' + ' '.join(
          f'--{k}={v}' for k, v in sorted(flags.items()))] if flags else [])
  skipped = [f'{m} @ {s} ({"; ".join(r)})' for s, m, _, _, _, r in rows if r]
  accuracy = {accuracy_column(c) for *_, c in live}
  if len(accuracy) > 1:  # one table, one kind of accuracy
    raise fedjax_drift.UserError(f'preset {name} mixes runs reported by {sorted(accuracy)}')
  results = {'preset': name, 'mode': mode, 'title': preset['title'], 'paper': preset['paper'],
             'metric': preset['metric'], 'accuracy': accuracy.pop(),
             'cuts': cuts(name, mode, rounds, seeds) + changed +
             ([f'pending, not run: {", ".join(skipped)}'] if skipped else []),
             'date': time.strftime('%Y-%m-%d'), 'scenarios': {},
             'selection': {'select_on': select_on, **_split_values(preset, replace),
                           'fallback': NO_SPLIT},
             'references': tables.reference_methods(
                 {label: m['algo'] for label, m in preset['methods'].items()
                  if not only or label in only}, preset['paper'])}
  live = [(scenario, label, dataclasses.replace(
      config, progress=False, overwrite=OVERWRITE if overwrite else '', out=os.path.join(
          out_dir, 'runs', f'{scenario}-{label}'.replace(' ', '_').replace('/', '_'))))
          for scenario, label, config in live]
  sharing = sharing or Sharing(runner)
  sweeps = lambda label: preset['methods'][label]['sweep']
  groups = grouping.group(live, sweeps, out_dir, group)
  futures, shared = [None] * len(live), {}
  for g in groups:
    future, first = sharing.submit(g.config, sweeps(live[g.members[0]][1]))
    for i in g.members:
      futures[i] = (future, g)
      shared.update({i: first} if first else {})
      if g.axes:  # the scenario's runs are in the group's directory
        live[i] = (live[i][0], live[i][1], dataclasses.replace(live[i][2], out=g.config.out))
  results['shared_sweeps'] = len(shared)
  results['programs'] = len(groups)
  log(f'{name} ({mode}): {len(live)} method sweep(s) as {len(groups)} program(s) into {out_dir}'
      + (f' ({len(shared)} read the runs of an earlier sweep with the same settings)'
         if shared else '') + '; a rerun into it keeps the finished ones and resumes the others')
  return lambda: _finish_preset(name, mode, rounds, seeds, select_on, log, preset, out_dir,
                                results, live, [grouping.member(f.result(), c, g.axes, g.config.out)
                                                for (f, g), (_, _, c) in zip(futures, live)],
                                shared)


def _finish_preset(name, mode, rounds, seeds, select_on, log, preset, out_dir, results, live,
                   done, shared=None):
  """run_preset's tables from its methods' outcomes `done` (Runner jobs, in `live`'s order);
  shared: {index in live: the run directory it read, another sweep's}."""
  shared = shared or {}
  for i, ((scenario, label, config), (status, runs)) in enumerate(zip(live, done)):
    at = tuple(t for t in preset['report_rounds'] if t <= config.rounds)  # columns it reached
    if status == 'error':
      raise fedjax_drift.UserError(runs)
    if status == 'diverged':  # a method diverging everywhere is a result
      runs = runs.replace(shared[i], config.out) if i in shared else runs  # its own name
      runs = runs.replace(out_dir + os.sep, '')  # paths relative to the results directory
      results.setdefault('diverged', []).append(f'{label} @ {scenario}: {runs}')
      log(f'[{name}/{scenario}] {label}: every run diverged ({runs})')
      continue
    half = half_round(preset, scenario, config.rounds)  # the paper's t, else rounds // 2
    points = summarise(runs, config.rounds, config.target_accuracy, at, half)
    on = select_on if config.has_validation else 'test'
    best, on_test = tables.select(points, preset['metric'], on)
    results['scenarios'].setdefault(scenario, []).append(
        {'method': label, 'config': dataclasses.asdict(config), 'chosen': best['grid_point'],
         'select_on': on, 'chosen_on_test': on_test['grid_point'], 'half_round': half,
         **({'shared_runs': os.path.relpath(shared[i], out_dir)} if i in shared else {}),
         **{k: best[k] for k in best if k != 'grid_point'}})
    log(f'[{name}/{scenario}] {label}: test {preset["metric"]} '
        f'{stats.fmt_interval(best[preset["metric"]])} at {best["grid_point"]} (selected on '
        f'{on})')
  for scenario, rows_ in results['scenarios'].items():
    report.plot_mean_curves(
        os.path.join(out_dir, f'{_slug(scenario)}.png'),
        {r['method']: tuple(zip(*r['curve'])) for r in rows_}, f'{name} ({mode}): {scenario}')
  report.write_json(os.path.join(out_dir, 'results.json'), results)
  table = settings_table(name, mode, rounds, seeds) + '\n' + results_table(results) + ''.join(
      f'\nEvery run diverged, so no row: {d}\n' for d in results.get('diverged', []))
  report.atomic_write(os.path.join(out_dir, 'table.md'), table.encode())
  log(table)
  return results


def _slug(text):
  return ''.join(c if c.isalnum() or c in '.=' else '_' for c in text)

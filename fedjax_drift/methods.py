"""Methods as a grid axis: --grid='algo:fedavg,fedprox,fedgkd;lr:0.1,0.01' in one command.

An algorithm changes the compiled program's structure, so it cannot be a traced grid value
(study.py). Instead each method is its own study, compiled once, run in a directory of its
own inside one run directory, the way a preset runs its methods:

  RUN_DIR/config.json    the command's config (the whole --grid) and the methods' list
  RUN_DIR/<algo>/        each method's run directory: its grid (the other axes) x --seeds,
                         with runs.csv, metrics.csv, summary.json and checkpoints as usual
  RUN_DIR/runs.csv       every method's runs, with an algo column
  RUN_DIR/table.csv      one row per method and scenario (the values of the grid's scenario
                         axes, config.SCENARIO_AXES, each a column): its selected grid point
                         there (results.selected_per_scenario, the one selection rule, within
                         the scenario) and that point's statistics over the seeds (and its
                         mean final_dp_epsilon, for a DP method); every method after the
                         first also its paired difference to the first in the same scenario,
                         final and best accuracy over the seeds both ran
                         (<stat>_minus_<first>_mean/lo/hi)
  RUN_DIR/summary.json   per method: its grid points, its selection per scenario (and, with
                         one scenario, 'selected') and its directory; paired_per_scenario:
                         [{scenario, paired: {method: {stat: difference to the first}}}]
                         (and, with one scenario, paired: that scenario's)

A grid axis that a method does not read (prox_mu for fedavg) is left out of that method's grid
(its points would repeat one run), and the run says so. --resume continues every method from
its own checkpoints; a method that had not started starts.
"""
import dataclasses
import os
import time

from fedjax_drift import (applies, distributed, inputs, interrupts, registry, report, results,
                          rundir, stats, study)
from fedjax_drift.config import Config, grid_points, parse_grid
from fedjax_drift.errors import DivergenceError, UserError

AXIS = 'algo'
TABLE_STATS = ('final_accuracy', 'best_accuracy', 'last10_mean_accuracy')


def split_grid(text) -> tuple:
  """'algo:a,b;lr:0.1' -> (['a', 'b'], 'lr:0.1'): the methods of the --grid axis `algo` (each
  a registered --algo) and the other axes' text; ([], text) without that axis."""
  methods, rest = [], []
  for item in [t for t in (text or '').split(';') if t.strip()]:
    name, _, values = item.partition(':')
    if name.strip() != AXIS:
      rest.append(item.strip())
      continue
    if methods:
      raise UserError(f'--grid: {AXIS} appears twice')
    methods = [v.strip() for v in values.split(',') if v.strip()]
    if not methods:
      raise UserError(f'--grid: {AXIS} has no values')
    for m in methods:
      registry.get('algorithm', m, flag='grid algo')
    if len(set(methods)) != len(methods):
      raise UserError(f'--grid: {AXIS} names a method twice ({values.strip()})')
  return methods, ';'.join(rest)


def method_grid(config: Config, algo: str, rest: str) -> tuple:
  """The grid text of `algo`'s study: the axes of `rest` it reads, and those it leaves out."""
  at = dataclasses.replace(config, algo=algo, grid='')
  skipped = applies.unread(at)
  axes = [item for item in rest.split(';') if item]
  kept = [a for a in axes if a.partition(':')[0].strip() not in skipped]
  return ';'.join(kept), [a.partition(':')[0].strip() for a in axes if a not in kept]


def method_config(config: Config, algo: str, run_dir: str, rest: str) -> Config:
  """The config of one method's study, in RUN_DIR/<algo> (--save_params gains _<algo>)."""
  grid, _ = method_grid(config, algo, rest)
  save = config.save_params
  if save:
    save = f'{save[:-len(".npz")]}_{algo}.npz'
  return dataclasses.replace(config, algo=algo, grid=grid, out=os.path.join(run_dir, algo),
                             save_params=save)


def is_methods_run(config: Config) -> bool:
  """Whether config's --grid has the method axis (simulation.run hands it to run_all)."""
  return bool(split_grid(config.grid)[0])


def enclosing_run(run_dir) -> str:
  """The methods run directory (--grid='algo:...') that holds `run_dir` as one method's
  sub-directory, or '' when it is none (its parent's config.json does not list it)."""
  top = os.path.dirname(os.path.abspath(run_dir))
  try:
    saved = rundir.read_json(os.path.join(top, 'config.json'))
  except (OSError, ValueError):
    return ''
  listed = (saved.get('_resolved') or {}).get('methods') if isinstance(saved, dict) else None
  return top if os.path.basename(os.path.abspath(run_dir)) in (listed or ()) else ''


def check_not_a_method(run_dir):
  """Refuses a --resume of one method's sub-directory: it would leave the other methods
  and table.csv undone; the line names the top directory to resume instead."""
  top = enclosing_run(run_dir)
  if top:
    raise UserError(f'--resume: {run_dir} is one method of the --grid algo run {top}; '
                    f'continue with --resume --out={top} (it finishes every method and '
                    'writes table.csv)')


def run_all(config: Config, log, run_one) -> dict:
  """Runs every method of config's --grid axis `algo` with run_one(method_config, log) (the
  plain simulation.run), then writes the run directory's runs.csv, table.csv and summary.json
  (module docstring). Returns that summary."""
  methods, rest = split_grid(config.grid)
  parse_grid(rest)  # the other axes' one-line errors, before any work
  config = distributed.setup(config, log)  # as simulation.run: several processes, one writer
  writer = distributed.is_writer()
  if not writer:  # process 0 speaks and writes
    log = lambda *a, **k: None
  config = study.absolutize(config)
  run_dir = os.path.abspath(config.run_dir(time.strftime('%Y%m%d-%H%M%S')))
  files = [path for _, path in inputs.input_files(study.input_flags(config))]
  rundir.check_out(run_dir, config.resume, config.overwrite, files)
  configs = [method_config(config, m, run_dir, rest) for m in methods]
  for m, c in zip(methods, configs):
    _, skipped = method_grid(config, m, rest)
    if skipped:
      log(f'--grid: --algo={m} does not read {", ".join(skipped)}; its runs leave that '
          'axis out')
    c.validate()
    study.eval_protocol(c)  # a method that cannot be scored as asked: before any method runs
  distributed.barrier('methods outputs checked')  # before process 0 creates anything there
  record = _open(config, run_dir, methods, files, log) if writer else None
  distributed.barrier('methods run directory written')  # its config.json admits the methods
  with interrupts.resume_at(run_dir):  # Ctrl-C names this directory, not a method's
    summaries = _run_methods(config, methods, configs, log, run_one)
  summary = _summary(config, methods, configs, summaries, run_dir)
  if not writer:
    return summary
  rows = [{AXIS: m, **{k: v for k, v in r.items() if not isinstance(v, (dict, list))}}
          for m in methods for r in summaries[m]['runs']]
  # methods differ in their grid axes: the header is every row's columns, blank where absent
  report.write_csv(os.path.join(run_dir, 'runs.csv'), rows,
                   list(dict.fromkeys(k for row in rows for k in row)))
  report.write_csv(os.path.join(run_dir, 'table.csv'), summary['table'],
                   list(dict.fromkeys(k for row in summary['table'] for k in row)))
  report.write_json(os.path.join(run_dir, 'summary.json'), summary)
  record.set(finished=True)
  _log_table(summary['table'], run_dir, log)
  for entry in summary['paired_per_scenario']:
    where = f' at {results.label(entry["scenario"], "")}' if entry['scenario'] else ''
    for m, diffs in entry['paired'].items():
      log(f'{m} - {methods[0]}{where}, paired by seed: '
          + ', '.join(f'{key.split("_")[0]} {stats.fmt_difference(d)}'
                      for key, d in diffs.items()))
  return summary


def _run_methods(config, methods, configs, log, run_one) -> dict:
  """{method: its summary}, running each of `configs` with run_one (a started one resumed
  under config.resume; one whose every run diverged read back from its summary.json)."""
  summaries = {}
  for m, c in zip(methods, configs):
    started = os.path.isfile(os.path.join(c.out, 'config.json'))
    log(f'--grid {AXIS}={m} ({methods.index(m) + 1}/{len(methods)}) -> {c.out}')
    try:
      summaries[m] = run_one(dataclasses.replace(c, resume=config.resume and started), log)
    except DivergenceError as e:  # every run of this method diverged; the others go on
      log(f'--algo={m}: {e}')
      summaries[m] = rundir.read_json(os.path.join(c.out, 'summary.json'))
  return summaries


def _open(config, run_dir, methods, files, log):
  """Creates the methods run directory with its record and config.json (which lists the
  methods, so that rundir admits their directories inside it); returns the record."""
  os.makedirs(run_dir, exist_ok=True)
  record = rundir.open_record(run_dir, config.resume, rundir.overwrite_mode(config.overwrite),
                              files, log)
  for name in ('config.json', 'runs.csv', 'table.csv', 'summary.json', *methods):
    record.add(name)
  report.write_json(os.path.join(run_dir, 'config.json'), {
      **dataclasses.asdict(config), '_resolved': {'methods': methods}})
  return record


def _summary(config, methods, configs, summaries, run_dir) -> dict:
  """summary.json of the methods run: each method's selection per scenario by
  results.selected_per_scenario, a table row per method and scenario, and each later
  method's paired difference to the first in each scenario."""
  select_on = config.resolved_select_on()
  per_method, table = {}, []
  for m, c in zip(methods, configs):
    s = summaries[m]
    chosen = results.selected_per_scenario(select_on, s['grid_points'])
    per_method[m] = {'run_dir': c.out, 'scored_model': s.get('scored_model', ''),
                     'grid': s['grid'], 'weighting': s['weighting'],
                     'num_runs': s['num_runs'], 'grid_points': s['grid_points'],
                     'selected_per_scenario': chosen}
    if len(chosen) == 1:
      per_method[m]['selected'] = {k: v for k, v in chosen[0].items()
                                   if k not in ('scenario', 'points')}
    table += [_table_row(m, s, sel) for sel in chosen]
  def chosen_in(scenario):
    return {m: next((sel['grid_point'] for sel in per_method[m]['selected_per_scenario']
                     if sel['scenario'] == scenario), None) for m in methods}
  paired = [{'scenario': scenario, 'paired': _paired_to_first(methods, summaries,
                                                              chosen_in(scenario))}
            for scenario, _ in results.by_scenario(summaries[methods[0]]['grid_points'])]
  for row in table:
    if row[AXIS] != methods[0]:
      diffs = next((p['paired'].get(row[AXIS], {}) for p in paired
                    if p['scenario'] == row['_scenario']), {})
      for key, diff in diffs.items():
        row.update({f'{key}_minus_{methods[0]}_{k}': diff[k] for k in ('mean', 'lo', 'hi')})
  for row in table:
    del row['_scenario']
  one = {'paired': paired[0]['paired']} if len(paired) == 1 else {}
  return {'methods': methods, 'grid': config.grid, 'select_on': select_on,
          'by': per_method[methods[0]]['selected_per_scenario'][0]['by'],
          'num_runs': sum(s['num_runs'] for s in summaries.values()),
          'seeds': sorted({seed for s in summaries.values() for seed in s['seeds']}),
          'rounds': config.rounds, 'dataset': summaries[methods[0]]['dataset'],
          'run_dir': run_dir, 'per_method': per_method, 'table': table,
          'paired_per_scenario': paired, **one,
          'warnings': [f'--algo={m}: {w}' for m in methods
                       for w in summaries[m].get('warnings') or []]}


def _table_row(method, summary, chosen) -> dict:
  """table.csv's row of `method` in one scenario: the scenario's values, the hyperparameters
  chosen there (grid_point) and that point's statistics over its seeds."""
  point = next((g for g in summary['grid_points']
                if g['grid_point'] == chosen['grid_point']), None)
  scenario = chosen['scenario']
  hyper = {k: v for k, v in (chosen['grid_point'] or {}).items() if k not in scenario}
  row = {AXIS: method, '_scenario': scenario, **scenario,
         'scored_model': summary.get('scored_model', ''),  # global or personal
         'grid_point': ' '.join(f'{k}={v:g}' for k, v in hyper.items()),
         'seeds': point['seeds'] if point else 0,
         'diverged': point['diverged'] if point else summary['num_runs']}
  for key in TABLE_STATS:
    stat = chosen[key] or {}
    row[f'{key}_mean'], row[f'{key}_std'] = stat.get('mean'), stat.get('std')
  row.update(_carried_means(summary['runs'], chosen['grid_point']))
  return row


def _per_seed(runs, point, key) -> dict:
  """{seed: value of `key`} of the runs at grid point `point` (None for a diverged run)."""
  return {r['seed']: (r.get(key) if r['status'] == 'ok' else None) for r in runs
          if all(r.get(k) == v for k, v in (point or {}).items())}


def _paired_to_first(methods, summaries, chosen) -> dict:
  """{method: {stat: stats.paired_difference}} of every method after the first against the
  first, each at its grid point in chosen ({method: point, None where it has none}: what it
  selected in one scenario), over the seeds both ran (same partitions, cohorts, batches and
  initial model: the runs are paired by seed and scenario). A method without a point, or
  with the first method without one, is left out."""
  first = chosen.get(methods[0])
  return {m: {key: stats.paired_difference(_per_seed(summaries[m]['runs'], chosen[m], key),
                                           _per_seed(summaries[methods[0]]['runs'], first, key))
              for key in ('final_accuracy', 'best_accuracy')}
          for m in methods[1:] if first is not None and chosen.get(m) is not None}


def _carried_means(runs, point) -> dict:
  """{final_<column>: mean} over the runs at grid point `point` that did not diverge, of
  results.CARRIED_COLUMNS they report (DP-FedAvg's epsilon); {} when none does."""
  mine = [r for r in runs if r['status'] == 'ok' and all(r.get(k) == v for k, v in
                                                          (point or {}).items())]
  out = {}
  for column in results.CARRIED_COLUMNS:
    values = [r[f'final_{column}'] for r in mine if r.get(f'final_{column}') is not None]
    if values:
      out[f'final_{column}'] = sum(values) / len(values)
  return out


def _log_table(table, run_dir, log):
  """One line per method: its selected point and mean last-10% accuracy."""
  for row in table:
    mean = row['last10_mean_accuracy_mean']
    log(f'{row[AXIS]}: {row["grid_point"] or "(no grid)"} last-10% accuracy '
        + (f'({row["scored_model"]} model) ' if row.get('scored_model') else '')
        + (f'{mean:.4f}' if mean is not None else 'n/a')
        + f' over {stats.seeds_words(row["seeds"])}')
  log(f'methods table -> {os.path.join(run_dir, "table.csv")}')

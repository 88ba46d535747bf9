"""The documents: a preset's settings table (every value with its source, pending runs, the
mode's cuts, the work estimate), the experiments table, experiments/PRESETS.md, --list."""
import dataclasses
import os
import shlex

import fedjax_drift
from fedjax_drift import stats, tables
from presetlib.datasizes import train_sizes
from presetlib.estimates import (ACCELERATORS, CPU_GFLOPS, EFFICIENCY, accelerator_estimate,
                                 cost_key, estimate)
from presetlib.loading import EXPERIMENTS, PRESETS, ROOT
from presetlib.plans import configs, pending, plan
from presetlib.tiers import (CPU_CLIENTS, CPU_DROP, CPU_SEEDS, CPU_WHY, NO_SPLIT, SELECTION,
                             cpu_values, method_grid, resolve, scaled_shift_count,
                             scenario_names, short_rounds, sources)

DOC = os.path.join(ROOT, 'experiments', 'PRESETS.md')


def cuts(name, mode, rounds=None, seeds=None):
  """What this mode changes from the paper's set-up, one sentence each."""
  preset = PRESETS[name]
  out = []
  if mode == 'short':
    short = preset['short']
    scen = scenario_names(preset, 'short')
    full_rounds = {s: preset['scenarios'][s].get('rounds', preset['setting'].get('rounds'))[0]
                   for s in scen}
    out = ['rounds: ' + ', '.join(f'{s} {short_rounds(preset, s)} of {full_rounds[s]}'
                                  for s in scen),
           f'seeds: {short["seeds"]} of {preset["seeds"][0]}']
    if len(scen) < len(preset['scenarios']):
      out.append(f'scenarios: {", ".join(scen)} only (of {", ".join(preset["scenarios"])})')
    count = preset['setting'].get('concept_shift_count', (0,))[0]
    if count:
      out.append('concept shifts: ' + ', '.join(
          f'{s} {scaled_shift_count(count, full_rounds[s], short_rounds(preset, s))} of '
          f'{count}' for s in scen) + ' (the paper\'s shifts per round)')
    tuned = {k for m in preset['methods'].values() for k, (vals, _) in
             method_grid(preset, m).items() if len(vals) > 1}
    if tuned:
      point = short.get('point', {})
      out.append('tuning grid: one point per method instead of the paper\'s grid (' +
                 ', '.join(f'{k}={point[k]:g}' if k in point else f'{k}=first value'
                           for k in sorted(tuned)) + '; fixed values stay)')
    out.append(f'why: {short["why"]}')
  if mode == 'cpu':
    out += [f'{k}: {why}' for k, why in CPU_WHY.items() if k in cpu_changes(name)]
    left = sorted({r for *_, reasons in plan(name, 'cpu') for r in reasons
                   if r.startswith('not in the cpu tier')})
    out += [f'left out: {r[len("not in the cpu tier: "):]}' for r in left]
  if rounds:
    out.append(f'rounds overridden on the command line: {rounds}')
  if seeds:
    out.append(f'seeds overridden on the command line: {seeds}')
  return out


def cpu_changes(name):
  """The CPU_WHY entries that change something in one of the preset's runs (its cuts)."""
  preset, changed = PRESETS[name], set()
  for scenario in preset['scenarios']:
    for label in preset['methods']:
      paper = resolve(name, 'full', scenario, label)[0]
      cpu = cpu_values(paper)
      tests = {
          'dataset': paper.get('dataset', 'embedded') != cpu['dataset'],
          'model': paper.get('model', 'mlp') != cpu['model'],
          'pipeline': any(k in paper for k in CPU_DROP) or any(
              paper.get(k, 'none') != 'none' for k in ('augment', 'normalize')),
          'generator': 'fedgen_hidden' in paper,
          'rounds': any(paper.get(k) != cpu[k] for k in ('rounds', 'eval_every')),
          'seeds': preset['seeds'][0] != CPU_SEEDS,
          'clients': paper.get('num_clients', CPU_CLIENTS) != cpu['num_clients'],
          'sizes': bool(paper.get('vote_val_size'))}
      changed |= {k for k, hit in tests.items() if hit}
  return changed


def tiers(name):
  """The modes in which the preset has live runs ('full', 'short', 'cpu')."""
  return [mode for mode in ('full', 'short', 'cpu') if configs(name, mode)]


def cpu_time(hours) -> str:
  """A duration in hours as work_line says it: 'under a minute', 'about N minutes' below an
  hour, else 'about N.N hours' (never 'about 0.0 minutes')."""
  if hours * 60 < 1:
    return 'under a minute'
  if hours < 1:
    return f'about {hours * 60:.0f} minute{"s" if round(hours * 60) != 1 else ""}'
  return f'about {hours:,.1f} hours'


def work_line(name, mode, rounds=None, seeds=None):
  """One paragraph: the mode's live runs in sample-gradients and 2-core CPU time (estimate)."""
  n, hours, unknown = estimate(name, mode, rounds=rounds, seeds=seeds)
  if not n:
    return f'Estimated work of `--mode={mode}`: none of its runs is live in this build.'
  note = (f' Costs of {", ".join(unknown)} are not known here: counted as 100 MFLOP per '
          'sample-gradient on 50,000 examples.' if unknown else '')
  cpu = (' Small models on 2 cores run far below that rate (compilation, evaluation and '
         'per-step overheads dominate): see the wall times in experiments/RESULTS.md.'
         if mode == 'cpu' else '')
  return (f'Estimated work of `--mode={mode}` (its live runs): {n:.2g} sample-gradients, '
          f'{cpu_time(hours)} of this 2-core CPU at {CPU_GFLOPS} GFLOP/s (an estimate from '
          f'FLOPs, not measured).{note}{cpu}' + (gpu_line(name, mode, rounds, seeds)
                                                 if mode != 'cpu' else ''))


def gpu_line(name, mode, rounds=None, seeds=None):
  """' On one GPU ...': the mode's live runs on one A100, H100 or H200 (estimates.py)."""
  hours, unknown = accelerator_estimate(name, mode, rounds=rounds, seeds=seeds)
  missing = ', '.join(f'{m} on {d}' for m, d in unknown)
  if not any(h for table in hours.values() for h in table.values()):
    return f' On one GPU: not estimated (no cost measured for {missing}).' if unknown else ''

  def span(h):
    return f'{h * 60:.1f} min' if h < 1 else f'{h:,.1f} h'

  parts = [f'{a} {span(hours[a]["float32"])} in float32 ({r["float32"] / 1e12:g} TFLOP/s) '
           f'or {span(hours[a]["tf32"])} with TF32 ({r["tf32"] / 1e12:g} TFLOP/s, '
           '`--matmul_precision=default`)' for a, r in ACCELERATORS.items()]
  missing = f' Not counted (no cost measured): {missing}.' if unknown else ''
  return (f' On one GPU at an assumed {EFFICIENCY:.0%} of its peak FLOP/s and HBM bandwidth: '
          f'{"; ".join(parts)}; from XLA\'s FLOPs and bytes for each model\'s training step '
          f'(experiments/presetlib/estimates.py: the roofline of the two, not measured).{missing}'
          + priced_line(name, mode, rounds, seeds))


def priced_line(name, mode, rounds=None, seeds=None):
  """' Priced at ...': each (model, input, training set) the mode's live runs are priced
  at, from their resolved values (estimates.cost_key, datasizes.train_sizes)."""
  seen = {}
  for _, _, c in configs(name, mode, rounds=rounds, seeds=seeds):
    model, shape, _ = cost_key(c)
    sizes = train_sizes(c)
    seen.setdefault((model, 'x'.join(map(str, shape or ('?',))), c.dataset,
                     f'{sum(sizes):,.0f}' if sizes else 'unknown'), None)
  return ' Priced at: ' + '; '.join(f'{m} on {s} {d} ({n} training examples)'
                                    for m, s, d, n in seen) + '.' if seen else ''


DEFAULTS = {f.name: f.default for f in dataclasses.fields(fedjax_drift.Config)}


def resolved_rows(name, mode='full', rounds=None, seeds=None):
  """[(field, value, runs, source)]: every value a run of the mode resolves to that differs
  from the Config default (and every algo), one row per (field, value, source) with the runs
  it holds for ('every run' when all); a value the mode changes cites the mode's cuts."""
  preset, rows, runs = PRESETS[name], {}, []
  for s in scenario_names(preset, mode):
    for label in preset['methods']:
      runs.append(f'{s} / {label}')
      values, grid, _ = resolve(name, mode, s, label, rounds, seeds)
      full, src = resolve(name, 'full', s, label)[0], sources(name, s, label)
      items = [(k, v, k in full and full[k] == v) for k, v in values.items()]
      items += [(k, vals, True) for k, vals in grid.items()]
      for k, v, paper in items:
        if k != 'algo' and k in DEFAULTS and v == DEFAULTS[k]:
          continue
        why = src.get(k, '') if paper else f'the `{mode}` mode (cuts below)'
        rows.setdefault((k, v if not isinstance(v, tuple) else v, why), []).append(runs[-1])
  out = []
  for (k, v, why), where in sorted(rows.items(), key=lambda r: r[0][0]):
    key = f'{k} (tuned)' if isinstance(v, tuple) else k
    out.append((key, v, 'every run' if len(where) == len(runs) else ', '.join(where), why))
  return out


def resolved_table(name, mode='full', rounds=None, seeds=None):
  """The markdown lines of resolved_rows."""
  lines = [f'Resolved values of `--mode={mode}` that differ from the Config defaults (and each '
           'method\'s algo), with their sources:', '',
           '| setting | value | runs | source |', '|---|---|---|---|']
  lines += [f'| {k} | {_show(v)} | {where} | {why} |'
            for k, v, where, why in resolved_rows(name, mode, rounds, seeds)]
  return lines


def settings_table(name, mode='full', rounds=None, seeds=None, resolved=False):
  """The preset's settings with the source of every value, its pending runs and mode cuts;
  resolved: with resolved_table after them (--show)."""
  preset = PRESETS[name]
  lines = [f'## `{name}`: {preset["title"]}', '',
           f'Paper: {preset["paper"]}. Experiments: '
           f'{", ".join(e["id"] for e in EXPERIMENTS if name in e["presets"])}. Mode `{mode}`' +
           (' (the paper\'s set-up).' if mode == 'full' else
            ' (the paper\'s methods, partition, participation and grids on the embedded data '
            'with a small model; changes listed below).' if mode == 'cpu' else
            ' (the paper\'s model, data and fixed hyperparameters; cut as listed below).'), '',
           f'Pipeline: {preset["pipeline"]}', '',
           '| setting | value | source |', '|---|---|---|']
  for k, (val, src) in preset['setting'].items():
    lines.append(f'| {k} | {_show(val)} | {src} |')
  lines.append(f'| seeds | {preset["seeds"][0]} | {preset["seeds"][1]} |')
  for k, (vals, src) in preset['grid'].items():
    lines.append(f'| {k} (tuned) | {_show(vals)} | {src} |')
  lines.append(f'| reported metric | {preset["metric"]} | see notes |')
  lines.append(f'| grid selection | {selection_text(preset)} | not stated: ours (issue 22); '
               '`--select_on=test` is the papers\' protocol |')
  lines += ['', '| scenario | setting | value | source |', '|---|---|---|---|']
  for scen, items in preset['scenarios'].items():
    extra = preset['scenario_extra'][scen]
    rows = [(k, val, src) for k, (val, src) in items.items()]
    rows += [(f'{k} ({lab} only)', val, src) for lab, t in extra['methods'].items()
             for k, (val, src) in t.items()]
    for k, val, src in rows or [('', '', 'the shared settings above')]:
      lines.append(f'| {scen} | {k} | {_show(val)} | {src} |')
  lines += ['', '| method | algo | setting | value | source |', '|---|---|---|---|---|']
  for label, m in preset['methods'].items():
    items = [(k, val, src) for k, (val, src) in m['set'].items()]
    items += [(f'{k} (tuned)' if len(vals) > 1 else k, vals if len(vals) > 1 else vals[0], src)
              for k, (vals, src) in m['grid'].items()]
    for k, val, src in items or [('', '', 'the shared settings above')]:
      lines.append(f'| {label} | {m["algo"]} | {k} | {_show(val)} | {src} |')
  if resolved:
    lines += [''] + resolved_table(name, mode, rounds, seeds)
  if preset['notes']:
    lines += [''] + [f'- {n}' for n in preset['notes']]
  waiting = pending(name, mode)
  if waiting:
    lines += ['', '**Pending in this build** (refused until the piece exists; nothing to '
              'change here when it lands):', '']
    total = len(plan(name, mode))
    lines += [f'- {r}: ' + ('every run' if len(where) == total else ', '.join(where))
              for r, where in waiting.items()]
  c = cuts(name, mode, rounds, seeds)
  if c:
    lines += ['', f'**{mode} mode cuts** (everything else is the paper\'s):', '']
    lines += [f'- {x}' for x in c]
  lines += ['', work_line(name, mode, rounds, seeds)]
  return '\n'.join(lines) + '\n'


def selection_text(preset):
  """How the preset's grid points are chosen by default, in a few words."""
  values = {**SELECTION, **{k: v for k, (v, _) in preset['setting'].items()}}
  longtail = values.get('scenario') == 'longtail_stateless' or any(
      s.get('scenario', (None,))[0] == 'longtail_stateless' for s in preset['scenarios'].values())
  own = [(n, s.get('dataset', (values.get('dataset'),))[0]) for n, s in
         preset['scenarios'].items()
         if s.get('val_source', (values['val_source'],))[0] == 'dataset']
  if own and len(own) == len(preset['scenarios']):
    return 'on validation: ' + ', '.join(sorted({stats.own_split_name(d) for _, d in own}))
  if longtail or not values['val_fraction']:
    return f'on test ({NO_SPLIT})' if longtail else 'on test'
  where = ('each client\'s training examples' if values['val_source'] == 'clients'
           else 'the pooled training examples')
  return (f'on validation: {values["val_fraction"]:g} of {where}'
          + ''.join(f'; {n}: {stats.own_split_name(d)}' for n, d in own))


def _show(val):
  if isinstance(val, tuple):
    return '{' + ', '.join(_show(x) for x in val) + '}'
  if isinstance(val, bool):
    return str(val).lower()
  return f'{val:g}' if isinstance(val, float) else str(val)


def results_table(results):
  """The results of run_preset as markdown (fedjax_drift/tables.py markdown)."""
  return tables.markdown(results)


def command(name):
  """The command line that runs a preset at the paper's set-up."""
  return f'python experiments/presets.py {name} --mode=full'


def experiment_table():
  """One row per experiment the papers report: where it is, what it compares, how to run it."""
  lines = ['| id | paper | table/figure | compares | preset and command | status here |',
           '|---|---|---|---|---|---|']
  for e in EXPERIMENTS:
    only = f' --only={shlex.quote(",".join(e["only"]))}' if e.get('only') else ''
    cmds = '<br>'.join(f'`{command(p)}{only}`' for p in e['presets'])
    needs = sorted({r for p in e['presets'] for r in pending(p, only=e.get('only'))})
    live = any(configs(p, 'full', only=e.get('only')) for p in e['presets'])
    status = ('live' if not needs else
              ('partly live; ' if live else '') + 'pending: ' + '; '.join(needs))
    if e.get('not_produced'):
      status += f'. Not produced: {e["not_produced"]}'
    lines.append(f'| {e["id"]} | {e["short_paper"]} | {e["where"]} | {e["compares"]} | '
                 f'{cmds} | {status} |')
  return '\n'.join(lines) + '\n'


def document():
  """experiments/PRESETS.md: the experiments, then every preset's full set-up with sources."""
  head = ('# Paper presets\n\nGenerated by `python experiments/presets.py all --write_doc` '
          'from the tables in `experiments/presets/*.toml` (one per paper); do not edit by '
          'hand. It reflects the build it was generated on: a run marked pending becomes '
          'live when its piece lands (regenerate this file then).\n\n'
          '## The experiments\n\nEvery table and figure with results in the five papers, '
          'with the preset that runs it. `--only=a,b` keeps some methods of a preset.\n\n')
  parts = []
  for name in PRESETS:
    full = settings_table(name, 'full')
    parts.append(full + '\n**`--mode=short` cuts** (model, data and fixed hyperparameters '
                 'stay the paper\'s):\n\n' + ''.join(f'- {x}\n' for x in cuts(name, 'short')) +
                 '\n' + work_line(name, 'short') + '\n')
  return head + experiment_table() + '\n' + '\n'.join(parts)


def list_text():
  """--list: one line per experiment (id, paper, where, presets with the modes each runs in
  here: --mode=full, short, cpu; 'pending' when none)."""
  modes = {name: tiers(name) for e in EXPERIMENTS for name in e['presets']}
  return '\n'.join(
      f'{e["id"]:4} {e["short_paper"]:12} {e["where"]:24} ' + ', '.join(
          f'{p} ({"/".join(modes[p]) or "pending"})' for p in e['presets'])
      for e in EXPERIMENTS)

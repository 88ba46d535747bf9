"""A preset's runs, and what this build lacks for each: plan, configs, pending.

A run whose setting this build lacks (a flag not in Config, a dataset, model or algorithm not
registered) is pending: listed with what it needs, never run, live by itself when it lands.
"""
import fedjax_drift
from fedjax_drift import registry
from fedjax_drift.data import sources
from fedjax_drift.models import zoo
from presetlib.loading import PRESETS
from presetlib.tiers import SELECTION, cpu_left_out, resolve, scenario_names

# What the code does when a pipeline flag does not exist yet: a preset that sets the flag to
# this value runs the same with or without the flag, so it is not pending on it.
TODAY = {'augment': 'none', 'normalize': 'none', 'clip_grad_norm': 0.0, 'kd_tau2': False,
         'gkd_loss': 'kl', 'local_optimizer': 'sgd', 'dropout': -1, 'gn_groups': 0,
         'gn_group_size': 0, 'projection_hidden': 256, 'eval_protocol': 'global'}
PIPELINE = ('augment', 'augment_pad', 'augment_degrees', 'normalize', 'normalize_mean',
            'normalize_std', 'clip_grad_norm', 'kd_tau2', 'gkd_loss', 'local_optimizer',
            'projection_hidden', 'gn_groups', 'gn_group_size', 'dropout', 'eval_protocol')


SAID_BELOW = ('partition', 'dataset', 'model', 'algo')  # missing() names these its own way


def _dataset_known(name):
  prefix = name.split(':', 1)[0] + ':' if ':' in name else None
  shown = sources.datasets()
  return name in shown or (prefix and any(k.startswith(prefix) for k in shown))


def missing(values):
  """What this build lacks to run `values` (empty when it can): one short phrase each."""
  fields = {f.name: f for f in fedjax_drift.config.fields()}  # registry.flag's too
  out = []
  for k, val in values.items():
    if k not in fields:
      if k not in TODAY or TODAY[k] != val:
        out.append(f'flag --{k}')
      continue
    choices = fields[k].metadata.get('choices')
    if choices and val not in choices and k not in SAID_BELOW:
      out.append(f'--{k}={val}')
  part = values.get('partition', 'iid')
  if registry.find('partition', part) is None or part.startswith('natural:'):
    out.append(f'--partition={part}')
  if not _dataset_known(values.get('dataset', 'embedded')):
    out.append(f'dataset {values["dataset"]}')
  if values.get('model', 'mlp') not in zoo.models():
    out.append(f'model {values["model"]}')
  if registry.find('algorithm', values['algo']) is None:
    out.append(f'algorithm {values["algo"]}')
  return out


def _static_pending(preset, scenario, label):
  """(pending reasons written in the table, issue references) of one run."""
  extra, method = preset['scenario_extra'][scenario], preset['methods'][label]
  pending = [x for x in (preset['pending'], extra['pending'], method['pending']) if x]
  issues = [x for x in (preset['issue'], extra['issue'], method['issue']) if x]
  return pending, issues


def plan(name, mode, only=None, rounds=None, seeds=None, replace=None):
  """Every (scenario, method label, values, grid, seeds, pending reasons) of a preset.

  replace: Config values set over the preset's (a user's --dataset/--data_dir)."""
  preset, out = PRESETS[name], []
  for scenario in scenario_names(preset, mode):
    for label in preset['methods']:
      if only and label not in only:
        continue
      values, grid, n_seeds = resolve(name, mode, scenario, label, rounds, seeds)
      values.update(replace or {})
      grid = {k: v for k, v in grid.items() if k not in (replace or {})}  # a flag fixes an axis
      if values.get('val_source') == 'dataset' and values.get('val_fraction'):
        values['val_source'] = SELECTION['val_source']  # --val_fraction asks for a carved split
      static, issues = _static_pending(preset, scenario, label)
      reasons = [f'{r} ({", ".join(issues)})' if issues else r
                 for r in static + missing(values)]
      if mode == 'cpu' and cpu_left_out(values) and not reasons:  # else: pending anyway
        reasons = [f'not in the cpu tier: {cpu_left_out(values)}']
      out.append((scenario, label, values, grid, n_seeds, reasons))
  return out


def to_config(values, grid, seeds):
  """A validated Config; pipeline values equal to TODAY's behaviour drop out if unknown."""
  fields = fedjax_drift.config.field_names()
  kept = {k: val for k, val in values.items() if k in fields}
  return fedjax_drift.Config(**kept, seeds=seeds, grid=_grid_text(grid)).validate()


def configs(name, mode, only=None, **overrides):
  """Every live (scenario, method, Config) of a preset, validated (the fast test calls this)."""
  return [(s, label, to_config(v, g, n))
          for s, label, v, g, n, reasons in plan(name, mode, only, **overrides) if not reasons]


def pending(name, mode='full', only=None):
  """{reason: [method @ scenario, ...]} of the runs this build cannot do yet; a reason's
  issue references are merged over its runs."""
  where, issues = {}, {}
  for s, label, *_, reasons in plan(name, mode, only):
    for r in reasons:
      base, _, refs = r.partition(' (issue')
      where.setdefault(base, []).append(f'{label} @ {s}')
      issues.setdefault(base, set()).update(
          f'issue{x}' for x in refs.rstrip(')').split(', issue') if refs)
  return {(f'{b} ({", ".join(sorted(issues[b]))})' if issues[b] else b): w
          for b, w in where.items()}


def _grid_text(grid):
  return ';'.join(f'{k}:{",".join(repr(float(x)) for x in vals)}' for k, vals in grid.items())


def pending_line(name, mode, only=None, rows=None):
  """Why a preset with no live run has none: 'not in the cpu tier: ...' or 'pending: ...'."""
  rows = plan(name, mode, only) if rows is None else rows
  if mode == 'cpu' and rows and all(r[5][0].startswith('not in the cpu tier') for r in rows):
    return rows[0][5][0]
  return f'pending: this build lacks {"; ".join(sorted(pending(name, mode, only)))}'

"""A preset's scenarios as grid axes: one sweep per method and per shape (issue 46 item 3).

A preset's table runs each method in each scenario. Scenarios that differ only in values that
shape the data, the cohort or the local work (fedjax_drift.config.SCENARIO_AXES: the Dirichlet
alpha, shards per client, clients per round, local epochs or steps) run as one sweep with those
values as --grid axes: one compiled program instead of one per scenario, each run equal to the
one its scenario's own sweep runs (fedjax_drift.study: a scenario axis is read per run, as a
seed is). The axes come first in the grid, so each scenario's runs are contiguous, and the
sweep vmaps one scenario's runs at a time (--run_chunk = a scenario's runs) as its own sweep
vmapped them: no run computes another scenario's longer local work.

group() decides; member() reads a scenario's runs back out of the shared sweep, with its
grid points as its own sweep names them. Scenarios group only when the sweep would run
exactly their runs (their values form the full product of the differing axes) and the study
accepts the grid (a --clients_per_round axis only for the methods that can mask cohorts);
anything else runs on its own, as before.
"""
import dataclasses
import hashlib
import itertools
import json
import os

import fedjax_drift
from fedjax_drift import results, rundir, study
from fedjax_drift.config import SCENARIO_AXES, parse_grid, grid_points


class Group:
  """One sweep (`config`) that runs the scenarios of `members` (indices into the preset's
  live list); `axes` are the scenario axes it sweeps ((), a sweep of one scenario)."""

  def __init__(self, config, members, axes=()):
    self.config, self.members, self.axes = config, members, tuple(axes)


def _key(config):
  """What must be equal for two scenarios' sweeps to share a program: everything but the
  scenario axes and where it writes."""
  return json.dumps(dataclasses.asdict(dataclasses.replace(
      config, out='', **{a: None for a in SCENARIO_AXES})), sort_keys=True, default=str)


def _axis_text(name, values):
  return f'{name}:' + ','.join(str(v) if isinstance(v, int) else repr(float(v)) for v in values)


def merged_config(configs, out):
  """The one sweep of `configs` (equal but for their scenario axes), written to `out`, or
  None when it would run other runs than theirs or the study refuses its grid. Returns
  (config, the scenario axes it sweeps)."""
  axes = [a for a in SCENARIO_AXES if len({getattr(c, a) for c in configs}) > 1]
  values = {a: sorted({getattr(c, a) for c in configs}) for a in axes}
  combos = {tuple(getattr(c, a) for a in axes) for c in configs}
  if len(combos) != len(configs) or combos != set(itertools.product(*values.values())):
    return None  # not a full product: the sweep would run scenarios no one asked for
  base = configs[0]
  own = parse_grid(base.grid)
  if set(own) & set(axes):
    return None
  grid = ';'.join([_axis_text(a, values[a]) for a in axes] + ([base.grid] if base.grid else []))
  per_scenario = len(grid_points(own)) * base.seeds
  config = dataclasses.replace(base, grid=grid, out=out,
                               run_chunk=base.run_chunk or per_scenario)
  try:
    study.plan(config)
  except fedjax_drift.UserError:
    return None
  return config, axes


def _out(out_dir, label, scenarios):
  """OUT/runs/<method>-<scenario>+<scenario>..., shortened with a hash past 100 characters."""
  name = f'{label}-' + '+'.join(scenarios)
  if len(name) > 100:
    name = f'{label}-{len(scenarios)}_scenarios-' + hashlib.sha1(name.encode()).hexdigest()[:8]
  return os.path.join(out_dir, 'runs', name.replace(' ', '_').replace('/', '_'))


def group(live, sweeps, out_dir, enabled=True) -> list:
  """[Group] over `live` ([(scenario, method label, Config)], the preset's sweeps): the
  scenarios of one method whose sweeps differ only in scenario axes become one Group with
  the merged sweep, written to OUT/runs/<method>-<scenarios>; any other sweep (and every
  sweep when not `enabled`, or when sweeps(label) is False: an algorithm that refuses
  sweeps) its own Group. Groups in the order of their first member."""
  buckets = {}
  for i, (_, label, config) in enumerate(live):
    key = (label, _key(config)) if enabled and sweeps(label) else (i,)
    buckets.setdefault(key, []).append(i)
  out = []
  for members in buckets.values():
    merged = None
    if len(members) > 1:
      merged = merged_config([live[i][2] for i in members],
                             _out(out_dir, live[members[0]][1], [live[i][0] for i in members]))
    if merged is None:
      out += [Group(live[i][2], [i]) for i in members]
    else:
      out.append(Group(merged[0], members, merged[1]))
  return sorted(out, key=lambda g: g.members[0])


def member(outcome, config, axes, run_dir=None):
  """The outcome (status, runs) of the scenario `config` (its own sweep's Config) out of its
  group's `outcome`: its runs, their grid points without the scenario axes (as its own sweep
  names them). A scenario whose every run diverged is ('diverged', message), the message its
  own sweep would give (its runs' first diverged round) naming the group's `run_dir`, whether
  the group's other scenarios learned or diverged too."""
  status, runs = outcome
  if status not in ('ok', 'diverged') or not axes:
    return outcome
  want = {a: float(getattr(config, a)) for a in axes}
  if status == 'ok':
    runs = [r._replace(point={k: v for k, v in r.point.items() if k not in want})
            for r in runs if all(r.point.get(a) == v for a, v in want.items())]
    if not all(_diverged(r, config.rounds) for r in runs):
      return status, runs
  records = _records(run_dir, want)
  if records:
    return 'diverged', results.divergence_message(records, run_dir, config.algo, config.lr,
                                                  lambda k: getattr(config, k))
  if status == 'diverged':  # no summary.json to read: the group's own message
    return outcome
  where = ', '.join(f'{a}={v:g}' for a, v in want.items())
  return 'diverged', f'{run_dir or "its sweep"} (every run at {where} diverged)'


def _records(run_dir, want):
  """summary.json's diverged runs of `run_dir` at the scenario values `want`; [] when it
  cannot be read (a sweep run in parts: jobs._run_in_parts)."""
  try:
    runs = rundir.read_json(os.path.join(run_dir, 'summary.json'))['runs']
  except (OSError, TypeError, ValueError, KeyError):
    return []
  return [r for r in runs if r.get('status') == 'diverged'
          and all(r.get(a) is not None and float(r[a]) == v for a, v in want.items())]


def _diverged(run, rounds):
  """Whether a run diverged: its evaluations stop before the last round (tables.summarise)."""
  return not run.curve or run.curve[-1][0] < rounds

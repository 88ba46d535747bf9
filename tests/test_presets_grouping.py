"""A preset's scenarios as grid axes (issue 46 item 3, experiments/presetlib/grouping.py): a
method's scenarios that differ only in scenario axes run as one sweep, with the same tables,
cell for cell, as each scenario's own sweep; anything else runs on its own."""
import json
import os
import sys

import pytest

import fedjax_drift
from fedjax_drift import tables
from helpers import sweep_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'experiments'))
import presets  # noqa: E402
from presetlib import grouping, jobs  # noqa: E402


def _config(**kw):
  base = dict(algo='fedavg', rounds=1, seeds=2, grid='lr:0.1,0.05', out='x')
  return fedjax_drift.Config(**{**base, **kw})


def _live(*scenarios, algo='fedavg'):
  return [(name, 'fedavg', _config(algo=algo, **values)) for name, values in scenarios]


def test_scenarios_that_differ_in_scenario_axes_run_as_one_sweep():
  live = _live(('a=0.1 E=1', dict(dirichlet_alpha=.1, local_epochs=1)),
               ('a=0.1 E=4', dict(dirichlet_alpha=.1, local_epochs=4)),
               ('a=1 E=1', dict(dirichlet_alpha=1., local_epochs=1)),
               ('a=1 E=4', dict(dirichlet_alpha=1., local_epochs=4)))
  groups = grouping.group(live, lambda _: True, '/out')
  assert len(groups) == 1 and groups[0].members == [0, 1, 2, 3]
  merged = groups[0].config
  assert groups[0].axes == ('dirichlet_alpha', 'local_epochs')
  # the scenario axes first, so that each scenario's runs are contiguous; one scenario's runs
  # (2 lrs x 2 seeds) vmapped at a time, as its own sweep vmaps them
  assert merged.grid == 'dirichlet_alpha:0.1,1.0;local_epochs:1,4;lr:0.1,0.05'
  assert merged.run_chunk == 4 and merged.out == '/out/runs/fedavg-a=0.1_E=1+a=0.1_E=4+a=1_E=1+a=1_E=4'
  runs = fedjax_drift.study.plan(merged)
  assert [(r.point['dirichlet_alpha'], r.point['local_epochs']) for r in runs[::4]] == \
      [(.1, 1), (.1, 4), (1., 1), (1., 4)]
  # not enabled (presets.py --no_group), or a method that refuses sweeps: one each
  assert len(grouping.group(live, lambda _: True, '/out', enabled=False)) == 4
  assert len(grouping.group(live, lambda _: False, '/out')) == 4


def test_what_cannot_be_one_sweep_runs_on_its_own():
  # Not a full product: the sweep would run (0.1, E=4), which no scenario asked for.
  partial = _live(('x', dict(dirichlet_alpha=.1, local_epochs=1)),
                  ('y', dict(dirichlet_alpha=1., local_epochs=4)))
  assert [g.members for g in grouping.group(partial, lambda _: True, '/o')] == [[0], [1]]
  # Another setting differs (the model): two sweeps.
  other = [('x', 'fedavg', _config(model='mlp')), ('y', 'fedavg', _config(model='logreg'))]
  assert len(grouping.group(other, lambda _: True, '/o')) == 2
  # The study refuses the grid: cohorts masked to each size only for fedavg and fedprox.
  cohorts = _live(('K=2', dict(clients_per_round=2)), ('K=4', dict(clients_per_round=4)),
                  algo='scaffold')
  assert len(grouping.group(cohorts, lambda _: True, '/o')) == 2
  assert len(grouping.group(_live(('K=2', dict(clients_per_round=2)),
                                  ('K=4', dict(clients_per_round=4))), lambda _: True,
                            '/o')) == 1


def _run(seed, alpha, lr, rounds):
  return tables.Run(seed, {'dirichlet_alpha': alpha, 'lr': lr},
                    [(t, .5) for t in range(0, rounds + 1)], [])


def test_a_scenario_reads_its_own_runs_out_of_the_group():
  runs = [_run(s, a, lr, 4) for a in (.1, 1.) for lr in (.1, .05) for s in (0, 1)]
  runs[0] = runs[0]._replace(curve=[(0, .1), (2, .2)])  # diverged before the last round
  status, mine = grouping.member(('ok', runs), _config(dirichlet_alpha=1., rounds=4),
                                 ('dirichlet_alpha',))
  assert status == 'ok' and len(mine) == 4 and {r.seed for r in mine} == {0, 1}
  assert all(r.point.keys() == {'lr'} for r in mine)  # as its own sweep names its points
  # every run of a scenario diverged: reported as its own sweep reports it
  gone = [r._replace(curve=[(0, .1)]) if r.point['dirichlet_alpha'] == .1 else r for r in runs]
  status, why = grouping.member(('ok', gone), _config(dirichlet_alpha=.1, rounds=4),
                                ('dirichlet_alpha',), '/out/runs/g')
  assert status == 'diverged' and 'dirichlet_alpha=0.1' in why and '/out/runs/g' in why
  assert grouping.member(('diverged', 'all of it'), _config(), ('dirichlet_alpha',)) == \
      ('diverged', 'all of it')


@pytest.mark.slow  # eight 4-round sweeps of the tiny problem
@pytest.mark.parametrize('lr', [0.6, 1.0])  # E=1 learns (one run diverges) / diverges too
def test_a_diverged_scenario_gets_its_own_sweeps_message(tiny_npz, tmp_path, lr):
  # At E=8 every run diverges in round 1; at E=1 with lr=1 both diverge later (rounds 3 and
  # 4), after the group's round-2 checkpoint, which E=8's message must not call good.
  configs = {e: sweep_config(tiny_npz, tmp_path / f'E{e}', lr=lr, local_epochs=e, seeds=2,
                             eval_every=1) for e in (1, 8)}
  live = [(f'E={e}', 'fedavg', c) for e, c in configs.items()]
  [g] = grouping.group(live, lambda _: True, str(tmp_path / 'grouped'))
  outcome = jobs.run_method_job(g.config, True)
  assert outcome[0] == ('ok' if lr < 1 else 'diverged')
  for e, config in configs.items():
    status, why = grouping.member(outcome, config, g.axes, g.config.out)
    own = jobs.run_method_job(config, True)
    if e == 8 or lr == 1.0:
      assert status == own[0] == 'diverged'
      assert why == own[1].replace(config.out, g.config.out)
    else:
      assert status == own[0] == 'ok' and len(why) == len(own[1]) == 2
  assert 'first in round 1); no checkpoint from before it is kept' in \
      grouping.member(outcome, configs[8], g.axes, g.config.out)[1]


def _rows(out):
  """results.json's rows without what names directories (as JSON: tuples are lists)."""
  results = json.load(open(os.path.join(out, 'results.json')))
  return {s: [{k: ({c: v for c, v in val.items() if c != 'out'} if k == 'config' else val)
               for k, val in r.items()} for r in rows]
          for s, rows in results['scenarios'].items()}


@pytest.mark.slow  # four 1-round sweeps of the embedded data
def test_a_grouped_preset_gives_the_same_tables_as_its_scenarios_apart(tmp_path):
  name, only = 'fedgkd_cifar100', ['fedavg']
  outs = {}
  for group in (True, False):
    outs[group] = str(tmp_path / f'group-{group}')
    runner = jobs.Runner(1)
    try:
      presets.start_preset(name, 'cpu', '', '', 1, 1, outs[group], only, False,
                           lambda *_: None, 'validation', None, runner, group=group)()
    finally:
      runner.close()
  grouped = json.load(open(os.path.join(outs[True], 'results.json')))
  apart = json.load(open(os.path.join(outs[False], 'results.json')))
  assert grouped['programs'] < apart['programs'] == len(apart['scenarios'])
  assert _rows(outs[True]) == _rows(outs[False])
  assert open(os.path.join(outs[True], 'table.md')).read() == \
      open(os.path.join(outs[False], 'table.md')).read()
  assert presets.parse_args([name, '--no_group'])[0].no_group

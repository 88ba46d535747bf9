"""Sanity at run time (issue 43 item 5): a run whose validation or test accuracy stays exactly 0
(or 1) over its evaluations, or whose loss never changes from the first round, says so in one
line at the end and in summary.json's `warnings`, for one run, per run of a sweep, and after a
resume; compare and the presets' tables mark its rows with a legend. Nothing is refused."""
import json
import os

from fedjax_drift import compare, results, simulation, tables

from helpers import sweep_config

FROZEN = 1e-30  # a learning rate whose steps vanish against float32 weights: nothing moves


def test_the_checks_and_what_passes_them():
  ok = results.sanity_warnings([0, 2, 4], [0.1, 0.4, 0.6], [2.3, 1.9, 1.5], [0.2, 0.5, 0.7],
                               [2.0, 1.8, 1.7, 1.5])
  assert ok == []
  # Round 0 (the initial model) is not one of the evaluations that must stay at 0 or 1.
  bad = results.sanity_warnings([0, 2, 4], [0.3, 0.0, 0.0], [2.3, 2.1, 2.0], [0.5, 1.0, 1.0])
  assert bad == ['validation accuracy is exactly 1 at every evaluation (2 evaluations, '
                 'rounds 2-4)',
                 'test accuracy is exactly 0 at every evaluation (2 evaluations, rounds 2-4)']
  flat = results.sanity_warnings([0, 2], [0.3, 0.5], [2.3, 2.3], None, [1.5, 1.5])
  assert [w.split(' is ')[0] for w in flat] == ['test loss', 'training loss']
  # Accuracy that is 0 at some evaluations only, or a loss that moves once: no warning.
  assert results.sanity_warnings([0, 2, 4], [0.0, 0.0, 0.1], [2.3, 2.3, 2.2]) == []
  assert results.sanity_warnings([0, 2], [0.1, 0.2], [2.3, 2.2], [], [1.0]) == []


def test_a_single_run_and_a_resumed_one_say_so(tiny_npz, tmp_path):
  lines = []
  out = tmp_path / 'frozen'
  summary = simulation.run(sweep_config(tiny_npz, out, lr=FROZEN, rounds=2,
                                        checkpoint_every=1), log=lines.append)
  assert any(w.startswith('test loss is') for w in summary['warnings'])
  assert summary['runs'][0]['warnings'] == summary['warnings']
  said = [x for x in lines if x.startswith('warning: sanity check')]
  assert len(said) == 1 and 'summary.json warnings' in said[0]
  with open(out / 'summary.json') as f:
    assert json.load(f)['warnings'] == summary['warnings']
  lines.clear()
  resumed = simulation.resume(str(out), rounds=4, log=lines.append)
  assert any(w.startswith('test loss is') and '(3)' in w for w in resumed['warnings'])
  assert sum(x.startswith('warning: sanity check') for x in lines) == 1


def test_a_sweep_names_the_runs_and_compare_and_tables_mark_the_rows(tiny_npz, tmp_path):
  out = tmp_path / 'sweep'
  lines = []
  summary = simulation.run(sweep_config(tiny_npz, out, seeds=2, grid=f'lr:{FROZEN!r},0.1'),
                           log=lines.append)
  frozen = [r for r in summary['runs'] if r['lr'] == FROZEN]
  moving = [r for r in summary['runs'] if r['lr'] != FROZEN]
  assert all(r['warnings'] for r in frozen) and not any(r['warnings'] for r in moving)
  named = {w.split(':')[0] for w in summary['warnings']}
  assert named == {f'run {r["run"]} (seed {r["seed"]}, lr={FROZEN:g})' for r in frozen}
  assert sum(x.startswith('warning: sanity check') for x in lines) == 1

  rows = compare.groups([compare.read_run_dir(str(out))])
  marked = {r['grid_point']: bool(r['warnings']) for r in rows}
  assert marked == {f'lr={FROZEN:g}': True, 'lr=0.1': False}
  text = compare.markdown(rows)
  assert text.count(compare.MARK) == 2 and compare.LEGEND in text  # one row and the legend
  # A directory from before summary.json kept them: compare runs the same checks itself.
  with open(out / 'summary.json') as f:
    old = json.load(f)
  for r in old['runs']:
    del r['warnings']
  with open(out / 'summary.json', 'w') as f:
    json.dump(old, f)
  again = compare.groups([compare.read_run_dir(str(out))])
  assert {r['grid_point']: bool(r['warnings']) for r in again} == marked

  runs = tables.read_runs(str(out), ['lr'])
  points = tables.summarise(runs, 4, 1.0)
  by = {p['grid_point']['lr']: p for p in points}
  assert by[FROZEN]['warnings'] and 'warnings' not in by[0.1]
  result = {'metric': 'last10', 'mode': 'cpu', 'date': 'today', 'scenarios': {'s': [
      {'method': name, 'chosen': p['grid_point'], **{k: v for k, v in p.items()
                                                   if k != 'grid_point'}}
      for name, p in (('frozen', by[FROZEN]), ('moving', by[0.1]))]}}
  table = tables.markdown(result)
  assert f'| frozen {tables.MARK} |' in table and '| moving |' in table
  assert tables.LEGEND in table


def test_a_healthy_comparison_has_no_mark(tiny_npz, tmp_path):
  out = tmp_path / 'fine'
  summary = simulation.run(sweep_config(tiny_npz, out), log=lambda *_: None)
  assert summary['warnings'] == []
  text = compare.markdown(compare.groups([compare.read_run_dir(str(out))]))
  assert compare.MARK not in text and compare.LEGEND not in text
  assert os.path.exists(out / 'summary.json')

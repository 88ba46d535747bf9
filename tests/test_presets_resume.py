"""experiments/presets.py as a command: Ctrl-C gives one line and exit 130 within seconds, its
workers end with it however it ends, a rerun into the same --out keeps finished method sweeps
and resumes interrupted ones to the tables of an uninterrupted run; mistakes are one line; run
flags pass through to every run; --show and --list say what applies."""
import dataclasses
import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import fedjax_drift
from presets_helpers import SCRIPT, differences, reference, run_ids, scenarios, tiny
import presets  # on the path through presets_helpers
from presetlib import jobs, running

TINY = tiny(6)  # two method sweeps (FedADC in two scenarios), a checkpoint every 3 rounds


def _children(pid):
  proc = subprocess.run(['pgrep', '-P', str(pid)], capture_output=True, text=True)
  return [int(p) for p in proc.stdout.split()]


def _start(out, log, *extra):
  """The tiny preset with --jobs=2 in its own session (a terminal's Ctrl-C reaches the
  session's process group), stdout to `log`; returns the Popen once a checkpoint exists."""
  proc = subprocess.Popen([sys.executable, SCRIPT, *TINY, '--jobs=2', f'--out={out}', *extra],
                          stdout=open(log, 'w'), stderr=subprocess.PIPE, text=True,
                          start_new_session=True)
  end = time.time() + 480
  while not glob.glob(os.path.join(out, 'runs', '*', 'checkpoints', '*')):
    assert proc.poll() is None and time.time() < end, proc.stderr.read() if proc.poll() else ''
    time.sleep(0.1)
  return proc


def _gone(pids, within):
  end = time.time() + within
  while time.time() < end:
    alive = [p for p in pids if os.path.exists(f'/proc/{p}') and
             'zombie' not in open(f'/proc/{p}/status').read()]
    if not alive:
      return []
    time.sleep(0.2)
  return alive


@pytest.mark.slow
def test_ctrl_c_is_one_line_and_a_rerun_gives_the_uninterrupted_tables(tmp_path):
  uninterrupted = reference(tmp_path / 'ref', 6)
  out, log = str(tmp_path / 'cut'), str(tmp_path / 'cut.log')
  proc = _start(out, log)
  assert open(log).read().startswith('fedadc_cohort (cpu): 2 method sweep(s)')  # not buffered
  workers = _children(proc.pid)
  assert len(workers) >= 2
  os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
  t = time.time()
  _, err = proc.communicate(timeout=60)
  assert time.time() - t < 15 and proc.returncode == 130
  assert err.splitlines() == [f'error: interrupted; {presets.RESUME_HINT}'], err
  assert not _gone(workers, 15)
  before = run_ids(out)
  finished = {d for d in before if os.path.isfile(os.path.join(d, 'summary.json'))}
  stamps = {d: os.path.getmtime(os.path.join(d, 'summary.json')) for d in finished}
  rerun = subprocess.run([sys.executable, SCRIPT, *TINY, '--jobs=2', f'--out={out}'],
                         capture_output=True, text=True, timeout=600)
  assert rerun.returncode == 0, rerun.stderr
  after = run_ids(out)
  # Run directories with a record were kept (finished) or resumed (same run id), not restarted.
  assert before and all(after[d] == before[d] for d in before)
  assert all(os.path.getmtime(os.path.join(d, 'summary.json')) == stamps[d] for d in finished)
  cut = json.load(open(os.path.join(out, 'results.json')))
  assert scenarios(cut) == scenarios(uninterrupted), differences(scenarios(cut),
                                                               scenarios(uninterrupted))
  # A finished preset is refused without --resume/--overwrite; --resume rewrites its tables.
  again = subprocess.run([sys.executable, SCRIPT, *TINY, f'--out={out}'], capture_output=True,
                         text=True, timeout=600)
  assert again.returncode == 2 and '--resume to keep their runs' in again.stderr
  resumed = subprocess.run([sys.executable, SCRIPT, *TINY, f'--out={out}', '--resume'],
                           capture_output=True, text=True, timeout=600)
  assert resumed.returncode == 0, resumed.stderr
  assert scenarios(json.load(open(os.path.join(out, 'results.json')))) == scenarios(uninterrupted)


@pytest.mark.slow
def test_a_killed_or_terminated_preset_leaves_no_worker(tmp_path):
  for how in (signal.SIGKILL, signal.SIGTERM):
    out = str(tmp_path / how.name)
    proc = _start(out, str(tmp_path / f'{how.name}.log'))
    workers = _children(proc.pid)
    proc.send_signal(how)  # the parent alone: its workers must follow it
    _, err = proc.communicate(timeout=60)
    assert not _gone(workers, 30), how.name
    if how == signal.SIGTERM:
      assert proc.returncode == 143
      assert err.splitlines() == [f'error: stopped by SIGTERM; {presets.RESUME_HINT}'], err


def test_a_run_directory_of_other_settings_is_refused_in_one_line(tmp_path):
  config = fedjax_drift.Config(model='logreg', rounds=2, out=str(tmp_path / 'run'))
  os.makedirs(config.out)
  saved = {**dataclasses.asdict(config), 'lr': 0.5, '_resolved': {}}
  with open(os.path.join(config.out, 'config.json'), 'w') as f:
    json.dump(saved, f)
  with pytest.raises(fedjax_drift.UserError, match=r"--lr=0\.5.*--overwrite"):
    jobs.run_or_resume(config)


def test_mistakes_are_one_line():
  cases = {('fedadc_tabel',): 'did you mean fedadc_table',
           ('fedadc_table', '--mode=huge'): "--mode: invalid choice: 'huge'",
           ('fedadc_table', '--roundz=3'): 'did you mean --rounds',
           ('fedadc_table', '--algo=fedavg'): 'pick methods with --only',
           ('fedadc_table', '--grid=lr:1'): '--grid is set by the preset',
           ('fedadc_table', 'extra'): "unexpected argument 'extra'",
           ('fedadc_table', '--jobs=two'): "--jobs: invalid int value"}
  for argv, text in cases.items():
    with pytest.raises(fedjax_drift.UserError, match=text):
      args, flags = presets.parse_args(list(argv))
      running.run_flags(flags)
  proc = subprocess.run([sys.executable, SCRIPT, 'fedadc_table', '--mode=huge'],
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
  assert proc.stdout == ''


def test_run_flags_pass_through_to_every_run():
  args, flags = presets.parse_args(['fedadc_cohort', '--mode=cpu', '--seed=100', '--lr=0.05',
                                    '--num_clients=50', '--run_chunk=2', '--image_size=32',
                                    '--diag_client_acc', '--memory_budget_gb=4'])
  assert args.preset == 'fedadc_cohort' and flags == {
      'seed': 100, 'lr': 0.05, 'num_clients': 50, 'run_chunk': 2, 'image_size': 32,
      'diag_client_acc': True, 'memory_budget_gb': 4.0}
  rows = presets.plan('fedadc_cohort', 'cpu', replace=running.run_flags(flags))
  assert rows
  for *_, values, grid, _, _ in rows:
    assert {k: values[k] for k in flags} == flags
    assert 'lr' not in grid  # a flag on the command line fixes that axis of the grid
  plain = presets.plan('fedadc_cohort', 'cpu')
  assert any('lr' in grid for *_, grid, _, _ in plain)


def test_show_lists_only_the_cuts_that_apply_and_list_names_the_modes():
  with_fedgen = [n for n in presets.PRESETS if any(
      m['algo'] == 'fedgen' for m in presets.PRESETS[n]['methods'].values())]
  without = [n for n in presets.PRESETS if n not in with_fedgen and presets.configs(n, 'cpu')]
  assert with_fedgen and without
  assert not any(c.startswith('generator:') for c in presets.cuts(without[0], 'cpu'))
  live = [n for n in with_fedgen if presets.configs(n, 'cpu')]
  assert live and any(c.startswith('generator:') for c in presets.cuts(live[0], 'cpu'))
  small = [n for n in presets.PRESETS if presets.configs(n, 'cpu') and all(
      c.num_clients <= presets.CPU_CLIENTS for _, _, c in presets.configs(n, 'full'))]
  assert small and not any(c.startswith('clients:') for c in presets.cuts(small[0], 'cpu'))
  text = presets.list_text()
  assert 'fedadc_cohort (full/short/cpu)' in text
  assert 'fedgkd_text (full/short)' in text or 'fedgkd_text (pending)' in text


@pytest.mark.slow
def test_a_sweep_over_the_memory_budget_runs_in_parts_that_fit(tmp_path):
  """FedDyn's per-client tables for 4 runs (2 learning rates x 2 seeds) exceed a 25 MB budget
  that one grid point's 2 runs fit: fedjax_drift.run refuses the sweep, the runner runs it in
  parts (one per grid point), with the runs of the whole sweep."""
  base = fedjax_drift.Config(algo='feddyn', model='logreg', num_clients=100,
                             clients_per_round=10, rounds=2, eval_every=1, grid='lr:0.05,0.1',
                             seeds=2, progress=False)
  budget = dataclasses.replace(base, memory_budget_gb=0.025)
  with pytest.raises(fedjax_drift.errors.MemoryBudgetError, match='per-client state'):
    fedjax_drift.run(dataclasses.replace(budget, out=str(tmp_path / 'refused')),
                     log=lambda *_: None)
  whole = jobs.run_method(dataclasses.replace(base, out=str(tmp_path / 'whole')))
  parts = jobs.run_method(dataclasses.replace(budget, out=str(tmp_path / 'parts')))
  made = sorted(os.path.basename(d) for d in glob.glob(str(tmp_path / 'parts-part-*')))
  assert made == ['parts-part-lr0.05-s0x2', 'parts-part-lr0.1-s0x2'], made
  key = lambda r: (r.seed, tuple(sorted(r.point.items())))
  assert sorted(map(key, parts)) == sorted(map(key, whole)) and len(whole) == 4
  for a, b in zip(sorted(whole, key=key), sorted(parts, key=key)):
    assert [t for t, _ in a.curve] == [t for t, _ in b.curve]
    assert [x for _, x in a.curve] == pytest.approx([x for _, x in b.curve], abs=1e-6)
  # A rerun finds its parts finished: nothing runs again.
  stamps = {d: os.path.getmtime(os.path.join(d, 'summary.json'))
            for d in glob.glob(str(tmp_path / 'parts-part-*'))}
  jobs.run_method(dataclasses.replace(budget, out=str(tmp_path / 'parts')))
  assert all(os.path.getmtime(os.path.join(d, 'summary.json')) == t for d, t in stamps.items())

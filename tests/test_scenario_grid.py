"""Scenario values as --grid axes (issue 46 item 1): the partition's α and shards, the local
work, the concept-shift and dropout rates, each run of one compiled sweep equal, bit for bit,
to the lone run with those values."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import config as config_lib
from fedjax_drift.errors import UserError
from helpers import QUIET, csv_rows, sweep_config
from test_cli import RUN, cli
from test_distributed import ROOT, launch_two

COLUMNS = ('test_loss', 'test_accuracy')


def _metrics(path, **match):
  return [{k: r[k] for k in COLUMNS} for r in csv_rows(path, **match)]


def _rounds(path, **match):
  """rounds.csv's per-round diagnostics (train loss, drift, shifts), without run and time."""
  return [{k: v for k, v in r.items() if k not in ('run', 'elapsed_s')}
          for r in csv_rows(path, **match)]


def _sweep_equals_single_runs(npz, tmp_path, grid, exact_rounds=True, **extra):
  """Runs `grid` x 2 seeds as one program, then each of its runs alone; asserts their
  metrics equal, string for string (the CSVs carry every float's shortest repr), and their
  per-round diagnostics too with exact_rounds (else to float32 rounding: vmapped runs reduce
  them in another order; a static --local_steps or --dropout_prob=0 compiles the lone run's
  loss sums or diagnostics another way)."""
  summary = fedjax_drift.run(sweep_config(npz, tmp_path / 'sweep', seeds=2, grid=grid, **extra),
                             **QUIET)
  assert summary['segment_compilations'] == 1
  runs = csv_rows(tmp_path / 'sweep' / 'runs.csv')
  points = config_lib.grid_points(config_lib.parse_grid(grid))
  assert len(runs) == 2 * len(points) and all(r['status'] == 'ok' for r in runs)
  single_extra = {k: v for k, v in extra.items() if k != 'run_chunk'}
  for run in runs:
    point = dict(points[int(run['run']) // 2])
    out = tmp_path / f'single-{run["run"]}'
    fedjax_drift.run(sweep_config(npz, out, seed=int(run['seed']), **{**single_extra, **point}),
                     **QUIET)
    assert _metrics(tmp_path / 'sweep' / 'metrics.csv', run=run['run']) == \
        _metrics(out / 'metrics.csv'), (run, point)
    mine, single = _rounds(tmp_path / 'sweep' / 'rounds.csv', run=run['run']), \
        _rounds(out / 'rounds.csv')
    if exact_rounds:  # runs one after another: every diagnostic bit for bit
      assert mine == single, (run, point)
    else:  # the model's equal; the loss and drift summaries to float32 rounding
      keys = list(single[0])  # a traced --dropout_prob adds its own columns
      np.testing.assert_allclose([[float(r[k]) for k in keys] for r in mine],
                                 [[float(r[k]) for k in keys] for r in single], rtol=1e-5)
  return runs


def test_parse_grid_types_scenario_axes_and_refuses_shapes():
  grid = config_lib.parse_grid('local_epochs:1,2;dirichlet_alpha:0.1,1')
  assert grid == {'local_epochs': [1, 2], 'dirichlet_alpha': [0.1, 1.0]}
  assert all(type(v) is int for v in grid['local_epochs'])
  with pytest.raises(UserError, match='values of classes_per_client must be integers'):
    config_lib.parse_grid('classes_per_client:1.5')
  for flag in ('num_clients', 'model', 'gkd_buffer', 'batch_size'):
    with pytest.raises(UserError, match=f"--{flag} sets the compiled program's shapes") as e:
      config_lib.parse_grid(f'{flag}:1,2')
    assert '\n' not in str(e.value)


@pytest.mark.parametrize('grid,extra', [
    ('dirichlet_alpha:0.3,3', dict(run_chunk=1)),
    ('local_epochs:1,3', dict(exact_rounds=False)),
    ('local_steps:2,5', dict(local_epochs=0, local_steps=2, run_chunk=1, exact_rounds=False)),
    ('concept_shift_prob:0.2,0.9', dict(scenario='concept_shift', rounds=6, eval_every=1,
                                        run_chunk=1)),
    ('dropout_prob:0,0.5', dict(run_chunk=1, exact_rounds=False)),
    ('clients_per_round:2,4', dict(exact_rounds=False)),
    ('clients_per_round:4,2;local_epochs:1,2', dict(algo='fedprox', weighting='uniform',
                                                   dropout_prob=0.3, run_chunk=1)),
])
@pytest.mark.slow
def test_scenario_sweep_runs_equal_single_runs(tiny_npz, tmp_path, grid, extra):
  _sweep_equals_single_runs(tiny_npz, tmp_path, grid, **extra)


def test_a_cohort_axis_is_refused_in_one_line_where_it_cannot_be_masked(tiny_npz, tmp_path):
  for kw, named in ((dict(algo='scaffold'), '--algo=scaffold'),
                    (dict(cohort_sampler='cover_classes'), '--cohort_sampler=cover_classes'),
                    (dict(client_state='host'), '--client_state=host')):
    config = sweep_config(tiny_npz, tmp_path / 'x', grid='clients_per_round:2,3', **kw)
    with pytest.raises(UserError, match=f'clients_per_round cannot be swept with {named}') as e:
      fedjax_drift.run(config, **QUIET)
    assert '\n' not in str(e.value)


@pytest.mark.slow
def test_shards_and_epochs_together_equal_single_runs(tiny_npz, tmp_path):
  _sweep_equals_single_runs(tiny_npz, tmp_path, 'classes_per_client:1,2;local_epochs:1,2',
                            partition='shards', run_chunk=1)


@pytest.mark.slow
def test_kill_9_mid_scenario_sweep_then_resume_is_bit_identical(tiny_npz, tmp_path):
  args = [f'--dataset=npz:{tiny_npz}', '--model=mlp', '--num_clients=6', '--clients_per_round=3',
          '--local_steps=0', '--local_epochs=1', '--batch_size=2', '--rounds=12',
          '--eval_every=1', '--checkpoint_every=2', '--progress=false', '--seeds=2',
          '--grid=dirichlet_alpha:0.3,3;local_epochs:4,8']
  straight, killed = tmp_path / 'straight', tmp_path / 'killed'
  assert cli(*args, f'--out={straight}', f'--save_params={tmp_path}/a.npz').returncode == 0
  proc = subprocess.Popen([sys.executable, RUN, *args, f'--out={killed}'],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.time() + 300
  while proc.poll() is None and time.time() < deadline and len(
      csv_rows(killed / 'metrics.csv') if (killed / 'metrics.csv').exists() else []) < 8 * 5:
    time.sleep(0.02)
  assert proc.poll() is None, 'the sweep finished before it could be killed'
  os.kill(proc.pid, signal.SIGKILL)
  proc.wait()
  resumed = cli('--resume', f'--out={killed}', '--progress=false',
                f'--save_params={tmp_path}/b.npz')
  assert resumed.returncode == 0, resumed.stderr
  drop = lambda rows: [{k: v for k, v in r.items() if k != 'elapsed_s'} for r in rows]
  for name in ('metrics.csv', 'rounds.csv', 'runs.csv'):
    assert drop(csv_rows(straight / name)) == drop(csv_rows(killed / name)), name
  a, b = np.load(tmp_path / 'a.npz'), np.load(tmp_path / 'b.npz')
  for name in a.files:
    np.testing.assert_array_equal(a[name], b[name])


# A scenario sweep (alpha x E x 2 seeds) on two devices and over two processes, each against
# the same sweep on one device in one process (as tests/test_devices.py and test_algo_grid.py
# check the seeds' sweep).
SCENARIO_GRID = 'dirichlet_alpha:0.3,1;local_epochs:1,2'
SCRIPT = textwrap.dedent('''
    import sys
    sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
    import fedjax_drift
    from helpers import sweep_config
    what, out = sys.argv[1], sys.argv[2]
    if what == 'devices':
      fedjax_drift.run(sweep_config({npz!r}, out, seeds=2, grid={grid!r}, clients_per_round=2,
                                    devices=2, client_parallelism='vmap'), log=lambda *_: None)
    else:
      pid, port = sys.argv[3:]
      fedjax_drift.run(sweep_config({npz!r}, out, seeds=2, grid={grid!r}, clients_per_round=2,
                                    coordinator_address='localhost:' + port, num_processes=2,
                                    process_id=int(pid)), log=lambda *_: None)
    print('OK')
''')


def _losses(path):
  return [float(r['test_loss']) for r in csv_rows(path)]


@pytest.mark.slow  # subprocesses: two forced host devices, then two processes on localhost
def test_two_devices_and_two_processes_equal_one(tiny_npz, tmp_path):
  code = SCRIPT.format(root=ROOT, tests=os.path.join(ROOT, 'tests'), npz=tiny_npz,
                       grid=SCENARIO_GRID)
  fedjax_drift.run(sweep_config(tiny_npz, tmp_path / 'one', seeds=2, grid=SCENARIO_GRID,
                                clients_per_round=2, client_parallelism='vmap'), **QUIET)
  env = dict(os.environ, XLA_FLAGS='--xla_force_host_platform_device_count=2')
  done = subprocess.run([sys.executable, '-c', code, 'devices', str(tmp_path / 'two-dev')],
                        capture_output=True, text=True, env=env, timeout=900)
  assert done.returncode == 0 and 'OK' in done.stdout, done.stderr[-3000:]
  np.testing.assert_allclose(_losses(tmp_path / 'two-dev' / 'metrics.csv'),
                             _losses(tmp_path / 'one' / 'metrics.csv'), rtol=1e-4, atol=1e-5)
  done = launch_two(lambda i, port: [sys.executable, '-c', code, 'processes',
                                     str(tmp_path / 'two-proc'), str(i), port], timeout=900)
  for i, (returncode, stdout, stderr) in enumerate(done):
    assert returncode == 0 and 'OK' in stdout, f'process {i}:\n{stderr[-3000:]}'
  alone = fedjax_drift.run(sweep_config(tiny_npz, tmp_path / 'one-seq', seeds=2,
                                        grid=SCENARIO_GRID, clients_per_round=2), **QUIET)
  assert alone['num_runs'] == 8
  np.testing.assert_allclose(_losses(tmp_path / 'two-proc' / 'metrics.csv'),
                             _losses(tmp_path / 'one-seq' / 'metrics.csv'), rtol=1e-4, atol=1e-5)

"""Every run is a study: seeds x grid points on one path, with everything a single run has."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import config as config_lib
from helpers import QUIET, csv_rows, sweep_config
from test_cli import RUN, cli


def _strict_json(path):
  def bad(token):
    raise AssertionError(f'{path} holds a bare {token}')
  with open(path) as f:
    return json.load(f, parse_constant=bad)


@pytest.mark.parametrize('algo,grid,extra', [
    ('fedavg', 'lr:0.05,0.2', dict(run_chunk=3)),          # chunked: groups of 3, one padded
    ('fedadc', 'beta:0.8;lr:0.1', dict(run_chunk=1)),       # runs one after another
    ('fedgkd_vote', '', dict(vote_val_size=8, gkd_buffer=2)),  # a validation split per seed
    ('fedfor', 'for_alpha:0.1', dict(scenario='concept_shift', concept_shift_prob=0.5)),
])
@pytest.mark.slow
def test_sweep_runs_equal_single_runs(tiny_npz, tmp_path, algo, grid, extra):
  summary = fedjax_drift.run(sweep_config(tiny_npz, tmp_path / 'sweep', algo=algo, seeds=2,
                                     grid=grid, **extra), **QUIET)
  assert summary['segment_compilations'] == 1
  runs = csv_rows(tmp_path / 'sweep' / 'runs.csv')
  points = config_lib.grid_points(config_lib.parse_grid(grid))
  assert len(runs) == 2 * len(points) and all(r['status'] == 'ok' for r in runs)
  for run in runs:
    point = {k: float(run[k]) for k in points[0]}
    out = tmp_path / f'single-{run["run"]}'
    extra_single = {k: v for k, v in extra.items() if k != 'run_chunk'}
    fedjax_drift.run(sweep_config(tiny_npz, out, algo=algo, seed=int(run['seed']), **point,
                             **extra_single), **QUIET)
    single = [float(r['test_loss']) for r in csv_rows(out / 'metrics.csv')]
    mine = [float(r['test_loss']) for r in csv_rows(tmp_path / 'sweep' / 'metrics.csv',
                                                 run=run['run'])]
    np.testing.assert_allclose(mine, single, rtol=1e-4, atol=1e-5)
  saved = _strict_json(tmp_path / 'sweep' / 'summary.json')
  assert len(saved['grid_points']) == len(points)
  assert all('std' in g['final_accuracy'] for g in saved['grid_points'])


@pytest.mark.slow
def test_a_diverging_point_is_frozen_and_the_others_go_on(tiny_npz, tmp_path):
  lines = []
  summary = fedjax_drift.run(sweep_config(tiny_npz, tmp_path / 'grid', seeds=2, grid='lr:0.1,2500'),
                             log=lines.append)
  runs = csv_rows(tmp_path / 'grid' / 'runs.csv')
  assert [r['status'] for r in runs] == ['ok', 'ok', 'diverged', 'diverged']
  assert all(r['diverged_round'] == '1' and r['final_accuracy'] == '' for r in runs[2:])
  # No accuracy of a diverged run after its divergence, in metrics or in the aggregate.
  assert [r['round'] for r in csv_rows(tmp_path / 'grid' / 'metrics.csv', run=2)] == ['0']
  bad = summary['grid_points'][1]
  assert bad['diverged'] == 2 and bad['final_accuracy']['mean'] is None
  assert any(line.startswith('warning: 2 of 4 runs diverged') for line in lines)
  _strict_json(tmp_path / 'grid' / 'summary.json')
  # The healthy runs equal the same runs without the diverging point.
  fedjax_drift.run(sweep_config(tiny_npz, tmp_path / 'alone', seeds=2, grid='lr:0.1'), **QUIET)
  for r in (0, 1):
    assert ([row['test_loss'] for row in csv_rows(tmp_path / 'grid' / 'metrics.csv', run=r)] ==
            [row['test_loss'] for row in csv_rows(tmp_path / 'alone' / 'metrics.csv', run=r)])


def test_runs_csv_is_written_when_the_first_point_diverges(tiny_npz, tmp_path):
  # runs.csv takes its header from the first run: a diverged one must carry every column.
  fedjax_drift.run(sweep_config(tiny_npz, tmp_path / 'grid', seeds=1, grid='lr:2500,0.1'), **QUIET)
  runs = csv_rows(tmp_path / 'grid' / 'runs.csv')
  assert [r['status'] for r in runs] == ['diverged', 'ok']
  assert runs[0]['target_accuracy'] == runs[1]['target_accuracy'] != ''


@pytest.mark.slow
def test_every_run_diverged_raises(tiny_npz, tmp_path):
  with pytest.raises(fedjax_drift.errors.DivergenceError, match='every run diverged'):
    fedjax_drift.run(sweep_config(tiny_npz, tmp_path / 'all', seeds=2, lr=2500.0), **QUIET)
  runs = csv_rows(tmp_path / 'all' / 'runs.csv')
  assert [r['status'] for r in runs] == ['diverged', 'diverged']
  assert 'no checkpoint from before it is kept' in _checkpoint_message(tmp_path, tiny_npz)


def _checkpoint_message(tmp_path, npz):
  try:
    fedjax_drift.run(sweep_config(npz, tmp_path / 'one', lr=2500.0), **QUIET)
  except fedjax_drift.errors.DivergenceError as e:
    assert 'in round 1' in str(e)
    return str(e)
  raise AssertionError('a single diverging run must raise')


@pytest.mark.slow
def test_sweep_with_scenario_cover_personalisation_and_params(tiny_npz, tmp_path):
  out = tmp_path / 'rich'
  summary = fedjax_drift.run(sweep_config(
      tiny_npz, out, seeds=2, grid='lr:0.05,0.1', cohort_sampler='cover_classes',
      test_partition='like_train', personalize='calibrate', personalize_epochs=1,
      save_params=str(tmp_path / 'p.npz')), **QUIET)
  params = np.load(tmp_path / 'p.npz')
  assert all(params[k].shape[0] == 4 for k in params.files)  # runs.csv order
  assert not np.array_equal(params[params.files[0]][0], params[params.files[0]][1])
  assert {r['run'] for r in csv_rows(out / 'personalization.csv')} == {'0', '1', '2', '3'}
  assert all('personalization' in r for r in summary['runs'])
  rounds = csv_rows(out / 'rounds.csv')
  assert {r['run'] for r in rounds} == {'0', '1', '2', '3'} and len(rounds) == 16
  assert summary['communication_floats_per_round']['up'] > 0
  with pytest.raises(fedjax_drift.UserError, match='memory_budget_gb'):
    fedjax_drift.run(sweep_config(tiny_npz, tmp_path / 'budget', seeds=2, memory_budget_gb=1e-6),
                     **QUIET)
  assert not (tmp_path / 'budget').exists()


@pytest.mark.slow
def test_digits_domains_sweep(tmp_path):
  from test_scenarios import write_digits  # pylint: disable=g-import-not-at-top
  write_digits(tmp_path)
  summary = fedjax_drift.run(fedjax_drift.Config(
      dataset='digits_domains', data_dir=str(tmp_path), partition='domains', num_clients=6,
      clients_per_round=3, model='mlp', rounds=2, eval_every=1, seeds=2, progress=False,
      out=str(tmp_path / 'run')), **QUIET)
  assert [r['status'] for r in summary['runs']] == ['ok', 'ok']


@pytest.mark.slow
def test_kill_9_mid_sweep_then_resume_is_bit_identical(tiny_npz, tmp_path):
  args = [f'--dataset=npz:{tiny_npz}', '--model=mlp', '--num_clients=6', '--clients_per_round=3',
          '--local_steps=30', '--local_epochs=0', '--batch_size=4', '--rounds=12',
          '--eval_every=1', '--checkpoint_every=2', '--progress=false', '--seeds=2',
          '--grid=lr:0.05,0.1']
  straight, killed = tmp_path / 'straight', tmp_path / 'killed'
  assert cli(*args, f'--out={straight}', f'--save_params={tmp_path}/a.npz').returncode == 0
  proc = subprocess.Popen([sys.executable, RUN, *args, f'--out={killed}'],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.time() + 300
  while proc.poll() is None and time.time() < deadline and len(
      csv_rows(killed / 'metrics.csv') if (killed / 'metrics.csv').exists() else []) < 4 * 5:
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


@pytest.mark.slow
def test_partial_divergence_exits_0_with_a_warning(tiny_npz, tmp_path):
  args = [f'--dataset=npz:{tiny_npz}', '--model=mlp', '--num_clients=6', '--clients_per_round=3',
          '--rounds=2', '--eval_every=1', '--progress=false', '--batch_size=4']
  partial = cli(*args, '--grid=lr:0.1,2500', f'--out={tmp_path}/a')
  assert partial.returncode == 0, partial.stderr
  assert 'warning: 1 of 2 runs diverged: run 1 (seed 0, lr=2500) in round 1' in partial.stdout
  assert cli(*args, '--lr=2500', '--seeds=2', f'--out={tmp_path}/b').returncode == 3
  assert cli(*args, '--lr=2500', f'--out={tmp_path}/c').returncode == 3


DEVICES_SCRIPT = '''
import sys, json
sys.path.insert(0, {root!r})
import jax, fedjax_drift
assert jax.device_count() == 2
out = {{}}
for devices in (1, 2):
  s = fedjax_drift.run(fedjax_drift.Config(
      dataset='npz:{npz}', model='mlp', num_clients=6, clients_per_round=4, rounds=2,
      eval_every=1, batch_size=4, seeds=2, grid='lr:0.05,0.1', algo='scaffold',
      devices=devices, progress=False, out='{out}/d%d' % devices), log=lambda *_: None)
  out[devices] = [r['final_loss'] for r in s['runs']]
print(json.dumps(out))
'''


@pytest.mark.slow
def test_sweep_over_two_devices_equals_one(tiny_npz, tmp_path):
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, XLA_FLAGS='--xla_force_host_platform_device_count=2')
  result = subprocess.run(
      [sys.executable, '-c', DEVICES_SCRIPT.format(root=root, npz=tiny_npz, out=tmp_path)],
      capture_output=True, text=True, env=env, timeout=900)
  assert result.returncode == 0, result.stderr[-3000:]
  losses = json.loads(result.stdout.strip().splitlines()[-1])
  np.testing.assert_allclose(losses['2'], losses['1'], rtol=1e-5, atol=1e-6)
  assert len(losses['1']) == 4


def test_concept_shifts_and_weighting_are_reported_per_run(tiny_npz, tmp_path):
  summary = fedjax_drift.run(sweep_config(tiny_npz, tmp_path / 'cs', algo='fedadc', seeds=2,
                                     scenario='concept_shift', concept_shift_prob=0.5,
                                     rounds=6, eval_every=1), **QUIET)
  assert summary['weighting'] == 'uniform' and 'Alg. 3' in summary['weighting_source']
  for run in summary['runs']:
    rows = csv_rows(tmp_path / 'cs' / 'rounds.csv', run=run['run'])
    shifted = [int(r['round']) for r in rows if float(r['shift_class']) >= 0]
    assert [s['round'] for s in run['concept_shifts']] == shifted
    assert all(0 <= s['class'] < 3 and 0 <= s['new_label'] < 3 for s in run['concept_shifts'])
    assert len(run['concept_shift']['shifts']) == len(shifted)
    assert 0 <= run['concept_shift']['average_best_accuracy'] <= 1
  assert sum(len(r['concept_shifts']) for r in summary['runs']) > 0  # p = 0.5 over 12 rounds

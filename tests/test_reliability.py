"""Exact resume after kill -9, divergence reporting, and nothing half-written."""
import csv
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import fedjax_drift
from helpers import evaluated_rounds, tiny_config
from test_cli import RUN, cli

ARGS = ['--model=mlp', '--local_steps=40', '--local_epochs=0', '--batch_size=32', '--rounds=16',
        '--eval_every=1', '--checkpoint_every=2', '--progress=false', '--seed=3']


def _rows(path, drop=('elapsed_s',)):
  with open(path) as f:
    return [{k: v for k, v in row.items() if k not in drop} for row in csv.DictReader(f)]


@pytest.mark.slow
@pytest.mark.parametrize('kill_after', [5])
def test_kill_9_and_resume_is_bit_identical(tmp_path, kill_after):
  straight, killed = tmp_path / 'straight', tmp_path / 'killed'
  assert cli(*ARGS, f'--out={straight}', f'--save_params={tmp_path}/a.npz').returncode == 0

  proc = subprocess.Popen([sys.executable, RUN, *ARGS, f'--out={killed}'],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.time() + 300
  while evaluated_rounds(killed) < kill_after and proc.poll() is None and time.time() < deadline:
    time.sleep(0.02)
  assert proc.poll() is None, 'the run finished before it could be killed'
  os.kill(proc.pid, signal.SIGKILL)
  proc.wait()
  assert not os.path.exists(killed / 'summary.json')

  resumed = cli('--resume', f'--out={killed}', '--progress=false',
                f'--save_params={tmp_path}/b.npz')
  assert resumed.returncode == 0, resumed.stderr
  assert _rows(straight / 'metrics.csv') == _rows(killed / 'metrics.csv')
  assert _rows(straight / 'rounds.csv') == _rows(killed / 'rounds.csv')
  a, b = np.load(tmp_path / 'a.npz'), np.load(tmp_path / 'b.npz')
  assert sorted(a.files) == sorted(b.files)
  for name in a.files:
    np.testing.assert_array_equal(a[name], b[name])


@pytest.mark.slow
def test_divergence_names_round_and_client_and_keeps_checkpoint(tiny_npz, unequal_partition,
                                                               tmp_path):
  out = tmp_path / 'run'
  result = cli(f'--dataset=npz:{tiny_npz}', f'--partition=file:{unequal_partition}',
               '--model=mlp', '--num_clients=4', '--clients_per_round=2', '--lr=1e30',
               '--local_steps=3', '--local_epochs=0', '--rounds=6', '--eval_every=1',
               f'--out={out}', '--progress=false')
  assert result.returncode == 3, result.stderr
  line = result.stderr.strip().splitlines()
  assert len(line) == 1 and 'round 1' in line[0] and 'client' in line[0], result.stderr
  assert 'no checkpoint from before it is kept' in line[0]  # round 1: none exists to name
  summary = json.load(open(out / 'summary.json'))  # the run is recorded as diverged, no score
  assert summary['status'] == 'diverged' and summary['diverged_round'] == 1
  assert summary['final_accuracy'] is None


@pytest.mark.slow
def test_resume_refuses_changed_flags_and_missing_run(tmp_path, tiny_npz, unequal_partition):
  missing = cli('--resume', f'--out={tmp_path}/none', '--progress=false')
  assert missing.returncode == 2 and 'no config.json' in missing.stderr
  out = tmp_path / 'run'
  assert cli(f'--dataset=npz:{tiny_npz}', f'--partition=file:{unequal_partition}',
             '--model=logreg', '--num_clients=4', '--clients_per_round=2', '--rounds=2',
             f'--out={out}', '--progress=false').returncode == 0
  changed = cli('--resume', f'--out={out}', '--lr=0.5', '--progress=false')
  assert changed.returncode == 2 and '--lr' in changed.stderr
  longer = cli('--resume', f'--out={out}', '--rounds=4', '--progress=false')
  assert longer.returncode == 0, longer.stderr
  assert [r['round'] for r in _rows(out / 'metrics.csv')] == ['0', '2', '4']


@pytest.mark.slow
def test_library_resume_matches_straight_run(tiny_npz, unequal_partition, tmp_path):
  def config(out, rounds):
    return tiny_config(tiny_npz, unequal_partition, model='mlp', clients_per_round=2,
                       rounds=rounds, eval_every=2, batch_size=4, out=str(out))
  fedjax_drift.run(config(tmp_path / 'a', 6), log=lambda *_: None)
  fedjax_drift.run(config(tmp_path / 'b', 4), log=lambda *_: None)
  fedjax_drift.resume(str(tmp_path / 'b'), rounds=6)
  assert _rows(tmp_path / 'a' / 'rounds.csv') == _rows(tmp_path / 'b' / 'rounds.csv')


def test_no_temporary_files_left(tiny_npz, unequal_partition, tmp_path):
  fedjax_drift.run(tiny_config(tiny_npz, unequal_partition, rounds=3, out=str(tmp_path / 'r')),
                   log=lambda *_: None)
  leftovers = [f for f in os.listdir(tmp_path / 'r') if '.tmp' in f]
  assert leftovers == []


def test_preflight_refuses_what_cannot_fit(tiny_npz, unequal_partition, tmp_path, monkeypatch):
  from fedjax_drift import preflight
  monkeypatch.setattr(preflight, 'available_memory', lambda: 1000)
  out = tmp_path / 'r'
  with pytest.raises(fedjax_drift.UserError, match='needs about'):
    fedjax_drift.run(tiny_config(tiny_npz, unequal_partition, out=str(out)),
                     log=lambda *_: None)
  assert not out.exists()


# Issue 12: nothing lost, nothing silently wrong. One test (or more) per numbered item.
def _quiet(config):
  return fedjax_drift.run(config, log=lambda *_: None)


def _copy(src, dst):
  dst.write_bytes(open(src, 'rb').read())
  return str(dst)


def _tree(root):
  """{relative path: bytes} of every file below root."""
  return {os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), 'rb').read()
          for d, _, files in os.walk(root) for f in files}


def _strict_json(path):
  with open(path) as f:
    return json.load(f, parse_constant=lambda c: pytest.fail(f'{path} holds bare {c}'))


def test_overwrite_keeps_user_files_and_inputs(tiny_npz, unequal_partition, tmp_path):
  out = tmp_path / 'run'
  _quiet(tiny_config(tiny_npz, unequal_partition, rounds=1, out=str(out)))
  data = _copy(tiny_npz, out / 'data.npz')
  (out / 'notes.txt').write_text('mine')
  config = tiny_config(data, unequal_partition, rounds=1, out=str(out), overwrite='yes')
  with pytest.raises(fedjax_drift.UserError, match='data.npz|notes.txt'):
    _quiet(config)
  assert (out / 'notes.txt').exists() and (out / 'data.npz').exists()
  (out / 'notes.txt').unlink()
  with pytest.raises(fedjax_drift.UserError, match='data.npz'):  # an input, even with force
    _quiet(dataclasses.replace(config, overwrite='force'))
  assert (out / 'data.npz').exists() and (out / 'config.json').exists()


def test_overwrite_replaces_own_files(tiny_npz, unequal_partition, tmp_path):
  out = tmp_path / 'run'
  _quiet(tiny_config(tiny_npz, unequal_partition, rounds=2, out=str(out)))
  _quiet(tiny_config(tiny_npz, unequal_partition, rounds=1, out=str(out), overwrite='yes'))
  assert _strict_json(out / 'summary.json')['rounds'] == 1
  assert sorted(os.listdir(out / 'checkpoints')) == ['1']


def test_overwrite_never_empties_the_working_directory(tiny_npz, tmp_path):
  (tmp_path / 'notes.txt').write_text('mine')
  for flag in ('--overwrite', '--overwrite=force'):
    result = cli(f'--dataset=npz:{tiny_npz}', '--partition=iid', '--num_clients=4',
                 '--clients_per_round=2', '--model=logreg', '--rounds=1', '--out=.', flag,
                 '--progress=false', cwd=str(tmp_path))
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert (tmp_path / 'notes.txt').read_text() == 'mine'


def test_second_writer_is_refused(tiny_npz, unequal_partition, tmp_path):
  from fedjax_drift import locks
  out = tmp_path / 'run'
  out.mkdir()
  with locks.Lock(str(out)):
    with pytest.raises(fedjax_drift.UserError, match='in use by another'):
      _quiet(tiny_config(tiny_npz, unequal_partition, out=str(out)))
  assert os.listdir(out) == []


def test_float64_beyond_float32_is_refused(tmp_path):
  x = np.ones((20, 3))
  x[3, 1] = 1e39  # finite as float64, inf as float32
  y = np.arange(20) % 2
  path = tmp_path / 'big.npz'
  np.savez(path, x_train=x, y_train=y, x_test=np.ones((4, 3)), y_test=y[:4])
  with pytest.raises(fedjax_drift.UserError, match='big.npz.*float32'):
    _quiet(fedjax_drift.Config(dataset=f'npz:{path}', model='logreg', num_clients=2,
                               clients_per_round=2, partition='iid', rounds=1,
                               out=str(tmp_path / 'r'), progress=False))


def test_resume_refuses_changed_inputs_and_stores_absolute_paths(
    tiny_npz, unequal_partition, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  _copy(tiny_npz, tmp_path / 'd.npz')
  _copy(unequal_partition, tmp_path / 'p.json')
  _quiet(tiny_config('d.npz', 'p.json', rounds=1, out='run'))
  saved = _strict_json(tmp_path / 'run' / 'config.json')
  assert saved['dataset'] == f'npz:{tmp_path}/d.npz'
  assert saved['partition'] == f'file:{tmp_path}/p.json'
  monkeypatch.chdir(tmp_path / 'run')  # relative paths would now resolve elsewhere
  fedjax_drift.resume(str(tmp_path / 'run'), rounds=2)
  before = _tree(tmp_path / 'run')
  (tmp_path / 'p.json').write_text((tmp_path / 'p.json').read_text().replace('[', '[ ', 1))
  with pytest.raises(fedjax_drift.UserError, match='p.json.*changed'):
    fedjax_drift.resume(str(tmp_path / 'run'), rounds=3)
  assert _tree(tmp_path / 'run') == before


def test_resume_refuses_rounds_below_the_checkpoint(tiny_npz, unequal_partition, tmp_path):
  out = tmp_path / 'run'
  _quiet(tiny_config(tiny_npz, unequal_partition, rounds=3, out=str(out)))
  before = _tree(out)
  with pytest.raises(fedjax_drift.UserError, match='--rounds=1.*round 3'):
    fedjax_drift.resume(str(out), rounds=1)
  assert _tree(out) == before


def _damage_latest(out, how):
  step = out / 'checkpoints' / max(os.listdir(out / 'checkpoints'), key=int)
  for f in (step / 'state' / 'd').iterdir():
    data = bytearray(f.read_bytes())
    if how == 'flip':
      data[len(data) // 3] ^= 0x04
    f.write_bytes(bytes(data) if how == 'flip' else bytes(data[:7]) if how == 'truncate'
                  else os.urandom(len(data)))


@pytest.mark.parametrize('how', ['flip', pytest.param('truncate', marks=pytest.mark.slow),
                                 pytest.param('garbage', marks=pytest.mark.slow)])
@pytest.mark.slow
def test_damaged_latest_checkpoint_falls_back_bit_identically(
    tiny_npz, unequal_partition, tmp_path, how):
  def config(out, rounds):
    return tiny_config(tiny_npz, unequal_partition, model='mlp', clients_per_round=2,
                       rounds=rounds, batch_size=4, keep_checkpoints=3, out=str(out),
                       save_params=str(out) + '.npz')
  _quiet(config(tmp_path / 'a', 5))
  _quiet(config(tmp_path / 'b', 4))
  _damage_latest(tmp_path / 'b', how)
  lines = []
  fedjax_drift.resume(str(tmp_path / 'b'), rounds=5, log=lines.append,
                      save_params=str(tmp_path / 'b.npz'))
  damaged = [line for line in lines if 'damaged (' in line]
  assert len(damaged) == 1 and 'round 4' in damaged[0] and 'round 3' in damaged[0], lines
  assert _rows(tmp_path / 'a' / 'rounds.csv') == _rows(tmp_path / 'b' / 'rounds.csv')
  a, b = np.load(tmp_path / 'a.npz'), np.load(tmp_path / 'b.npz')
  for name in a.files:
    np.testing.assert_array_equal(a[name], b[name])


@pytest.mark.slow
def test_no_intact_checkpoint_exit_2_and_nothing_changes(tiny_npz, unequal_partition,
                                                             tmp_path):
  out = tmp_path / 'run'
  assert cli(f'--dataset=npz:{tiny_npz}', f'--partition=file:{unequal_partition}',
             '--model=logreg', '--num_clients=4', '--clients_per_round=2', '--rounds=2',
             '--eval_every=1', f'--out={out}', '--progress=false').returncode == 0
  for step in os.listdir(out / 'checkpoints'):
    (out / 'checkpoints' / step / 'checksum' / 'metadata').write_text('{"sha256": "0"}')
  before = _tree(out)
  result = cli('--resume', f'--out={out}', '--rounds=4', '--progress=false')
  assert result.returncode == 2, result.stderr
  assert len(result.stderr.strip().splitlines()) == 1
  assert str(out / 'checkpoints') in result.stderr
  assert _tree(out) == before


def test_resume_refuses_a_directory_that_is_not_a_run(tmp_path):
  (tmp_path / 'config.json').write_text('{}')
  result = cli('--resume', f'--out={tmp_path}', '--progress=false')
  assert result.returncode == 2 and 'not a fedjax-drift run' in result.stderr, result.stderr
  assert (tmp_path / 'config.json').read_text() == '{}'


def test_path_problems_are_found_before_compiling(tiny_npz, unequal_partition, tmp_path,
                                                       monkeypatch):
  from fedjax_drift import simulation
  def no_compile(*_):
    raise AssertionError('compiled before checking the paths')
  monkeypatch.setattr(simulation, '_compile', no_compile)
  deep = tmp_path
  while len(str(deep)) < 4096 - 120:
    deep = deep / ('d' * 200)
  for out, save, flag in [('/proc/fedjax-drift-run', '', '--out'),
                          (str(deep), '', '--out'),
                          (str(tmp_path / 'r'), str(tmp_path / ('p' * 300 + '.npz')),
                           '--save_params'),
                          (str(tmp_path / 'r'), '/proc/p.npz', '--save_params')]:
    with pytest.raises(fedjax_drift.UserError, match=flag):
      _quiet(tiny_config(tiny_npz, unequal_partition, out=out, save_params=save))


def test_longest_legal_save_params_name_is_written(tiny_npz, unequal_partition, tmp_path):
  path = tmp_path / ('p' * 251 + '.npz')  # 255 characters: legal, '.tmpPID' was not
  _quiet(tiny_config(tiny_npz, unequal_partition, out=str(tmp_path / 'r'),
                     save_params=str(path)))
  assert np.load(path).files


def _wait_for(proc, predicate, timeout=120):
  deadline = time.time() + timeout
  while not predicate() and proc.poll() is None and time.time() < deadline:
    time.sleep(0.01)
  assert proc.poll() is None, 'the run ended before it could be interrupted'


@pytest.mark.slow
@pytest.mark.parametrize('moment', ['compiling', 'training'])
def test_sigint_one_line_exit_130_nothing_half_written(tmp_path, moment):
  out = tmp_path / 'run'
  proc = subprocess.Popen([sys.executable, RUN, *ARGS, '--rounds=2000', f'--out={out}'],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  if moment == 'compiling':  # the run directory exists once the lock is taken, before compiling
    _wait_for(proc, lambda: out.exists())
  else:
    _wait_for(proc, lambda: evaluated_rounds(out) >= 3)
  proc.send_signal(signal.SIGINT)
  _, err = proc.communicate(timeout=120)
  assert proc.returncode == 130, err
  assert len(err.strip().splitlines()) == 1 and 'Traceback' not in err, err
  assert ('--resume' in err) == (moment == 'training'), err
  left = [f for d, _, files in os.walk(tmp_path) for f in files if '.tmp' in f]
  assert left == []


def test_divergence_names_only_existing_checkpoints(tiny_npz, unequal_partition,
                                                          tmp_path):
  out = tmp_path / 'run'
  with pytest.raises(fedjax_drift.errors.DivergenceError) as e:
    _quiet(tiny_config(tiny_npz, unequal_partition, model='mlp', lr=1e30, rounds=4,
                       out=str(out)))
  assert 'round 1' in str(e.value) and 'round 0' not in str(e.value)
  assert not (out / 'checkpoints').exists() or not os.listdir(out / 'checkpoints')


def test_divergence_names_the_methods_own_step_knobs(tiny_npz, unequal_partition, tmp_path):
  """FedFOR's jump is alpha times the last global move whatever the lr: the hint names
  --for_alpha and --for_scale beside --lr (its recipe's step_knobs)."""
  with pytest.raises(fedjax_drift.errors.DivergenceError) as e:
    _quiet(tiny_config(tiny_npz, unequal_partition, algo='fedfor', model='mlp', lr=1e30,
                       rounds=3, out=str(tmp_path / 'run')))
  assert 'lower --lr (now 1e+30), --for_alpha (now 5), --for_scale (now' in str(e.value)


def test_huge_finite_updates_are_not_divergence(tiny_npz, unequal_partition, tmp_path):
  # Updates near 1e25 are finite in float32; their squared norm (1e50) is not.
  summary = _quiet(tiny_config(tiny_npz, unequal_partition, lr=1e25, rounds=1,
                               out=str(tmp_path / 'run')))
  assert summary['runs'][0]['status'] == 'ok'


def test_summary_is_strict_json(tiny_npz, unequal_partition, tmp_path):
  out = tmp_path / 'run'
  _quiet(tiny_config(tiny_npz, unequal_partition, rounds=2, out=str(out)))
  for name in ('summary.json', 'config.json'):
    _strict_json(out / name)
  from fedjax_drift import report
  report.write_json(str(out / 'nan.json'), {'final_loss': float('nan')})  # as a summary would
  assert _strict_json(out / 'nan.json') == {'final_loss': None,
                                            'non_finite': {'final_loss': 'NaN'}}


def test_resuming_a_finished_run_keeps_its_summary(tiny_npz, unequal_partition,
                                                         tmp_path):
  out = tmp_path / 'run'
  _quiet(tiny_config(tiny_npz, unequal_partition, rounds=2, out=str(out)))
  before = _tree(out)
  fedjax_drift.resume(str(out), log=lambda *_: None)
  assert _tree(out) == before

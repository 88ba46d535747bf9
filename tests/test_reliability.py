"""Exact resume after kill -9, divergence reporting, and nothing half-written."""
import csv
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import fedjax_drift
from helpers import tiny_config
from test_cli import RUN, cli

ARGS = ['--model=mlp', '--local_steps=40', '--local_epochs=0', '--batch_size=32', '--rounds=16',
        '--eval_every=1', '--checkpoint_every=2', '--progress=false', '--seed=3']


def _rows(path, drop=('elapsed_s',)):
  with open(path) as f:
    return [{k: v for k, v in row.items() if k not in drop} for row in csv.DictReader(f)]


def _evaluated_rounds(run_dir):
  path = os.path.join(run_dir, 'metrics.csv')
  if not os.path.exists(path):
    return 0
  with open(path) as f:
    return max(0, sum(1 for _ in f) - 2)


@pytest.mark.slow
@pytest.mark.parametrize('kill_after', [5])
def test_kill_9_and_resume_is_bit_identical(tmp_path, kill_after):
  straight, killed = tmp_path / 'straight', tmp_path / 'killed'
  assert cli(*ARGS, f'--out={straight}', f'--save_params={tmp_path}/a.npz').returncode == 0

  proc = subprocess.Popen([sys.executable, RUN, *ARGS, f'--out={killed}'],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.time() + 300
  while _evaluated_rounds(killed) < kill_after and proc.poll() is None and time.time() < deadline:
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
  assert not (out / 'summary.json').exists()


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
  from fedjax_drift import simulation
  monkeypatch.setattr(simulation, '_available_memory', lambda: 1000)
  out = tmp_path / 'r'
  with pytest.raises(fedjax_drift.UserError, match='needs about'):
    fedjax_drift.run(tiny_config(tiny_npz, unequal_partition, out=str(out)),
                     log=lambda *_: None)
  assert not out.exists()

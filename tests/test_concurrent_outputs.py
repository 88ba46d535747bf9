"""Two runs started at once with the same --save_params: the second is refused with one line,
never silently replacing the first's file (issue 34 item 3)."""
import os
import signal
import subprocess
import sys
import time

import pytest

from fedjax_drift import locks
from fedjax_drift.errors import UserError
from test_cli import ROOT, RUN, cli


def test_a_second_claim_on_the_same_output_is_refused(tmp_path):
  path = str(tmp_path / 'params.npz')
  with locks.output_claimed(path, f'--save_params={path}'):
    assert os.path.exists(locks.output_lock_path(path))
    with pytest.raises(UserError, match='--save_params=.*another fedjax-drift run'):
      with locks.output_claimed(path, f'--save_params={path}'):
        pass
  assert not os.path.exists(locks.output_lock_path(path))  # no trace after the run
  with locks.output_claimed(path, '--save_params'):  # free again
    pass


def test_a_lock_file_left_by_a_killed_run_holds_nothing(tmp_path):
  path = str(tmp_path / 'params.npz')
  open(locks.output_lock_path(path), 'w').close()  # its holder died: no flock on it
  with locks.output_claimed(path, '--save_params'):
    pass


@pytest.mark.slow
def test_two_runs_at_once_with_the_same_save_params(tmp_path, tiny_npz):
  params = tmp_path / 'params.npz'
  common = [f'--dataset=npz:{tiny_npz}', '--model=mlp', '--num_clients=4',
            '--clients_per_round=2', '--local_steps=2', '--local_epochs=0', '--eval_every=50',
            '--progress=false', f'--save_params={params}']
  first = subprocess.Popen([sys.executable, RUN, *common, '--rounds=100000',
                            f'--out={tmp_path / "a"}'], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, cwd=ROOT)
  try:
    deadline = time.time() + 300
    while not os.path.exists(locks.output_lock_path(params)) and time.time() < deadline:
      assert first.poll() is None, first.communicate()[1]
      time.sleep(0.05)
    second = cli(*common, '--rounds=2', f'--out={tmp_path / "b"}')
    assert second.returncode == 2, second.stderr
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and f'--save_params={params}' in lines[0], second.stderr
    assert not params.exists()
  finally:
    first.send_signal(signal.SIGINT)
    first.communicate(timeout=120)

"""SIGINT, SIGTERM and SIGHUP at any moment: one line, exit 128 + the signal, never lost
(issue 25 item 2, issue 24 item 6)."""
import gc
import os
import signal
import subprocess
import sys
import time

import pytest

from fedjax_drift import interrupts
from helpers import evaluated_rounds
from test_cli import RUN, cli

ARGS = ['--model=mlp', '--local_steps=40', '--local_epochs=0', '--batch_size=32',
        '--eval_every=1', '--checkpoint_every=2', '--progress=false', '--seed=3']
HARD_EXIT_S = 10  # experiments/run.py's bound after a signal
SLACK_S = 60      # process start and clean-up on a loaded machine

# Runs the CLI with a test hook installed first: `_signal_inside_gc` raises the signal from
# inside a garbage-collection callback (placed before jax's _xla_gc_callback), the moment the
# run directory exists, which is where a Ctrl-C under load was dropped ("Exception ignored
# in: <function _xla_gc_callback>"); `FEDJAX_TEST_STALL_COMPILE` makes compilation a C-level
# wait that never returns, as a long XLA compilation is for Python.
_WRAPPER = r'''
import gc, os, runpy, signal, sys, time
run, out = sys.argv[1], sys.argv[2]
fired = []
def _signal_inside_gc(phase, info):
  if phase == 'start' and not fired and os.path.isdir(out):
    fired.append(1)
    signal.raise_signal(signal.SIGINT)
if os.environ.get('FEDJAX_TEST_SIGNAL_IN_GC'):
  gc.callbacks.insert(0, _signal_inside_gc)
if os.environ.get('FEDJAX_TEST_STALL_COMPILE'):
  from fedjax_drift import simulation
  def stalled(study):
    open(out + '.stalled', 'w').close()
    while True:
      time.sleep(3600)  # resumed after each handler returns, like C++ that ignores signals
  simulation._compile = stalled
sys.argv = [run] + sys.argv[3:] + [f'--out={out}']
runpy.run_path(run, run_name='__main__')
'''


def _start(tmp_path, *args, env=None):
  script = tmp_path / 'wrapper.py'
  script.write_text(_WRAPPER)
  return subprocess.Popen([sys.executable, str(script), RUN, str(tmp_path / 'run'), *ARGS,
                           *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, env={**os.environ, **(env or {})})


def _wait_for(proc, predicate, timeout=300):
  deadline = time.time() + timeout
  while not predicate() and proc.poll() is None and time.time() < deadline:
    time.sleep(0.01)
  assert proc.poll() is None, 'the run ended before it could be signalled'


def _one_line(err):
  lines = err.strip().splitlines()
  assert len(lines) == 1 and 'Traceback' not in err and 'Exception ignored' not in err, err
  return lines[0]


# In-process: the guard itself.
def _signal_in_gc_callback(signum):
  fired = []

  def callback(phase, info):  # pylint: disable=unused-argument
    if phase == 'start' and not fired:
      fired.append(1)
      signal.raise_signal(signum)

  gc.callbacks.insert(0, callback)
  try:
    gc.collect()
    deadline = time.time() + 5
    while time.time() < deadline:  # the interrupt must arrive here, not be dropped
      time.sleep(0.01)
  finally:
    gc.callbacks.remove(callback)


def test_a_signal_inside_a_gc_callback_is_not_lost():
  dropped = []
  before = signal.getsignal(signal.SIGINT)  # SIG_IGN where pytest was started in the background
  hook, sys.unraisablehook = sys.unraisablehook, dropped.append
  try:
    with pytest.raises(interrupts.Interrupted) as e:
      with interrupts.guard():
        _signal_in_gc_callback(signal.SIGINT)
  finally:
    sys.unraisablehook = hook
  assert e.value.signum == signal.SIGINT and dropped == []
  assert signal.getsignal(signal.SIGINT) is before  # restored


@pytest.mark.parametrize('signum,code', [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_raise_like_sigint(signum, code):
  before = signal.getsignal(signum)
  with pytest.raises(interrupts.Interrupted) as e:
    with interrupts.guard():
      signal.raise_signal(signum)
      time.sleep(1)
  assert interrupts.exit_code(e.value) == code and 'stopped by' in str(e.value)
  assert signal.getsignal(signum) == before


def test_a_second_signal_does_not_cut_the_clean_up():
  cleaned = []
  with pytest.raises(interrupts.Interrupted):
    with interrupts.guard():
      try:
        signal.raise_signal(signal.SIGINT)
        time.sleep(1)
      finally:
        signal.raise_signal(signal.SIGINT)  # Ctrl-C pressed again while cleaning up
        time.sleep(0.1)
        cleaned.append(True)
  assert cleaned == [True]


def test_deferred_holds_every_signal_until_the_block_ends():
  done = []
  with pytest.raises(interrupts.Interrupted) as e:
    with interrupts.guard():
      with interrupts.deferred(writing=True):
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGINT)
        time.sleep(0.05)
        done.append(True)
  assert done == [True] and e.value.signum == signal.SIGTERM  # the first one counts


def test_check_raises_a_signal_something_swallowed():
  with pytest.raises(interrupts.Interrupted):
    with interrupts.guard():
      try:
        signal.raise_signal(signal.SIGINT)
        time.sleep(1)
      except BaseException:  # pylint: disable=broad-except
        pass  # what a careless library might do
      interrupts.check()


# End to end, through the command line.
@pytest.mark.slow
def test_sigint_inside_a_gc_callback_while_loading_ends_the_run(tmp_path):
  proc = _start(tmp_path, '--rounds=2000', env={'FEDJAX_TEST_SIGNAL_IN_GC': '1'})
  try:
    _, err = proc.communicate(timeout=HARD_EXIT_S + SLACK_S)
  finally:
    proc.kill()
  assert proc.returncode == 130, err
  assert 'nothing to resume' in _one_line(err)


@pytest.mark.slow
def test_repeated_sigint_during_compilation_under_load(tmp_path):
  """Ctrl-C pressed again and again from the moment the run directory exists, with another
  process burning a core: exit 130 within the bound, one line."""
  burner = subprocess.Popen([sys.executable, '-c', 'while True: pass'])
  try:
    proc = _start(tmp_path, '--rounds=2000')
    _wait_for(proc, lambda: (tmp_path / 'run').exists())
    first = time.time()
    while proc.poll() is None and time.time() - first < HARD_EXIT_S + SLACK_S:
      proc.send_signal(signal.SIGINT)
      time.sleep(0.2)
    _, err = proc.communicate(timeout=5)
  finally:
    burner.kill()
    proc.kill()
  assert proc.returncode == 130, err
  _one_line(err)
  assert [f for d, _, files in os.walk(tmp_path) for f in files if '.tmp' in f] == []


@pytest.mark.slow
def test_a_compilation_that_never_returns_ends_within_the_bound(tmp_path):
  proc = _start(tmp_path, '--rounds=2000', env={'FEDJAX_TEST_STALL_COMPILE': '1'})
  try:
    _wait_for(proc, lambda: (tmp_path / 'run.stalled').exists())
    sent = time.time()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=HARD_EXIT_S + SLACK_S)
    took = time.time() - sent
  finally:
    proc.kill()
  assert proc.returncode == 130, err
  assert 'nothing to resume' in _one_line(err)
  assert HARD_EXIT_S - 1 <= took <= HARD_EXIT_S + SLACK_S


@pytest.mark.slow
@pytest.mark.parametrize('signum,code', [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_leave_a_resumable_run(tmp_path, signum, code):
  out = tmp_path / 'run'
  proc = subprocess.Popen([sys.executable, RUN, *ARGS, '--rounds=2000', f'--out={out}'],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  try:
    _wait_for(proc, lambda: evaluated_rounds(out) >= 3)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=HARD_EXIT_S + SLACK_S)
  finally:
    proc.kill()
  assert proc.returncode == code, err
  line = _one_line(err)
  assert signal.Signals(signum).name in line and f'--resume --out={out}' in line, line
  done = evaluated_rounds(out)
  resumed = cli('--resume', f'--out={out}', f'--rounds={done + 2}', '--progress=false')
  assert resumed.returncode == 0, resumed.stderr
  assert evaluated_rounds(out) == done + 2


# Issue 24 item 6: the data import and a full disk.
def _downloads(tmp_path):
  import fixtures  # pylint: disable=g-import-not-at-top
  fixtures.write_idx_dir(str(tmp_path / 'downloads' / 'mnist'), n_train=20, n_test=10)
  return str(tmp_path / 'downloads')


def _cache_files():
  root = os.environ['FEDJAX_DRIFT_CACHE']  # each test's own (conftest)
  return [f for _, _, files in os.walk(root) for f in files]


def _partial_then(action):
  """An np.savez that writes part of the file, then does `action` (raise, or a signal)."""
  def savez(file, **_):  # the open temporary (report.atomic_write_with), or a path
    if hasattr(file, 'write'):
      file.write(b'PK\x03\x04 half of an npz')
    else:
      with open(file, 'wb') as f:
        f.write(b'PK\x03\x04 half of an npz')
    action()
  return savez


def test_data_import_full_disk_is_one_line_naming_the_file(tmp_path, capsys, monkeypatch):
  import errno  # pylint: disable=g-import-not-at-top
  from fedjax_drift.data import prepare, sources  # pylint: disable=g-import-not-at-top
  root = _downloads(tmp_path)

  def full():
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
  monkeypatch.setattr(sources.np, 'savez', _partial_then(full))
  assert prepare.main(['import', root]) == 2
  line = _one_line(capsys.readouterr().err)
  assert sources.imported_path('mnist') in line and 'No space left on device' in line, line
  assert _cache_files() == []


def test_data_import_unreadable_file_is_one_line_naming_it(tmp_path, capsys, monkeypatch):
  import errno  # pylint: disable=g-import-not-at-top
  from fedjax_drift.data import prepare, sources  # pylint: disable=g-import-not-at-top
  root = _downloads(tmp_path)
  name = os.path.join(root, 'mnist', 'train-images-idx3-ubyte.gz')

  def unreadable(_):
    raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), name)
  monkeypatch.setattr(sources, 'read_idx_dir', unreadable)
  assert prepare.main(['import', root]) == 2
  line = _one_line(capsys.readouterr().err)
  assert name in line and 'Permission denied' in line, line


@pytest.mark.parametrize('signum,code', [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_data_import_interrupted_leaves_no_half_written_file(tmp_path, capsys, monkeypatch,
                                                              signum, code):
  from fedjax_drift.data import prepare, sources  # pylint: disable=g-import-not-at-top
  root = _downloads(tmp_path)

  def signalled():
    signal.raise_signal(signum)
    time.sleep(2)
  monkeypatch.setattr(sources.np, 'savez', _partial_then(signalled))
  assert prepare.main(['import', root]) == code
  line = _one_line(capsys.readouterr().err)
  assert 'run the import again' in line, line
  assert _cache_files() == []


def test_full_disk_during_a_checkpoint_is_one_line(tiny_npz, unequal_partition, tmp_path,
                                                  monkeypatch, capfd):
  import logging  # pylint: disable=g-import-not-at-top
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  import fedjax_drift  # pylint: disable=g-import-not-at-top
  from helpers import tiny_config  # pylint: disable=g-import-not-at-top

  def full(self, step, *args, **kwargs):  # what orbax's writer threads do on ENOSPC
    os.makedirs(os.path.join(self.directory, f'{step}.orbax-checkpoint-tmp'))
    for _ in range(5):
      logging.getLogger('absl').error('_SignalingThread.run() raised an exception: '
                                      'RESOURCE_EXHAUSTED: No space left on device')
    raise ValueError('RESOURCE_EXHAUSTED: Error writing "d/0" in OCDBT database: Failed to '
                     "write 307588 bytes to file 17: No space left on device "
                     "[os_error_code='28']")
  monkeypatch.setattr(ocp.CheckpointManager, 'save', full)
  out = tmp_path / 'run'
  capfd.readouterr()
  config = tiny_config(tiny_npz, unequal_partition, rounds=2, out=str(out))
  with pytest.raises(fedjax_drift.UserError,
                     match=r'checkpoint .*checkpoints/1: No space left on device; no '
                           'checkpoint was kept: make room, then run the same command again'):
    fedjax_drift.run(config, log=lambda *_: None)
  assert capfd.readouterr().err == ''
  # The partial step is gone, and with no checkpoint kept so is all the run created
  # (issue 45 item 13): the same command runs again without --overwrite.
  assert not out.exists()
  monkeypatch.undo()
  fedjax_drift.run(config, log=lambda *_: None)
  assert (out / 'summary.json').exists()


def test_full_disk_writing_a_result_file_names_it(tmp_path, monkeypatch):
  import errno  # pylint: disable=g-import-not-at-top
  import fedjax_drift  # pylint: disable=g-import-not-at-top
  from fedjax_drift import report  # pylint: disable=g-import-not-at-top

  def full(*_):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
  monkeypatch.setattr(report.os, 'fsync', full)
  path = tmp_path / 'metrics.csv'
  with pytest.raises(fedjax_drift.UserError, match=f'{path}: No space left on device'):
    report.write_csv(str(path), [{'round': 1}])
  assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_full_disk_on_a_small_tmpfs_then_resume(tmp_path):
  """A real full disk: --out on a 2 MB tmpfs (needs root to mount; skipped otherwise)."""
  mount = tmp_path / 'small'
  mount.mkdir()
  if subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', str(mount)],
                    capture_output=True).returncode != 0:
    pytest.skip('cannot mount a tmpfs here')
  try:
    out = mount / 'run'
    result = cli(*ARGS, '--local_steps=5', '--rounds=8', f'--out={out}')
    assert result.returncode == 2, result.stderr
    line = _one_line(result.stderr)
    assert 'No space left on device' in line and f'{out}/checkpoints/' in line, line
    assert not [d for d in os.listdir(out / 'checkpoints') if not d.isdigit()]
    subprocess.run(['mount', '-o', 'remount,size=64m', str(mount)], check=True)
    resumed = cli('--resume', f'--out={out}', '--progress=false')
    assert resumed.returncode == 0, resumed.stderr
    assert (out / 'summary.json').exists()
  finally:
    subprocess.run(['umount', '-l', str(mount)], capture_output=True)

"""Fault-probe findings of issue 45 item 13: a failed new run removes only what it created,
and docs/reliability.md does not promise bit-equal sweeps without their diverged points."""
import os

from fedjax_drift import rundir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_undo_removes_only_the_runs_recorded_entries(tmp_path):
  record = rundir.Record.new(str(tmp_path))
  for name in ('config.json', 'checkpoints'):
    record.add(name)
  (tmp_path / 'config.json').write_text('{}')
  (tmp_path / 'checkpoints').mkdir()
  (tmp_path / 'notes.txt').write_text('the user\'s')  # never recorded: never removed
  assert sorted(rundir.undo(record)) == ['checkpoints', 'config.json']
  assert os.listdir(tmp_path) == ['notes.txt']


def test_reliability_page_says_float_rounding_for_sweeps_without_diverged_points():
  with open(os.path.join(ROOT, 'docs', 'reliability.md')) as f:
    text = ' '.join(f.read().split())
  assert 'without the diverged points to float rounding' in text
  assert 'bit for bit those of the sweep without the diverged points' not in text


def test_a_killed_checkpoint_write_leaves_no_warning_on_resume(tiny_npz, unequal_partition,
                                                               tmp_path, caplog):
  """The unfinished step a killed write left is removed before the next save, silently
  (orbax would warn through absl when writing that step again)."""
  import logging  # pylint: disable=g-import-not-at-top
  import fedjax_drift  # pylint: disable=g-import-not-at-top
  from helpers import tiny_config  # pylint: disable=g-import-not-at-top
  out = tmp_path / 'run'
  fedjax_drift.run(tiny_config(tiny_npz, unequal_partition, rounds=2, checkpoint_every=1,
                               out=str(out)), log=lambda *_: None)
  for name in ('3.orbax-checkpoint-tmp', '3.orbax-checkpoint-tmp-1733400000'):
    (out / 'checkpoints' / name / 'state').mkdir(parents=True)  # killed mid-write
  with caplog.at_level(logging.WARNING):
    fedjax_drift.resume(str(out), rounds=3, log=lambda *_: None)
  assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
  assert not [n for n in os.listdir(out / 'checkpoints') if 'tmp' in n]


def test_a_lost_peer_during_a_checkpoint_write_is_named_not_the_disk(tmp_path, monkeypatch):
  """After SIGKILL to one process of two, the survivor's failed write names the lost peer."""
  from fedjax_drift import checkpoint  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(checkpoint.jax, 'process_count', lambda: 2)
  monkeypatch.setattr(checkpoint.jax, 'process_index', lambda: 0)
  (tmp_path / 'checkpoints' / '2').mkdir(parents=True)
  error = ValueError('INTERNAL: Gloo AllGather failed: [pair.cc:598] Connection closed by peer '
                     '[127.0.0.1]:41385')
  line = checkpoint._write_failure(str(tmp_path / 'checkpoints' / '4'), error)
  assert 'process 1 of this multi-process run was lost during the write' in line, line
  assert 'make room' not in line and f'--resume --out={tmp_path}' in line
  monkeypatch.setattr(checkpoint.jax, 'process_count', lambda: 1)  # one process: the disk's
  assert 'make room' in checkpoint._write_failure(str(tmp_path / 'checkpoints' / '4'),
                                                  OSError(28, 'No space left on device'))

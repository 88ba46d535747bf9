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

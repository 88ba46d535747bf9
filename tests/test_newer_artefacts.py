"""Artefacts written by a newer version (a run record or a checkpoint of a higher format) are
refused by name instead of resumed silently; a config.json edited together with the record's
copy of its flags says so instead of an empty "()" (issue 34 item 5)."""
import json
import shutil

import pytest

import fedjax_drift
from fedjax_drift import rundir
from helpers import tiny_config


@pytest.fixture(scope='module', name='finished')
def _finished(tmp_path_factory, tiny_npz, unequal_partition):
  """A two-round run checkpointed at round 2, then copied per test."""
  run_dir = tmp_path_factory.mktemp('newer') / 'run'
  fedjax_drift.run(tiny_config(tiny_npz, unequal_partition, rounds=2, checkpoint_every=2,
                               out=str(run_dir)))
  return run_dir


def _copy(finished, tmp_path):
  run_dir = tmp_path / 'run'
  shutil.copytree(finished, run_dir)
  return run_dir


def _edit_json(path, **changes):
  data = json.loads(path.read_text())
  data.update(changes)
  path.write_text(json.dumps(data))


def test_a_run_record_of_a_newer_format_is_refused(finished, tmp_path):
  run_dir = _copy(finished, tmp_path)
  _edit_json(run_dir / rundir.MARKER, format=99, version='9.0')
  with pytest.raises(fedjax_drift.UserError, match=r'written by a newer fedjax-drift \(version '
                     r'9.0, record format 99'):
    fedjax_drift.resume(str(run_dir), rounds=3)


def test_a_checkpoint_of_a_newer_format_is_refused(finished, tmp_path):
  run_dir = _copy(finished, tmp_path)
  _edit_json(run_dir / 'checkpoints' / '2' / 'checksum' / 'metadata', format=99)
  with pytest.raises(fedjax_drift.UserError, match=r'checkpoint at round 2 .* newer '
                     r'fedjax-drift \(checkpoint format 99'):
    fedjax_drift.resume(str(run_dir), rounds=3)


def test_a_config_edited_with_the_records_copy_says_so(finished, tmp_path):
  run_dir = _copy(finished, tmp_path)
  _edit_json(run_dir / 'config.json', lr=0.5)
  record = json.loads((run_dir / rundir.MARKER).read_text())
  _edit_json(run_dir / rundir.MARKER, config={**record['config'], 'lr': 0.5})
  with pytest.raises(fedjax_drift.UserError) as e:
    fedjax_drift.resume(str(run_dir), rounds=3)
  assert 'was edited since' in str(e.value) and '()' not in str(e.value)
  assert 'copy of the flags was edited too' in str(e.value)


def test_a_config_with_a_newer_versions_flag_names_the_file_and_version(finished, tmp_path):
  """issue 45 item 13: not a bare "unknown flag"."""
  run_dir = _copy(finished, tmp_path)
  _edit_json(run_dir / 'config.json', flag_of_the_future=1)
  _edit_json(run_dir / rundir.MARKER, version='9.0')
  with pytest.raises(fedjax_drift.UserError) as e:
    fedjax_drift.resume(str(run_dir), rounds=3)
  line = str(e.value)
  assert line.startswith(f'--resume: {run_dir / "config.json"} sets --flag_of_the_future, ')
  assert 'written by fedjax-drift 9.0 (a newer one?)' in line and '\n' not in line

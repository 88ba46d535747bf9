"""Issue 24 items 1-3: ownership by record, every data split checked alike, inputs and state
tied to the run. Each test failed on the code before the record (6fae839)."""
import dataclasses
import hashlib
import json
import os
import shutil

import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import rundir, simulation
from fedjax_drift.data import sources
from fedjax_drift.errors import UserError
from helpers import tiny_config


def _quiet(config):
  return fedjax_drift.run(config, log=lambda *_: None)


def _tree(root):
  """{relative path: bytes} of every file below root."""
  return {os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), 'rb').read()
          for d, _, files in os.walk(root) for f in files}


def _other_tools_folder(path):
  """What another ML tool leaves: its own config.json, checkpoint, TensorBoard dir, a plot."""
  (path / 'checkpoints').mkdir(parents=True)
  (path / 'tensorboard').mkdir()
  (path / 'config.json').write_text('{"lr": 0.1, "epochs": 30}')
  (path / 'checkpoints' / 'epoch=29.ckpt').write_bytes(b'weights')
  (path / 'tensorboard' / 'events.out.tfevents.1').write_bytes(b'events')
  (path / 'loss.png').write_bytes(b'png')
  return path


# 1. Ownership by record, not by name.
def test_run_records_every_entry_it_creates(tiny_npz, unequal_partition, tmp_path):
  out = tmp_path / 'run'
  _quiet(tiny_config(tiny_npz, unequal_partition, rounds=2, out=str(out), tensorboard=True,
                     save_params=str(out / 'final.npz')))
  record = json.loads((out / rundir.MARKER).read_text())
  assert sorted(os.listdir(out)) == sorted(record['entries'] + [rundir.MARKER])
  assert {'config.json', 'checkpoints', 'tensorboard', 'summary.json', 'accuracy.png',
          'final.npz'} <= set(record['entries'])
  assert len(record['run_id']) == 32 and record['finished'] is True
  assert record['version'] == fedjax_drift.__version__ and record['config_sha256']


def test_bare_overwrite_leaves_another_tools_folder_alone(tiny_npz, unequal_partition,
                                                          tmp_path):
  out = _other_tools_folder(tmp_path / 'theirs')
  before = _tree(out)
  for mode in ('yes', 'force'):  # force acts only on an empty or recorded directory
    with pytest.raises(UserError, match='no fedjax-drift record'):
      _quiet(tiny_config(tiny_npz, unequal_partition, out=str(out), overwrite=mode))
    assert _tree(out) == before


def test_force_on_an_unrecorded_directory_is_refused(tmp_path):
  (tmp_path / 'notes.txt').write_text('mine')
  with pytest.raises(UserError, match='notes.txt'):
    rundir.check_out(str(tmp_path), resume=False, overwrite='force')
  with pytest.raises(UserError, match='notes.txt'):
    rundir.clear(str(tmp_path), 'force')
  assert (tmp_path / 'notes.txt').read_text() == 'mine'


def test_force_never_acts_on_home_root_or_their_ancestors(tmp_path, monkeypatch):
  home = tmp_path / 'users' / 'me'
  home.mkdir(parents=True)
  (home / '.bashrc').write_text('mine')
  (home / '.fedjax-drift.json').write_text(json.dumps(  # even a home that looks like a run
      {'tool': 'fedjax-drift', 'run_id': '0' * 32, 'entries': ['.bashrc'],
       'temporaries': '.fjd-0000????.tmp'}))
  monkeypatch.setenv('HOME', str(home))
  for target, why in ((home, r'\$HOME'), (tmp_path / 'users', 'ancestor of \\$HOME'),
                      (tmp_path, 'ancestor'), ('/', '/')):
    with pytest.raises(UserError, match=why):
      rundir.plan_clear(str(target), 'force')
  with pytest.raises(UserError, match=r'\$HOME'):
    rundir.check_out(str(home), resume=False, overwrite='force')
  assert (home / '.bashrc').read_text() == 'mine'


def test_resume_of_a_finished_run_keeps_user_files_that_look_temporary(
    tiny_npz, unequal_partition, tmp_path):
  out = tmp_path / 'run'
  _quiet(tiny_config(tiny_npz, unequal_partition, rounds=1, out=str(out)))
  for name in ('analysis.tmp1.ipynb', 'metrics.csv.tmp4242', '.fjd-0123abcd.tmp'):
    (out / name).write_text('mine')
  before = _tree(out)
  fedjax_drift.resume(str(out), log=lambda *_: None)
  assert _tree(out) == before


def test_killed_runs_own_temporaries_are_removed(tiny_npz, unequal_partition, tmp_path):
  out = tmp_path / 'run'
  _quiet(tiny_config(tiny_npz, unequal_partition, rounds=1, out=str(out)))
  tag = rundir.Record.load(str(out)).temp_tag
  (out / f'.fjd-{tag}beef.tmp').write_text('half a summary')
  fedjax_drift.resume(str(out), rounds=2, log=lambda *_: None)
  assert not (out / f'.fjd-{tag}beef.tmp').exists()


def test_save_params_never_replaces_a_file_without_overwrite(tiny_npz, unequal_partition,
                                                             tmp_path):
  params = tmp_path / 'params.npz'
  params.write_bytes(b'my own results')
  config = tiny_config(tiny_npz, unequal_partition, out=str(tmp_path / 'run'),
                       save_params=str(params))
  with pytest.raises(UserError, match='--save_params=.*--overwrite'):
    _quiet(config)
  assert params.read_bytes() == b'my own results' and not (tmp_path / 'run').exists()
  _quiet(dataclasses.replace(config, overwrite='yes'))
  assert np.load(params).files
  # A file this run wrote, unchanged, is its own: --resume may write it again.
  fedjax_drift.resume(str(tmp_path / 'run'), rounds=2, save_params=str(params),
                      log=lambda *_: None)
  params.write_bytes(b'edited since')
  with pytest.raises(UserError, match='--save_params'):
    fedjax_drift.resume(str(tmp_path / 'run'), rounds=3, save_params=str(params),
                        log=lambda *_: None)


def test_run_stopped_between_summary_and_plots_is_finished_by_resume(
    tiny_npz, unequal_partition, tmp_path, monkeypatch):
  out = tmp_path / 'run'
  config = tiny_config(tiny_npz, unequal_partition, rounds=2, out=str(out),
                       save_params=str(tmp_path / 'p.npz'))

  def stopped(*_):
    raise KeyboardInterrupt
  with monkeypatch.context() as m:
    m.setattr(simulation, '_plot', stopped)
    with pytest.raises(KeyboardInterrupt):
      _quiet(config)
  assert (out / 'summary.json').exists() and not (out / 'accuracy.png').exists()
  fedjax_drift.resume(str(out), save_params=str(tmp_path / 'p.npz'), log=lambda *_: None)
  assert (out / 'accuracy.png').exists() and (out / 'drift.png').exists()
  assert np.load(tmp_path / 'p.npz').files
  assert rundir.Record.load(str(out)).data['finished'] is True


@pytest.mark.slow
def test_directory_from_before_records(tiny_npz, unequal_partition, tmp_path):
  """Refused by --overwrite, naming the missing record; adopted by --resume."""
  out = tmp_path / 'run'
  _quiet(tiny_config(tiny_npz, unequal_partition, rounds=1, out=str(out)))
  (out / rundir.MARKER).unlink()
  with pytest.raises(UserError, match='no fedjax-drift record'):
    _quiet(tiny_config(tiny_npz, unequal_partition, out=str(out), overwrite='yes'))
  lines = []
  fedjax_drift.resume(str(out), rounds=2, log=lines.append)
  assert any('predates' in line for line in lines), lines
  record = rundir.Record.load(str(out))
  assert record.data['adopted'] and 'metrics.csv' in record.data['entries']
  _quiet(tiny_config(tiny_npz, unequal_partition, out=str(out), overwrite='yes'))


# 2. Every split checked and scaled alike.
def _images(n, dtype=np.uint8):
  return np.random.default_rng(n).integers(0, 255, (n, 4, 4, 1)).astype(dtype)


def test_nan_test_features_are_refused_next_to_uint8_training_images():
  y = np.arange(8) % 2
  x_test = _images(4, np.float32) / 255
  x_test[1, 0, 0, 0] = np.nan
  with pytest.raises(UserError, match='x_test holds NaN'):
    sources.validate('npz:/d.npz', _images(8), y, x_test, y[:4])


@pytest.mark.parametrize('train,test', [(np.uint8, np.float32), (np.float64, np.uint8)])
def test_splits_of_different_scale_are_refused(train, test):
  y = np.arange(8) % 2
  with pytest.raises(UserError, match='x_train is .* and x_test is .*uint8 or both as floats'):
    sources.validate('npz:/d.npz', _images(8, train), y, _images(4, test), y[:4])
  assert sources.validate('d', _images(8), y, _images(4), y[:4]).x_test.dtype == np.uint8


def test_mixed_scale_npz_is_refused_before_any_work(tmp_path):
  y = np.arange(20) % 2
  path = tmp_path / 'mixed.npz'
  np.savez(path, x_train=_images(20), y_train=y, x_test=_images(4, np.float32), y_test=y[:4])
  with pytest.raises(UserError, match='mixed.npz.*x_test is float32'):
    _quiet(fedjax_drift.Config(dataset=f'npz:{path}', model='logreg', num_clients=2,
                               clients_per_round=2, partition='iid', rounds=1,
                               out=str(tmp_path / 'r'), progress=False))
  assert not (tmp_path / 'r').exists()


# 3. Inputs and state tied to the run.
def _sha256(path):
  return hashlib.sha256(open(path, 'rb').read()).hexdigest()


def test_input_fingerprint_is_of_the_bytes_read(tiny_npz, unequal_partition, tmp_path,
                                                monkeypatch):
  data = tmp_path / 'd.npz'
  shutil.copy(tiny_npz, data)
  read = _sha256(data)
  compile_ = simulation._compile

  def swap_while_compiling(study):
    data.write_bytes(data.read_bytes() + b'\0')  # a different file, after it was read
    return compile_(study)
  monkeypatch.setattr(simulation, '_compile', swap_while_compiling)
  _quiet(tiny_config(str(data), unequal_partition, out=str(tmp_path / 'a')))
  saved = json.loads((tmp_path / 'a' / 'config.json').read_text())['_resolved']['inputs']
  assert [f['sha256'] for f in saved['files'] if f['path'] == str(data)] == [read]


def test_input_changed_while_read_is_refused(tiny_npz, unequal_partition, tmp_path,
                                             monkeypatch):
  data = tmp_path / 'd.npz'
  shutil.copy(tiny_npz, data)
  build = simulation.build

  def swap_while_reading(*args):
    study = build(*args)
    data.write_bytes(data.read_bytes() + b'\0')
    return study
  monkeypatch.setattr(simulation, 'build', swap_while_reading)
  with pytest.raises(UserError, match='d.npz.*changed while it was being read'):
    _quiet(tiny_config(str(data), unequal_partition, out=str(tmp_path / 'a')))


def test_resume_refuses_a_hand_edited_config(tiny_npz, unequal_partition, tmp_path):
  out = tmp_path / 'run'
  _quiet(tiny_config(tiny_npz, unequal_partition, rounds=2, out=str(out)))
  path = out / 'config.json'
  saved = json.loads(path.read_text())
  path.write_text(json.dumps({**saved, 'lr': 0.5}))
  before = _tree(out)
  with pytest.raises(UserError, match=r'config.json was edited.*--lr: 0.1 when recorded, '
                     r'0.5 now'):
    fedjax_drift.resume(str(out), rounds=3, log=lambda *_: None)
  assert _tree(out) == before
  # The library's own resume with other flags is refused the same way.
  path.write_text(json.dumps(saved))
  with pytest.raises(UserError, match='--lr: 0.1 when recorded, 0.2 now'):
    _quiet(tiny_config(tiny_npz, unequal_partition, rounds=3, out=str(out), lr=0.2,
                       resume=True))


def test_resume_refuses_a_checkpoint_copied_from_another_run(tiny_npz, unequal_partition,
                                                             tmp_path):
  for name in ('a', 'b'):  # the same flags: only the record tells them apart
    _quiet(tiny_config(tiny_npz, unequal_partition, rounds=2, out=str(tmp_path / name)))
  shutil.rmtree(tmp_path / 'b' / 'checkpoints' / '2')
  shutil.copytree(tmp_path / 'a' / 'checkpoints' / '2', tmp_path / 'b' / 'checkpoints' / '2')
  before = _tree(tmp_path / 'b')
  with pytest.raises(UserError, match='round 2 .* belongs to another run'):
    fedjax_drift.resume(str(tmp_path / 'b'), rounds=3, log=lambda *_: None)
  assert _tree(tmp_path / 'b') == before

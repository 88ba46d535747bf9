"""The pieces behind issue 12, one by one: run-directory layout, lock, path checks, input
fingerprints, checksummed checkpoints, strict JSON, float32 finiteness, deferred SIGINT."""
import json
import os
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_drift import inputs, interrupts, locks, report, rundir, study
from fedjax_drift.checkpoint import Checkpointer
from fedjax_drift.data import sources
from fedjax_drift.errors import UserError
from helpers import tiny_config

RUN_CONFIG = {'algo': 'fedavg', 'model': 'logreg', 'dataset': 'embedded', 'partition': 'iid',
              'rounds': 3, 'seed': 0, '_resolved': {}}


def _fake_run(path, extra=(), recorded=()):
  """A directory laid out like a finished run, with its record (rundir.Record) naming what
  the run wrote, plus `extra` foreign files (and `recorded` ones the record names too)."""
  os.makedirs(path / 'checkpoints' / '3', exist_ok=True)
  (path / 'config.json').write_text(json.dumps(RUN_CONFIG))
  own = ['config.json', 'checkpoints', 'summary.json', 'metrics.csv', 'rounds.csv',
         'accuracy.png']
  for name in own[2:]:
    (path / name).write_text('x')
  record = rundir.Record.new(str(path), entries=own + list(recorded))
  (path / f'.fjd-{record.temp_tag}abcd.tmp').write_text('x')  # a killed write of this run
  for name in list(extra) + list(recorded):
    (path / name).write_text('mine')
  return path


# 1. --overwrite removes only what the run's record names.
def test_overwrite_mode_spellings():
  assert [rundir.overwrite_mode(v) for v in ('', False, True, 'yes', 'true', 'force')] == \
      ['', '', 'yes', 'yes', 'yes', 'force']
  with pytest.raises(UserError, match='--overwrite=sure'):
    rundir.overwrite_mode('sure')


def test_clear_removes_only_own_files(tmp_path):
  run = _fake_run(tmp_path / 'run')
  removed = rundir.clear(str(run), 'yes')
  assert 'config.json' in removed and 'checkpoints' in removed
  assert os.listdir(run) == [rundir.MARKER]


def test_clear_refuses_foreign_file_naming_it(tmp_path):
  run = _fake_run(tmp_path / 'run', extra=['notes.txt'])
  with pytest.raises(UserError, match='notes.txt') as e:
    rundir.clear(str(run), 'yes')
  assert '\n' not in str(e.value) and '--overwrite=force' in str(e.value)
  assert (run / 'config.json').exists() and (run / 'notes.txt').exists()
  with pytest.raises(UserError, match='notes.txt'):
    rundir.check_out(str(run), resume=False, overwrite='yes')


def test_force_removes_foreign_files_but_never_inputs(tmp_path):
  run = _fake_run(tmp_path / 'run', extra=['notes.txt'])
  rundir.clear(str(run), 'force')
  assert os.listdir(run) == [rundir.MARKER]
  run = _fake_run(tmp_path / 'run', extra=['data.npz'])
  with pytest.raises(UserError, match='data.npz'):
    rundir.clear(str(run), 'force', inputs=[str(run / 'data.npz')])
  assert (run / 'data.npz').exists() and (run / 'config.json').exists()


def test_never_empties_the_working_directory(tmp_path, monkeypatch):
  run = _fake_run(tmp_path / 'run', extra=['notes.txt'])
  monkeypatch.chdir(run)
  with pytest.raises(UserError, match='working directory'):
    rundir.check_out('.', resume=False, overwrite='force')
  monkeypatch.chdir(tmp_path)
  (tmp_path / 'run' / 'sub').mkdir()
  monkeypatch.chdir(tmp_path / 'run' / 'sub')
  with pytest.raises(UserError, match='working directory'):
    rundir.clear(str(run), 'force')
  assert (run / 'notes.txt').exists()


def test_save_params_inside_the_run_is_own_when_recorded(tmp_path):
  run = _fake_run(tmp_path / 'run', recorded=['final.npz'])
  rundir.check_out(str(run), resume=False, overwrite='yes')
  rundir.clear(str(run), 'yes')
  assert os.listdir(run) == [rundir.MARKER]


# 2. An exclusive lock for the whole run.
def test_second_lock_is_refused_and_released(tmp_path):
  with locks.Lock(str(tmp_path)):
    with pytest.raises(UserError, match='in use by another'):
      locks.Lock(str(tmp_path))
  locks.Lock(str(tmp_path)).release()


def test_lock_of_a_killed_process_does_not_block(tmp_path):
  code = ('import sys, time; from fedjax_drift import locks; locks.Lock(sys.argv[1]); '
          'print("locked", flush=True); time.sleep(60)')
  proc = subprocess.Popen([sys.executable, '-c', code, str(tmp_path)], stdout=subprocess.PIPE,
                          text=True)
  assert proc.stdout.readline().strip() == 'locked'
  with pytest.raises(UserError, match='in use'):
    locks.Lock(str(tmp_path))
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  locks.Lock(str(tmp_path)).release()


def test_claimed_removes_a_directory_it_created_when_refused(tmp_path):
  with pytest.raises(UserError, match='late'):
    with locks.claimed(str(tmp_path / 'new')):
      raise UserError('late refusal')
  assert not (tmp_path / 'new').exists()


# 7, 8. Path checks before any work; not this tool's run.
def test_resume_refuses_a_directory_that_is_not_a_run(tmp_path):
  (tmp_path / 'config.json').write_text('{}')
  with pytest.raises(UserError, match='not a fedjax-drift run'):
    rundir.check_out(str(tmp_path), resume=True, overwrite='')
  assert (tmp_path / 'config.json').read_text() == '{}'


def test_refuses_out_inside_another_run(tmp_path):
  run = _fake_run(tmp_path / 'run')
  with pytest.raises(UserError, match='inside the run directory'):
    rundir.check_out(str(run / 'nested'), resume=False, overwrite='')
  with pytest.raises(UserError, match='inside another run'):
    rundir.check_save_params(str(run / 'p.npz'), str(tmp_path / 'other'))


def test_refuses_paths_too_long_including_temporaries(tmp_path):
  with pytest.raises(UserError, match='--save_params'):
    rundir.check_save_params(str(tmp_path / ('p' * 260 + '.npz')), str(tmp_path / 'r'))
  rundir.check_save_params(str(tmp_path / ('p' * 250 + '.npz')), str(tmp_path / 'r'))
  deep = tmp_path
  while len(str(deep)) < 4096 - 150:
    deep = deep / ('d' * 200)
  with pytest.raises(UserError, match='--out=.*characters'):
    rundir.check_out(str(deep), resume=False, overwrite='')


def test_refuses_unwritable_out(tmp_path):
  with pytest.raises(UserError, match='cannot write'):
    rundir.check_out('/proc/fedjax-drift-run', resume=False, overwrite='')
  if os.geteuid() != 0:  # root writes to read-only modes anyway
    ro = tmp_path / 'ro'
    ro.mkdir(mode=0o555)
    with pytest.raises(UserError, match='cannot write'):
      rundir.check_out(str(ro / 'run'), resume=False, overwrite='')


def test_save_params_cannot_replace_an_input_or_own_file(tmp_path):
  with pytest.raises(UserError, match='input'):
    rundir.check_save_params(str(tmp_path / 'd.npz'), str(tmp_path / 'r'),
                             inputs=[str(tmp_path / 'd.npz')])
  with pytest.raises(UserError, match='own config.json'):
    rundir.check_save_params(str(tmp_path / 'r' / 'config.json'), str(tmp_path / 'r'))


def test_temporaries_use_short_fixed_names_and_vanish_on_failure(tmp_path, monkeypatch):
  path = tmp_path / ('n' * 250 + '.npz')  # legal; '.tmp<pid>' would make it too long
  report.atomic_write(str(path), b'ok')
  assert path.read_bytes() == b'ok'

  def fail(*_):
    raise KeyboardInterrupt
  monkeypatch.setattr(os, 'replace', fail)
  with pytest.raises(KeyboardInterrupt):
    report.write_json(str(tmp_path / 'summary.json'), {'a': 1})
  assert sorted(os.listdir(tmp_path)) == [path.name]


# 4. Inputs by content hash and absolute path.
def test_fingerprint_and_changed_input(tmp_path, tiny_npz, unequal_partition, monkeypatch):
  part = tmp_path / 'parts.json'
  part.write_text(open(unequal_partition).read())
  monkeypatch.chdir(tmp_path)
  config = study.absolutize(tiny_config(tiny_npz, 'parts.json'))
  assert config.partition == f'file:{part}'
  saved = inputs.fingerprint(study.input_flags(config))
  assert {e['path'] for e in saved['files']} == {tiny_npz, str(part)}
  inputs.check_unchanged(saved, 'RUN')
  part.write_text(part.read_text().replace('[', '[ ', 1))
  with pytest.raises(UserError, match='parts.json.*changed'):
    inputs.check_unchanged(saved, 'RUN')
  part.unlink()
  with pytest.raises(UserError, match='parts.json.*no longer exists'):
    inputs.check_unchanged(saved, 'RUN')


def test_absolute_flags_leave_names_alone():
  values = inputs.absolute_flags({'dataset': 'embedded', 'partition': 'iid', 'data_dir': '',
                                  'lr': 0.1, 'out': 'r'})
  assert values == {'dataset': 'embedded', 'partition': 'iid', 'data_dir': '', 'lr': 0.1,
                    'out': os.path.abspath('r')}


# 6. Checkpoints: checksum, fallback, nothing changed by a failed restore.
def _tree(value):
  return {'round': jnp.array([value, value]), 'w': jnp.full((2, 3), float(value)),
          'key': jax.random.split(jax.random.key(value), 2)}


def _two_checkpoints(run):
  c = Checkpointer(str(run))
  c.save(_tree(3), {'rows': [3]}, step=3)
  c.save(_tree(5), {'rows': [5, float('nan')]}, step=5)
  c.close()


def _listing(root):
  return sorted((os.path.relpath(os.path.join(d, f), root), os.path.getsize(os.path.join(d, f)))
                for d, _, files in os.walk(root) for f in files)


def test_checkpointer_creates_nothing_until_saved(tmp_path):
  c = Checkpointer(str(tmp_path / 'r'))
  assert c.latest_round() is None and not (tmp_path / 'r').exists()


def test_checkpoint_round_trips_typed_keys_and_run_axis(tmp_path):
  _two_checkpoints(tmp_path)
  state, history = Checkpointer(str(tmp_path)).restore(_tree(0), log=print)
  np.testing.assert_array_equal(state['w'], _tree(5)['w'])
  np.testing.assert_array_equal(jax.random.key_data(state['key']),
                                jax.random.key_data(_tree(5)['key']))
  assert history['rows'][0] == 5


@pytest.mark.parametrize('damage', ['flip', 'truncate', 'history'])
def test_damaged_latest_falls_back_in_one_line(tmp_path, damage):
  _two_checkpoints(tmp_path)
  step = tmp_path / 'checkpoints' / '5'
  if damage == 'history':
    (step / 'history' / 'metadata').write_text('{"rows": [6]}')
  else:
    for f in (step / 'state' / 'd').iterdir():
      data = bytearray(f.read_bytes())
      if damage == 'flip':
        data[len(data) // 2] ^= 0x10
      f.write_bytes(bytes(data if damage == 'flip' else data[:len(data) // 2]))
  lines = []
  c = Checkpointer(str(tmp_path))
  state, history = c.restore(_tree(0), log=lines.append)
  assert history == {'rows': [3]} and float(state['w'][0, 0]) == 3.0
  assert len(lines) == 1 and 'round 5' in lines[0] and 'round 3' in lines[0]
  c.save(_tree(5), {'rows': [5]}, step=5)  # the damaged step is replaced
  assert Checkpointer(str(tmp_path)).restore(_tree(0))[1] == {'rows': [5]}


def test_no_intact_checkpoint_names_the_directory_and_changes_nothing(tmp_path):
  _two_checkpoints(tmp_path)
  for step in ('3', '5'):
    (tmp_path / 'checkpoints' / step / 'checksum' / 'metadata').write_text('{"sha256": "0"}')
  before = _listing(tmp_path)
  with pytest.raises(UserError, match=str(tmp_path / 'checkpoints')):
    Checkpointer(str(tmp_path)).restore(_tree(0))
  assert _listing(tmp_path) == before


# 3. Finiteness after the float32 cast.
def test_float64_beyond_float32_range_is_refused():
  x = np.ones((4, 2))
  x[1, 1] = 1e39
  y = np.array([0, 1, 0, 1])
  with pytest.raises(UserError, match="npz:/d.npz: x_train holds .*float32"):
    sources.validate('npz:/d.npz', x, y, np.ones((2, 2)), y[:2])
  assert sources.validate('d', np.ones((4, 2)), y, np.ones((2, 2)), y[:2]).x_train.dtype == \
      np.float32


# 10. Strict JSON.
def test_write_json_is_strict_and_says_why(tmp_path):
  report.write_json(str(tmp_path / 's.json'), {'loss': float('nan'), 'x': [1.0, float('inf')],
                                               'n': np.float32(2.5)})
  text = (tmp_path / 's.json').read_text()
  data = json.loads(text, parse_constant=lambda c: pytest.fail(f'bare {c}'))
  assert data['loss'] is None and data['x'] == [1.0, None] and data['n'] == 2.5
  assert data['non_finite'] == {'loss': 'NaN', 'x[1]': 'Infinity'}


# 9. SIGINT deferred over a critical block.
def test_deferred_sigint_is_raised_after_the_block():
  done = []
  with pytest.raises(KeyboardInterrupt):
    with interrupts.deferred():
      os.kill(os.getpid(), signal.SIGINT)
      time.sleep(0.05)
      done.append(True)
  assert done == [True]
  assert interrupts.message('r', False) == ('interrupted before the first checkpoint; nothing '
                                            'to resume')
  assert '--resume --out=r' in interrupts.message('r', True)


# Issue 24: the record's flag hash and the difference it names.
def test_flag_digest_ignores_int_float_spelling_and_names_the_difference():
  assert rundir.digest({'lr': 1, 'algo': 'fedavg'}) == rundir.digest({'algo': 'fedavg',
                                                                      'lr': 1.0})
  assert rundir.digest({'lr': 1}) != rundir.digest({'lr': 1.5})
  assert rundir.first_difference({'lr': 0.1, 'seed': 0}, {'lr': 0.1, 'seed': 2}) == \
      '--seed: 0 when recorded, 2 now'
  assert rundir.first_difference({'lr': 0.1}, {'lr': 0.1}) == ''


def test_record_rejects_a_foreign_or_damaged_marker(tmp_path):
  (tmp_path / rundir.MARKER).write_text('{"tool": "other"}')
  with pytest.raises(UserError, match='not a fedjax-drift run record'):
    rundir.Record.load(str(tmp_path))
  (tmp_path / rundir.MARKER).write_text('{')
  (tmp_path / 'notes.txt').write_text('mine')
  with pytest.raises(UserError, match='cannot read the run record'):
    rundir.plan_clear(str(tmp_path), 'yes')
  assert (tmp_path / 'notes.txt').exists()


@pytest.mark.parametrize('name', ['shifts.csv', 'client_acc.csv', 'features.npz',
                                  'attention.npz', 'attention.csv', 'metrics.csv'])
def test_save_params_never_takes_the_name_of_a_file_the_run_writes(tmp_path, name):
  """The concept-shift and diagnostics files are the run's own too (rundir.OWN_FILES)."""
  run_dir = tmp_path / 'run'
  with pytest.raises(UserError, match=f"would replace the run's own {name}"):
    rundir.check_save_params(str(run_dir / name), str(run_dir))

"""A --grid='algo:...' run is continued from its top directory (issue 45 item 5): a signal
names that directory, never a method's sub-directory, and a --resume of a method's
sub-directory is refused naming the top one."""
import os

import pytest

import fedjax_drift
from fedjax_drift import interrupts, methods
from fedjax_drift.errors import UserError
from helpers import tiny_config


def test_signal_during_a_method_names_the_top_directory(tiny_npz, unequal_partition, tmp_path):
  top = tmp_path / 'study'
  config = tiny_config(tiny_npz, unequal_partition, out=str(top),
                       grid='algo:fedavg,fedprox')

  def run_one(c, log):  # the second method is stopped, as simulation._run reports it
    if c.algo == 'fedprox':
      raise interrupts.Interrupted(interrupts.message(c.out, True))
    return {}

  with pytest.raises(KeyboardInterrupt) as e:
    methods.run_all(config, lambda *_: None, run_one)
  assert str(e.value) == f'interrupted; continue with --resume --out={top}'
  assert interrupts.message(str(top / 'fedprox'), True).endswith(f'--out={top / "fedprox"}')


def test_resume_of_a_method_directory_names_the_top_one(tiny_npz, unequal_partition,
                                                        tmp_path):
  top = tmp_path / 'study'
  config = tiny_config(tiny_npz, unequal_partition, out=str(top),
                       grid='algo:fedavg,fedprox')
  with pytest.raises(KeyboardInterrupt):  # stopped in the first method, before a checkpoint
    methods.run_all(config, lambda *_: None,
                    lambda c, log: (_ for _ in ()).throw(KeyboardInterrupt()))
  os.makedirs(top / 'fedprox')
  with pytest.raises(UserError) as e:
    fedjax_drift.resume(str(top / 'fedprox'))
  line = str(e.value)
  assert '\n' not in line and line.startswith(f'--resume: {top / "fedprox"} is one method')
  assert f'continue with --resume --out={top} ' in line and 'table.csv' in line
  assert methods.enclosing_run(str(top)) == ''  # the top directory itself resumes as usual

"""outputs.py (what simulation.py opens a run with): the flags that define a run (`run_flags`,
what the run record hashes), so a run directory written before a flag existed still resumes:
every field at its default is left out (a new flag's default is what the old run did), while
any non-default flag still counts.

The host loop end to end: test_cli.py (a real run), test_reliability.py (resume, divergence),
test_study.py (the runs it builds)."""
import dataclasses

from fedjax_drift import outputs, rundir
from fedjax_drift.config import Config


def test_default_fields_do_not_enter_the_run_digest():
  assert outputs.run_flags(dataclasses.asdict(Config())) == {}
  flags = outputs.run_flags(dataclasses.asdict(Config(lr=0.5, algo='fedprox')))
  assert flags == {'algo': 'fedprox', 'lr': 0.5}


def test_a_flag_added_later_at_its_default_keeps_the_digest():
  old = outputs.run_flags(dataclasses.asdict(Config(lr=0.5)))
  values = dataclasses.asdict(Config(lr=0.5))
  # What an older version recorded had no such field at all: same digest as today's.
  assert rundir.digest(old) == rundir.digest(outputs.run_flags(values))
  changed = outputs.run_flags(dataclasses.asdict(Config(lr=0.5, rounds=7)))
  assert 'rounds' not in changed  # a launch may change --rounds
  other = outputs.run_flags(dataclasses.asdict(Config(lr=0.5, seed=3)))
  assert rundir.digest(other) != rundir.digest(old)
  assert rundir.first_difference(old, other) == "--seed: '(default)' when recorded, 3 now"

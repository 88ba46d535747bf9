"""experiments/presets.py runs each distinct method sweep of a command once (presetlib/sharing.py):
the tables are the same cell for cell as with every sweep run on its own, fewer sweeps run, the
later tables' run directories link to the first's, a rerun keeps them, and a user's run
directory where a link would go is never removed."""
import dataclasses
import json
import os
import sys

import pytest

import fedjax_drift

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'experiments'))
import presets  # noqa: E402
from presetlib import jobs, sharing  # noqa: E402

# FedAvg in fedgkd_dirichlet's and fedgkd_cifar100's three scenarios: the cpu tier maps
# CIFAR-10 and CIFAR-100 to the same data and model, so the second preset's three sweeps are
# the first's.
NAMES = ('fedgkd_dirichlet', 'fedgkd_cifar100')
ONLY = ('fedavg',)


class _Counting:
  """A Runner that counts the sweeps submitted to it."""

  def __init__(self, runner):
    self.runner, self.submitted = runner, 0

  def submit(self, config, sweep):
    self.submitted += 1
    return self.runner.submit(config, sweep)


def _command(root, runner, share):
  """The two presets as `presets.py all` runs them (one Sharing over both): {name: out}."""
  shares, outs, finishing = sharing.Sharing(runner, share), {}, []
  for name in NAMES:
    outs[name] = os.path.join(root, f'{name}-cpu')
    finishing.append(presets.start_preset(
        name, 'cpu', '', '', 2, 1, outs[name], ONLY, False, lambda *_: None, 'validation',
        None, runner, False, None, shares, group=False))  # sharing alone: grouping apart
  for finish in finishing:
    finish()
  return outs


def _rows(out):
  """results.json's rows without what names directories (as JSON: tuples are lists)."""
  results = json.load(open(os.path.join(out, 'results.json')))
  return {s: [{k: ({c: v for c, v in val.items() if c != 'out'} if k == 'config' else val)
               for k, val in r.items() if k != 'shared_runs'} for r in rows]
          for s, rows in results['scenarios'].items()}


@pytest.mark.slow  # nine 2-round sweeps (about 2 minutes here under load)
def test_shared_runs_give_the_same_tables_with_fewer_sweeps(tmp_path):
  alone = _Counting(jobs.Runner(1))
  separate = _command(str(tmp_path / 'separate'), alone, share=False)
  together = _Counting(jobs.Runner(2))  # --jobs=2: a shared sweep's outcome is read twice
  try:
    shared = _command(str(tmp_path / 'shared'), together, share=True)
  finally:
    together.runner.close()
  # How many sweeps share a key depends on the presets' current values (the two presets'
  # scenarios); what must hold is that some are shared and the tables are the same.
  assert alone.submitted == 6 and together.submitted < alone.submitted
  for name in NAMES:
    assert open(os.path.join(shared[name], 'table.md')).read() == \
        open(os.path.join(separate[name], 'table.md')).read()
    assert _rows(shared[name]) == _rows(separate[name])
  second = json.load(open(os.path.join(shared[NAMES[1]], 'results.json')))
  assert second['shared_sweeps'] == alone.submitted - together.submitted
  assert json.load(open(os.path.join(shared[NAMES[0]], 'results.json')))['shared_sweeps'] == 0
  linked = [row for rows in second['scenarios'].values() for row in rows if 'shared_runs' in row]
  assert len(linked) == second['shared_sweeps']
  for row in linked:
    link = row['config']['out']
    assert os.path.islink(link) and row['shared_runs'].startswith(
        os.path.join('..', f'{NAMES[0]}-cpu', 'runs'))
    assert os.path.realpath(link) == os.path.realpath(
        os.path.join(shared[NAMES[1]], row['shared_runs']))
    assert os.path.isfile(os.path.join(link, 'summary.json'))
  # A rerun into the same directories keeps every finished sweep: nothing is run again.
  stamps = {p: os.path.getmtime(os.path.join(p, 'summary.json')) for p in
            (os.path.join(shared[NAMES[0]], 'runs', d)
             for d in os.listdir(os.path.join(shared[NAMES[0]], 'runs')))}
  again = _Counting(jobs.Runner(1))
  for name in NAMES:
    os.remove(os.path.join(shared[name], 'results.json'))
  _command(str(tmp_path / 'shared'), again, share=True)
  assert again.submitted == together.submitted
  assert all(os.path.getmtime(os.path.join(p, 'summary.json')) == t for p, t in stamps.items())
  for name in NAMES:
    assert _rows(shared[name]) == _rows(separate[name])


class _Fake:
  """A Runner that runs nothing: each future's outcome is ('ok', [])."""

  def __init__(self):
    self.outs = []

  def submit(self, config, sweep):
    self.outs.append(config.out)
    return type('F', (), {'result': lambda self: ('ok', [])})()


def _config(out, overwrite=''):
  return dataclasses.replace(fedjax_drift.Config(rounds=1), out=str(out), overwrite=overwrite)


def test_a_users_run_directory_is_kept_and_run_on_its_own(tmp_path):
  fake = _Fake()
  shares = sharing.Sharing(fake)
  first, _ = shares.submit(_config(tmp_path / 'a'))
  mine = tmp_path / 'b'
  mine.mkdir()
  (mine / 'notes.txt').write_text('mine')
  _, read = shares.submit(_config(mine))  # a directory with no record: not ours to replace
  assert read is None and fake.outs == [str(tmp_path / 'a'), str(mine)]
  _, read = shares.submit(_config(mine, presets.OVERWRITE))  # nor with --overwrite
  assert read is None and (mine / 'notes.txt').read_text() == 'mine'
  future, read = shares.submit(_config(tmp_path / 'c'))  # nothing there: a link
  assert future is first and read == str(tmp_path / 'a')
  assert os.readlink(tmp_path / 'c') == 'a' and shares.ran == 3 and shares.shared == 1
  # Other settings are another sweep; --no_share submits every sweep.
  _, read = shares.submit(dataclasses.replace(_config(tmp_path / 'd'), lr=0.5))
  assert read is None
  alone = sharing.Sharing(_Fake(), enabled=False)  # what presets.py --no_share uses
  assert [alone.submit(_config(tmp_path / x))[1] for x in 'ef'] == [None, None]
  assert presets.parse_args(['fedgkd_loss', '--no_share'])[0].no_share
  assert not presets.parse_args(['fedgkd_loss'])[0].no_share


def test_the_key_ignores_where_a_sweep_writes_and_nothing_else():
  base = fedjax_drift.Config(rounds=1)
  key = sharing.sweep_key(base)
  for name in sharing.OUTPUT_ONLY:
    value = {'out': 'elsewhere', 'overwrite': 'yes', 'resume': True, 'progress': False,
             'compile_cache': 'off'}[name]
    assert sharing.sweep_key(dataclasses.replace(base, **{name: value})) == key
  assert sharing.sweep_key(dataclasses.replace(base, seed=1)) != key
  assert sharing.sweep_key(base, sweep=False) != key
  assert sharing.sweep_key(base, fingerprint=lambda c: {'files': ['other']}) != key

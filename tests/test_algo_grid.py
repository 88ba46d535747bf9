"""--grid='algo:...': several methods in one command and one run directory (methods.py)."""
import csv
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import methods, results
from fedjax_drift.errors import UserError
from helpers import tiny_config
from test_distributed import ROOT, launch_two

QUIET = dict(log=lambda *_: None)


def _rows(path):
  with open(path) as f:
    return list(csv.DictReader(f))


def _config(tiny_npz, unequal_partition, out, **kw):
  base = dict(clients_per_round=2, rounds=2, seeds=2, out=str(out))
  base.update(kw)
  return tiny_config(tiny_npz, unequal_partition, **base)


def test_split_grid():
  assert methods.split_grid('algo:fedavg,fedprox;lr:0.1,0.01') == (['fedavg', 'fedprox'],
                                                                   'lr:0.1,0.01')
  assert methods.split_grid('lr:0.1') == ([], 'lr:0.1')
  with pytest.raises(UserError, match='--grid algo=fedavgg is unknown.*fedavg'):
    methods.split_grid('algo:fedavgg')
  with pytest.raises(UserError, match='names a method twice'):
    methods.split_grid('algo:fedavg,fedavg')


def test_paired_difference_to_the_first_method():
  """Each later method against the first, at each one's selected point, paired by seed; a
  diverged run drops its seed from the pair (here seed 2 of fedfor)."""
  def run(seed, final, best, lr, status='ok'):
    return dict(seed=seed, status=status, final_accuracy=final, best_accuracy=best, lr=lr)
  summaries = {
      'fedavg': {'runs': [run(0, .80, .81, .1), run(1, .70, .72, .1), run(2, .75, .75, .1),
                          run(0, .10, .10, .5)]},
      'fedfor': {'runs': [run(0, .83, .84, .5), run(1, .74, .74, .5),
                          run(2, None, None, .5, 'diverged')]}}
  paired = methods._paired_to_first(['fedavg', 'fedfor'], summaries,
                                    {'fedavg': {'lr': .1}, 'fedfor': {'lr': .5}})
  final = paired['fedfor']['final_accuracy']
  assert final['seeds'] == [0, 1]
  np.testing.assert_allclose(final['mean'], np.mean([.83 - .80, .74 - .70]))
  half = 12.706 * np.std([.03, .04], ddof=1) / np.sqrt(2)  # t(0.975, 1 dof)
  np.testing.assert_allclose([final['lo'], final['hi']], [.035 - half, .035 + half], rtol=1e-3)
  np.testing.assert_allclose(paired['fedfor']['best_accuracy']['mean'], .025)


@pytest.mark.slow
def test_methods_in_one_directory_equal_their_own_runs(tiny_npz, unequal_partition, tmp_path):
  """Each method's runs equal the same method run alone; one program per method; the table
  selects per method with results.selected; an axis a method does not read is left out."""
  grid = 'algo:fedavg,fedprox,scaffold;lr:0.1,0.05;prox_mu:0.01,0.1'
  summary = fedjax_drift.run(_config(tiny_npz, unequal_partition, tmp_path / 'all', grid=grid),
                             **QUIET)
  assert summary['methods'] == ['fedavg', 'fedprox', 'scaffold']
  for algo, axes in (('fedavg', ['lr']), ('fedprox', ['lr', 'prox_mu']), ('scaffold', ['lr'])):
    inner = json.loads((tmp_path / 'all' / algo / 'summary.json').read_text())
    assert inner['segment_compilations'] == 1 and inner['algo'] == algo
    assert list(inner['grid']) == axes and inner['num_runs'] == 2 * 2 ** len(axes)
    alone = fedjax_drift.run(_config(tiny_npz, unequal_partition, tmp_path / f'alone-{algo}',
                                     algo=algo, grid=grid.split(';', 1)[1] if algo == 'fedprox'
                                     else 'lr:0.1,0.05'), **QUIET)
    mine = _rows(tmp_path / 'all' / algo / 'metrics.csv')
    theirs = _rows(tmp_path / f'alone-{algo}' / 'metrics.csv')
    assert [(r['run'], r['round'], r['test_loss']) for r in mine] == \
        [(r['run'], r['round'], r['test_loss']) for r in theirs]
    chosen = summary['per_method'][algo]['selected']
    assert chosen == results.selected('test', alone['grid_points'])
  table = _rows(tmp_path / 'all' / 'table.csv')
  assert [r['algo'] for r in table] == ['fedavg', 'fedprox', 'scaffold']
  assert table[0]['final_accuracy_minus_fedavg_mean'] == ''  # the first has no pair
  np.testing.assert_allclose(float(table[2]['final_accuracy_minus_fedavg_mean']),
                             summary['paired']['scaffold']['final_accuracy']['mean'])
  for row in table:
    want = summary['per_method'][row['algo']]['selected']['last10_mean_accuracy']['mean']
    np.testing.assert_allclose(float(row['last10_mean_accuracy_mean']), want)
  runs = _rows(tmp_path / 'all' / 'runs.csv')
  assert len(runs) == 4 + 8 + 4 and {r['algo'] for r in runs} == set(summary['methods'])
  assert json.loads((tmp_path / 'all' / 'summary.json').read_text())['table'] == \
      summary['table']


@pytest.mark.slow
def test_resume_continues_every_method(tiny_npz, unequal_partition, tmp_path):
  grid = 'algo:fedavg,fedprox;lr:0.1,0.05'
  fedjax_drift.run(_config(tiny_npz, unequal_partition, tmp_path / 'whole', grid=grid,
                           rounds=3), **QUIET)
  fedjax_drift.run(_config(tiny_npz, unequal_partition, tmp_path / 'cut', grid=grid,
                           rounds=1), **QUIET)
  fedjax_drift.resume(str(tmp_path / 'cut'), rounds=3, **QUIET)
  for algo in ('fedavg', 'fedprox'):
    whole = _rows(tmp_path / 'whole' / algo / 'metrics.csv')
    cut = _rows(tmp_path / 'cut' / algo / 'metrics.csv')
    assert [(r['run'], r['round'], r['test_loss']) for r in cut] == \
        [(r['run'], r['round'], r['test_loss']) for r in whole]
  assert _rows(tmp_path / 'cut' / 'table.csv') == _rows(tmp_path / 'whole' / 'table.csv')


@pytest.mark.slow
def test_table_reports_privacy_spent(tiny_npz, unequal_partition, tmp_path):
  summary = fedjax_drift.run(_config(tiny_npz, unequal_partition, tmp_path / 'dp',
                                     grid='algo:fedavg,dp_fedavg', dp_noise=0.8), **QUIET)
  inner = json.loads((tmp_path / 'dp' / 'dp_fedavg' / 'summary.json').read_text())
  want = np.mean([r['final_dp_epsilon'] for r in inner['runs']])
  table = _rows(tmp_path / 'dp' / 'table.csv')
  assert table[0]['final_dp_epsilon'] == ''  # FedAvg: no privacy accounting
  np.testing.assert_allclose(float(table[1]['final_dp_epsilon']), want)
  assert summary['table'][1]['final_dp_epsilon'] == want


def test_refusals(tiny_npz, unequal_partition, tmp_path):
  out = tmp_path / 'r'
  fedjax_drift.run(_config(tiny_npz, unequal_partition, out, grid='algo:fedavg', rounds=1,
                           seeds=1), **QUIET)
  with pytest.raises(UserError, match='already exists'):
    fedjax_drift.run(_config(tiny_npz, unequal_partition, out, grid='algo:fedavg', rounds=1,
                             seeds=1), **QUIET)
  fedjax_drift.run(_config(tiny_npz, unequal_partition, out, grid='algo:fedprox', rounds=1,
                           seeds=1, overwrite='yes'), **QUIET)
  assert not (out / 'fedavg').exists() and (out / 'fedprox' / 'summary.json').exists()
  with pytest.raises(UserError, match='lies inside the run directory'):
    fedjax_drift.run(_config(tiny_npz, unequal_partition, out / 'fedavg', rounds=1,
                             seeds=1), **QUIET)
  with pytest.raises(UserError, match="--grid: 'bogus' cannot be swept"):
    fedjax_drift.run(_config(tiny_npz, unequal_partition, tmp_path / 'b',
                             grid='algo:fedavg;bogus:1'), **QUIET)


SCRIPT = textwrap.dedent('''
    import sys
    sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
    import fedjax_drift
    from helpers import tiny_config
    pid, port, out = sys.argv[1:]
    fedjax_drift.run(tiny_config({npz!r}, {parts!r}, grid='algo:fedavg,scaffold;lr:0.1,0.05',
                                 model='mlp', clients_per_round=4, batch_size=4,
                                 local_steps=0, local_epochs=1, rounds=2, out=out,
                                 coordinator_address='localhost:' + port, num_processes=2,
                                 process_id=int(pid)))
    print('OK', pid)
''')


@pytest.mark.slow  # two processes on localhost, as tests/test_distributed.py
def test_two_processes_equal_one(tiny_npz, unequal_partition, tmp_path):
  """A methods run over two processes: process 0 alone writes and speaks, and every
  method's results equal those of one process."""
  code = SCRIPT.format(root=ROOT, tests=os.path.join(ROOT, 'tests'), npz=tiny_npz,
                       parts=unequal_partition)
  out = str(tmp_path / 'two')
  done = launch_two(lambda i, port: [sys.executable, '-c', code, str(i), port, out],
                    timeout=900)
  for i, (returncode, stdout, stderr) in enumerate(done):
    assert returncode == 0 and f'OK {i}' in stdout, f'process {i}:\n{stderr[-3000:]}'
  outputs = [(stdout, stderr) for _, stdout, stderr in done]
  assert 'methods table' in outputs[0][0] and 'methods table' not in outputs[1][0]
  fedjax_drift.run(tiny_config(tiny_npz, unequal_partition,
                               grid='algo:fedavg,scaffold;lr:0.1,0.05', model='mlp',
                               clients_per_round=4, batch_size=4, local_steps=0,
                               local_epochs=1, rounds=2, out=str(tmp_path / 'one')), **QUIET)
  for algo in ('fedavg', 'scaffold'):
    two = _rows(tmp_path / 'two' / algo / 'metrics.csv')
    one = _rows(tmp_path / 'one' / algo / 'metrics.csv')
    np.testing.assert_allclose([float(r['test_loss']) for r in two],
                               [float(r['test_loss']) for r in one], rtol=1e-4, atol=1e-5)
  assert len(_rows(tmp_path / 'two' / 'table.csv')) == 2

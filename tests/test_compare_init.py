"""Comparing run directories (fedjax_drift/compare.py) and loading saved parameters back
(--init_params, fedjax_drift.load_params, --rounds=0): issue 26 item 5."""
import csv
import os
import subprocess
import sys

import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import compare
from helpers import tiny_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _runs_csv(run_dir):
  with open(os.path.join(run_dir, 'runs.csv'), newline='') as f:
    return list(csv.DictReader(f))


@pytest.fixture(scope='module')
def saved(tmp_path_factory, tiny_npz, unequal_partition):
  """Two seeds of FedAvg, 2 rounds, with --save_params: (config, run_dir, params file)."""
  root = tmp_path_factory.mktemp('saved')
  config = tiny_config(tiny_npz, unequal_partition, rounds=2, seeds=2,
                       out=str(root / 'fedavg'), save_params=str(root / 'params.npz'))
  fedjax_drift.run(config, log=lambda *a: None)
  return config, str(root / 'fedavg'), str(root / 'params.npz')


@pytest.mark.slow
def test_rounds_0_evaluates_the_saved_parameters_of_the_chosen_run(saved, tmp_path):
  config, run_dir, params = saved
  for run in (0, 1):
    out = str(tmp_path / f'eval{run}')
    start = tiny_config(config.dataset[4:], config.partition[5:], rounds=0,
                        init_params=params, init_params_run=run, out=out)
    summary = fedjax_drift.run(start, log=lambda *a: None)
    trained = float(_runs_csv(run_dir)[run]['final_accuracy'])
    assert summary['final_accuracy'] == pytest.approx(trained)
    assert float(_runs_csv(out)[0]['final_accuracy']) == pytest.approx(trained)
    assert os.path.isfile(os.path.join(out, 'metrics.csv'))  # the one evaluation, at round 0


def test_load_params_returns_the_saved_arrays_and_continuing_differs_from_init(saved):
  config, _, params = saved
  base = tiny_config(config.dataset[4:], config.partition[5:])
  with np.load(params) as f:
    stored = {k: f[k] for k in f.files}
  for run in (0, 1):
    loaded = fedjax_drift.load_params(params, base, run=run)
    flat = fedjax_drift.models.flatten_names(loaded)
    assert set(flat) == set(stored)
    for name, value in flat.items():
      np.testing.assert_array_equal(value, stored[name][run])
  fresh = fedjax_drift.models.flatten_names(fedjax_drift.prepare(base).state.params)
  assert any(not np.array_equal(fresh[k], stored[k][0]) for k in fresh)


@pytest.mark.parametrize('change,message', [
    (dict(model='mlp'), "has no array"),
    (dict(init_params_run=2), '--init_params_run=2: '),
    (dict(init_params='missing.npz'), 'does not exist'),
])
def test_init_params_mismatch_is_one_line_naming_the_file(saved, tmp_path, change, message):
  config, _, params = saved
  values = dict(init_params=params, rounds=1, out=str(tmp_path / 'x'))
  values.update(change)
  if values['init_params'] == 'missing.npz':
    values['init_params'] = str(tmp_path / 'missing.npz')
  with pytest.raises(fedjax_drift.UserError) as e:
    fedjax_drift.run(tiny_config(config.dataset[4:], config.partition[5:], **values),
                     log=lambda *a: None)
  text = str(e.value)
  assert message in text and '\n' not in text
  assert os.path.basename(values['init_params']) in text


def test_not_a_save_params_file_is_refused(saved, tiny_npz):
  config, _, _ = saved
  with pytest.raises(fedjax_drift.UserError, match='not a --save_params file'):
    fedjax_drift.load_params(tiny_npz, tiny_config(tiny_npz, config.partition[5:]))


def test_compare_table_and_plot_across_run_directories(saved, tmp_path):
  _, run_dir, _ = saved
  out = tmp_path / 'cmp'
  result = subprocess.run([sys.executable, os.path.join(ROOT, 'experiments', 'compare.py'),
                           run_dir, run_dir, f'--out={out}'], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
  assert result.returncode == 0, result.stderr
  for name in compare.OUTPUTS:
    assert (out / name).is_file(), name
  with open(out / 'comparison.csv', newline='') as f:
    rows = list(csv.DictReader(f))
  finals = [float(r['final_accuracy']) for r in _runs_csv(run_dir)]
  bests = [float(r['best_accuracy']) for r in _runs_csv(run_dir)]
  assert len(rows) == 2 and rows[0]['algo'] == 'fedavg' and rows[0]['seeds'] == '2'
  assert float(rows[0]['final_accuracy_mean']) == pytest.approx(np.mean(finals))
  assert float(rows[0]['final_accuracy_std']) == pytest.approx(np.std(finals))
  assert float(rows[0]['best_accuracy_mean']) == pytest.approx(np.mean(bests))
  assert f'{100 * np.mean(finals):.2f} ± {100 * np.std(finals):.2f}' in result.stdout
  again = subprocess.run([sys.executable, '-m', 'fedjax_drift.compare', run_dir,
                          f'--out={out}'], capture_output=True, text=True, cwd=ROOT,
                         timeout=300)
  assert again.returncode == 2 and again.stderr.startswith('error: ') and \
      'comparison.md exists' in again.stderr


def test_compare_groups_grid_points_and_refuses_a_non_run_directory(tmp_path):
  run_dir = tmp_path / 'sweep'
  run_dir.mkdir()
  (run_dir / 'config.json').write_text(
      '{"algo": "slowmo", "dataset": "embedded", "_resolved": {"runs": ['
      '{"run": 0, "seed": 0, "beta": 0.5}, {"run": 1, "seed": 1, "beta": 0.5}, '
      '{"run": 2, "seed": 0, "beta": 0.9}, {"run": 3, "seed": 1, "beta": 0.9}]}}')
  (run_dir / 'runs.csv').write_text(
      'run,seed,status,final_accuracy,best_accuracy\n0,0,ok,0.5,0.6\n1,1,ok,0.7,0.8\n'
      '2,0,ok,0.4,0.4\n3,1,diverged,,\n')
  (run_dir / 'metrics.csv').write_text(
      'run,round,test_accuracy\n0,0,0.1\n1,0,0.3\n2,0,0.2\n3,0,0.2\n0,1,0.5\n1,1,0.7\n2,1,0.4\n')
  rows = compare.groups([compare.read_run_dir(str(run_dir))])
  assert [(r['grid_point'], r['seeds'], r['diverged']) for r in rows] == \
      [('beta=0.5', 2, 0), ('beta=0.9', 1, 1)]
  assert rows[0]['final_accuracy_mean'] == pytest.approx(0.6)
  assert rows[0]['final_accuracy_std'] == pytest.approx(0.1)
  lines = compare.curves(rows)
  rounds, mean, std = lines['slowmo [sweep] beta=0.5']
  assert rounds == [0, 1] and np.allclose(mean, [0.2, 0.6]) and np.allclose(std, [0.1, 0.1])
  assert compare.main([str(tmp_path), f'--out={tmp_path / "o"}']) == 2


def test_compare_refuses_a_damaged_runs_csv_in_one_line(tmp_path):
  (tmp_path / 'config.json').write_text('{"algo": "fedavg", "_resolved": {"runs": []}}')
  (tmp_path / 'runs.csv').write_text('run,seed\nzero,0\n')
  (tmp_path / 'metrics.csv').write_text('run,round,test_accuracy\n')
  with pytest.raises(fedjax_drift.UserError, match='runs.csv: unexpected row'):
    compare.read_run_dir(str(tmp_path))

"""--seeds and --grid: one vmapped program whose runs equal the independent single runs."""
import csv
import json

import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import config as sweep


def _config(npz, out, **kw):
  base = dict(dataset=f'npz:{npz}', partition='dirichlet', dirichlet_alpha=1.0, model='mlp',
              num_clients=6, clients_per_round=3, rounds=4, eval_every=2, local_steps=0,
              local_epochs=1, batch_size=4, lr=0.1, progress=False, out=str(out))
  base.update(kw)
  return fedjax_drift.Config(**base)


@pytest.mark.parametrize('algo,grid,extra', [
    ('fedavg', 'lr:0.05,0.2', {}),
    ('fedadc', 'beta:0.8;lr:0.1', {}),
    ('fedfor', 'for_alpha:0.1', dict(scenario='concept_shift', concept_shift_prob=0.5)),
])
def test_sweep_runs_equal_single_runs(tiny_npz, tmp_path, algo, grid, extra):
  summary = fedjax_drift.run(_config(tiny_npz, tmp_path / 'sweep', algo=algo, seeds=2,
                                     grid=grid, **extra), log=lambda *_: None)
  assert summary['segment_compilations'] == 1
  rows = list(csv.DictReader(open(tmp_path / 'sweep' / 'runs.csv')))
  points = sweep.grid_points(sweep.parse_grid(grid))
  assert len({r['run'] for r in rows}) == 2 * len(points)
  for point in points:
    for seed in (0, 1):
      out = tmp_path / f'single-{seed}-{"-".join(map(str, point.values()))}'
      fedjax_drift.run(_config(tiny_npz, out, algo=algo, seed=seed, **point, **extra),
                       log=lambda *_: None)
      single = [float(r['test_loss']) for r in csv.DictReader(open(out / 'metrics.csv'))]
      mine = [float(r['test_loss']) for r in rows if int(r['seed']) == seed
              and all(float(r[k]) == v for k, v in point.items())]
      np.testing.assert_allclose(mine, single, rtol=1e-4, atol=1e-5)
  saved = json.load(open(tmp_path / 'sweep' / 'summary.json'))
  assert len(saved['grid_points']) == len(points)
  assert all('std' in g['final_accuracy'] for g in saved['grid_points'])


def test_grid_errors():
  with pytest.raises(fedjax_drift.UserError, match='cannot be swept'):
    sweep.parse_grid('rounds:1,2')
  with pytest.raises(fedjax_drift.UserError, match='must be numbers'):
    sweep.parse_grid('lr:a,b')
  assert sweep.grid_points(sweep.parse_grid('lr:1,2;beta:0.5')) == [
      {'lr': 1.0, 'beta': 0.5}, {'lr': 2.0, 'beta': 0.5}]

"""The best-validation model is saved beside the final one: NAME.best_val.npz for
--save_params=NAME.npz with a validation split (issue 34 item 6)."""
import csv

import jax.numpy as jnp
import numpy as np

import fedjax_drift
from fedjax_drift import best_val
from helpers import tiny_config


def _val_rows(run_dir):
  with open(run_dir / 'metrics.csv', newline='') as f:
    return [r for r in csv.DictReader(f) if r.get('val_accuracy') not in ('', None)]


def test_the_tracker_keeps_each_runs_best_and_the_earlier_of_ties(tmp_path):
  tracker = best_val.Tracker(str(tmp_path), 2, [])
  params = lambda v: {'dense': {'kernel': jnp.full((3, 2), v)}}  # 3 = vmapped width >= runs
  assert tracker.update({'val_accuracy': np.array([0.5, 0.4])}, params(1.0)) == [0, 1]
  assert tracker.update({'val_accuracy': np.array([0.5, 0.6])}, params(2.0)) == [1]  # a tie
  assert tracker.update({'val_accuracy': np.array([0.7, 0.1])}, params(3.0), {1: 0}) == [0]
  kept = tracker.params['dense/kernel']
  assert kept.shape == (2, 2) and kept[0].tolist() == [3.0, 3.0] and kept[1].tolist() == [2.0] * 2
  rows = [{'run': 0, 'val_accuracy': 0.7}, {'run': 1, 'val_accuracy': 0.6}]
  again = best_val.Tracker(str(tmp_path), 2, rows)  # a resume: the file and the history
  assert again.best == {0: 0.7, 1: 0.6} and np.array_equal(again.params['dense/kernel'], kept)
  assert again.update({'val_accuracy': np.array([0.7, 0.6])}, params(9.0)) == []
  assert best_val.beside('/x/final.npz') == '/x/final.best_val.npz'


def test_the_saved_best_validation_model_scores_the_best_validation_accuracy(
    tmp_path, tiny_npz, unequal_partition):
  final = tmp_path / 'final.npz'
  run_dir = tmp_path / 'run'
  common = dict(val_fraction=0.3, seed=4, lr=0.5)
  fedjax_drift.run(tiny_config(tiny_npz, unequal_partition, rounds=6, save_params=str(final),
                               out=str(run_dir), **common))
  best = tmp_path / 'final.best_val.npz'
  assert final.is_file() and best.is_file()
  best_acc = max(float(r['val_accuracy']) for r in _val_rows(run_dir))
  check = tmp_path / 'check'
  fedjax_drift.run(tiny_config(tiny_npz, unequal_partition, rounds=0, init_params=str(best),
                               out=str(check), **common))
  (row,) = _val_rows(check)
  assert float(row['val_accuracy']) == best_acc

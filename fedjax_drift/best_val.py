"""The best-validation model, saved beside the final one (`--save_params` with a validation
split: --val_fraction, or --val_source=dataset).

At every evaluation, each run whose validation accuracy is higher than at any evaluation
before keeps its global parameters of that round: they are written at once (atomically) to
RUN_DIR/best_val_params.npz, so an interrupted run keeps them and `--resume` goes on from them
(a resumed run repeats its rounds bit for bit, so it writes what the uninterrupted run would).
At the end the file is copied to NAME.best_val.npz beside --save_params=NAME.npz, in the same
layout (one array per parameter with a leading run axis; `--init_params` reads it) and
recorded as the run's output like the final file. Ties keep the earlier round. Runs of one
process only (several processes hold the parameters split between them).
"""
import io
import os

import jax
import numpy as np

from fedjax_drift import models, report

FILE = 'best_val_params.npz'  # in the run directory while the run goes


def wanted(save_params, val_fraction, val_source) -> bool:
  """Whether the run saves its best-validation model: --save_params and a validation split
  (--val_fraction > 0 or --val_source=dataset)."""
  return bool(save_params) and (val_fraction > 0 or val_source == 'dataset')


def beside(save_params) -> str:
  """NAME.best_val.npz for --save_params=NAME.npz."""
  stem = save_params[:-len('.npz')] if save_params.endswith('.npz') else save_params
  return f'{stem}.best_val.npz'


def _read(path) -> dict:
  with np.load(path, allow_pickle=False) as f:
    return {k: f[k] for k in f.files}


class Tracker:
  """The best validation accuracy of each run so far and its parameters (host numpy arrays
  by flax path name, leading run axis), kept in RUN_DIR/FILE."""

  def __init__(self, run_dir, num_runs, eval_rows):
    """eval_rows: the evaluations recorded so far (a resumed run's history), each a dict with
    'run' and, with a validation split, 'val_accuracy'."""
    self.path = os.path.join(run_dir, FILE)
    self.num_runs = num_runs
    self.best = {}
    for row in eval_rows:
      if row.get('val_accuracy') is not None:
        r = int(row['run'])
        self.best[r] = max(self.best.get(r, -np.inf), float(row['val_accuracy']))
    self.params = _read(self.path) if self.best and os.path.isfile(self.path) else None

  def update(self, result, params, diverged=()):
    """After an evaluation: result holds 'val_accuracy' [runs] (nothing happens without it);
    params: the global parameters [runs, ...] on the device. Writes FILE when a run
    improved; returns the runs that did."""
    if 'val_accuracy' not in result:
      return []
    accs = np.asarray(result['val_accuracy'], np.float64)
    better = [r for r in range(self.num_runs)
              if r not in diverged and accs[r] > self.best.get(r, -np.inf)]
    if not better:
      return []
    now = {k: np.asarray(v)[:self.num_runs]
           for k, v in models.flatten_names(jax.device_get(params)).items()}
    if self.params is None:
      self.params = {k: v.copy() for k, v in now.items()}
    for k, v in now.items():
      self.params[k][better] = v[better]
    for r in better:
      self.best[r] = float(accs[r])
    buf = io.BytesIO()
    np.savez(buf, **self.params)
    report.atomic_write(self.path, buf.getvalue())
    return better

  def save_beside(self, save_params, write):
    """Copies FILE to beside(save_params) with write(path, params) (simulation.save_params,
    which returns the sha256); returns (path, sha256), or None when nothing was kept."""
    if self.params is None:
      return None
    path = beside(save_params)
    return path, write(path, self.params)

"""TensorBoard scalars written through tensorboardX, read back with TensorBoard's own reader."""
import math
import os

import numpy as np
import pytest

pytest.importorskip('tensorboardX')
event_accumulator = pytest.importorskip(
    'tensorboard.backend.event_processing.event_accumulator')

from fedjax_drift import tensorboard  # noqa: E402


def _read(log_dir):
  acc = event_accumulator.EventAccumulator(log_dir)
  acc.Reload()
  return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()['scalars']}


def test_rows_read_back_as_scalars(tmp_path):
  rows = [{'round': 0, 'test_accuracy': 0.1, 'test_loss': np.float32(2.3), 'algo': 'fedavg'},
          {'round': 5, 'test_accuracy': 0.625, 'test_loss': 1.5, 'algo': 'fedavg'}]
  tensorboard.write_scalars(str(tmp_path), rows, tag_prefix='eval/')
  scalars = _read(str(tmp_path))
  assert sorted(scalars) == ['eval/test_accuracy', 'eval/test_loss']  # strings skipped
  assert scalars['eval/test_accuracy'] == [(0, pytest.approx(0.1)), (5, 0.625)]
  assert scalars['eval/test_loss'] == [(0, pytest.approx(2.3)), (5, 1.5)]


def test_writer_open_once_per_run(tmp_path):
  with tensorboard.ScalarWriter(str(tmp_path)) as writer:
    for r in range(1, 4):
      writer.write({'round': r, 'train_loss': 1.0 / r, 'mean_update_norm': math.nan})
      writer.flush()
  assert len(os.listdir(tmp_path)) == 1  # one event file
  scalars = _read(str(tmp_path))
  assert list(scalars) == ['train_loss']  # non-finite values are left out
  assert [s for s, _ in scalars['train_loss']] == [1, 2, 3]


def test_a_sweep_writes_one_event_directory_per_run(tiny_npz, tmp_path):
  import fedjax_drift  # pylint: disable=g-import-not-at-top
  fedjax_drift.run(fedjax_drift.Config(
      dataset=f'npz:{tiny_npz}', model='logreg', num_clients=4, clients_per_round=2, rounds=2,
      eval_every=1, batch_size=8, seeds=2, tensorboard=True, progress=False,
      out=str(tmp_path / 'run')), log=lambda *_: None)
  for r in (0, 1):
    scalars = _read(str(tmp_path / 'run' / 'tensorboard' / f'run{r}'))
    assert [s for s, _ in scalars['eval/test_accuracy']] == [0, 1, 2]
    assert [s for s, _ in scalars['train/train_loss']] == [1, 2]

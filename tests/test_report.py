"""report.py: the run directory's figures (drift.png's panels and their labels, partition.png
rendered once per histogram), and its one way to write a file."""
import os

import numpy as np
import pytest

from fedjax_drift import report
from fedjax_drift.errors import UserError


def test_drift_plot_labels_each_panel_and_shows_the_training_loss(tmp_path, monkeypatch):
  rows = [{'round': r, 'train_loss': 1.0 / r, 'client_update_norm_mean': 0.5,
           'mean_update_norm': 0.4, 'update_cosine': 0.8, 'client_loss_std': 0.1}
          for r in (1, 2, 3)]
  seen = []
  real_save = report._save  # pylint: disable=protected-access

  def keep(fig, path):
    seen.append([(ax.get_title(), ax.get_ylabel()) for ax in fig.axes])
    real_save(fig, path)
  monkeypatch.setattr(report, '_save', keep)
  report.plot_drift(str(tmp_path / 'drift.png'), rows)
  assert (tmp_path / 'drift.png').stat().st_size > 0
  panels = seen[0]
  assert len(panels) == 5 and all(ylabel for _, ylabel in panels)
  assert panels[0] == ('mean client training loss', 'cross-entropy')


def test_a_partition_figure_is_rendered_once_per_histogram_and_title(tmp_path, monkeypatch):
  """Every method of a scenario writes the same partition.png: the process renders it once,
  and the bytes are those a fresh rendering gives."""
  hist = np.arange(40).reshape(8, 5) % 7
  report._partition_png.cache_clear()  # pylint: disable=protected-access
  report.plot_partition(str(tmp_path / 'a.png'), hist, 'dirichlet partition (seed 0)')
  rendered = []
  real_png = report._png  # pylint: disable=protected-access
  monkeypatch.setattr(report, '_png', lambda fig: rendered.append(fig) or real_png(fig))
  report.plot_partition(str(tmp_path / 'b.png'), hist.copy(), 'dirichlet partition (seed 0)')
  assert not rendered and (tmp_path / 'a.png').read_bytes() == (tmp_path / 'b.png').read_bytes()
  report._partition_png.cache_clear()  # pylint: disable=protected-access
  report.plot_partition(str(tmp_path / 'c.png'), hist, 'dirichlet partition (seed 0)')
  assert len(rendered) == 1
  assert (tmp_path / 'c.png').read_bytes() == (tmp_path / 'a.png').read_bytes()
  report.plot_partition(str(tmp_path / 'd.png'), hist, 'dirichlet partition (seed 1)')
  assert len(rendered) == 2  # another title: its own figure


def test_atomic_write_with_leaves_the_whole_file_or_none(tmp_path):
  """report.atomic_write_with: the one temp-file, fsync, rename writer (issue 47 item 4)."""
  path = tmp_path / 'sub' / 'a.npz'
  report.atomic_write_with(str(path), lambda f: np.savez(f, x=np.arange(3)), parents=True)
  assert np.load(path)['x'].tolist() == [0, 1, 2]

  def fails(f):
    f.write(b'half')
    raise OSError(28, 'No space left on device')

  with pytest.raises(UserError, match=r'cannot write .*a.npz: No space left on device \(make '
                     r'room\)'):
    report.atomic_write_with(str(path), fails, hint='make room')
  assert os.listdir(tmp_path / 'sub') == ['a.npz'] and np.load(path)['x'].tolist() == [0, 1, 2]

"""report.py: the run directory's figures (drift.png's panels and their labels)."""
from fedjax_drift import report


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

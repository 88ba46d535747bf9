"""Issue 26 item 4: the CIFAR-10 import keeps one copy, --list descriptions are whole, and
drift.png has y-axis labels and the training loss."""
import os
import subprocess
import sys
import tarfile

from fedjax_drift import catalog, report
from fedjax_drift.data import prepare, sources
import fixtures

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_import_of_the_cifar10_jpeg_tarball_leaves_no_second_copy(tmp_path):
  fixtures.write_cifar10_jpeg_dir(str(tmp_path / 'jpeg'), per_class=1)
  (tmp_path / 'in').mkdir()
  with tarfile.open(tmp_path / 'in' / 'cifar10-jpeg.tar.gz', 'w:gz') as tar:
    for split in ('train', 'test'):
      tar.add(tmp_path / 'jpeg' / split, arcname=split)
  assert prepare.main(['import', str(tmp_path / 'in')]) == 0
  cache = os.environ['FEDJAX_DRIFT_CACHE']  # the hermetic one (conftest.py)
  found = sorted(os.path.relpath(os.path.join(d, f), cache)
                 for d, _, files in os.walk(cache) for f in files)
  assert found == [os.path.join('datasets', 'cifar10.npz')]
  ds = sources.load('cifar10', None)
  assert ds.x_train.shape == (10, 32, 32, 3) and sorted(ds.y_train) == list(range(10))
  # A run straight from the tarball still caches its decode (that is the only copy then).
  sources.load_cifar10_jpeg(str(tmp_path / 'in'))
  assert any(f.startswith('cifar10-') for f in os.listdir(cache))


def test_list_descriptions_end_on_a_whole_phrase():
  result = subprocess.run([sys.executable, os.path.join(ROOT, 'experiments', 'run.py'),
                           '--list'], capture_output=True, text=True, cwd=ROOT, timeout=300)
  assert result.returncode == 0, result.stderr
  for _, _, entries in catalog.sections():
    for name, summary in entries.items():
      text = summary.rstrip()
      assert text.count('(') == text.count(')'), (name, text)
      assert not text.endswith((',', ';', ':', ' and', ' or', ' the', ' a', ' of', '-', '(')), \
          (name, text)


def test_drift_plot_labels_each_panel_and_shows_the_training_loss(tmp_path, monkeypatch):
  rows = [{'round': r, 'train_loss': 1.0 / r, 'client_update_norm_mean': 0.5,
           'mean_update_norm': 0.4, 'update_cosine': 0.8, 'client_loss_std': 0.1}
          for r in (1, 2, 3)]
  seen = []
  plt = report._figure()  # pylint: disable=protected-access
  real_close = plt.close

  def keep(fig):
    seen.append([(ax.get_title(), ax.get_ylabel()) for ax in fig.axes])
    real_close(fig)
  monkeypatch.setattr(plt, 'close', keep)
  report.plot_drift(str(tmp_path / 'drift.png'), rows)
  assert (tmp_path / 'drift.png').stat().st_size > 0
  panels = seen[0]
  assert len(panels) == 5 and all(ylabel for _, ylabel in panels)
  assert panels[0] == ('mean client training loss', 'cross-entropy')

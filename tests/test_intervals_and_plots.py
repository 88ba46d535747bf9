"""Accuracy intervals stay in [0, 1] and say when they are uninformative; one seed prints no
spread; plots have integer round ticks and a diverged run's point and round (issue 45 items 10
and 13)."""
import json

import numpy as np
import pytest

from fedjax_drift import compare, report, results, stats

pytest.importorskip('matplotlib')


def test_two_seed_interval_is_clipped_and_marked_uninformative():
  s = results.seed_stats([0.1, 0.9])  # raw t-interval about [-4.6, 5.6]
  assert (s['lo'], s['hi']) == (0.0, 1.0)
  assert stats.fmt_interval(s) == '0.5000 [0, 1]: uninformative (2 seeds)'
  narrow = results.seed_stats([0.98, 0.99, 1.0])  # clipped at 1 only: still says something
  assert narrow['hi'] == 1.0 and narrow['lo'] > 0.9
  assert 'uninformative' not in stats.fmt_interval(narrow)
  assert stats.interval([-0.5, 0.5])['lo'] < -1  # differences are not clipped


def test_compare_marks_an_uninformative_interval(tmp_path, capsys):
  path = tmp_path / 'a'
  path.mkdir()
  (path / 'config.json').write_text(json.dumps({
      'algo': 'fedavg', 'dataset': 'mnist', 'model': 'cnn', 'rounds': 2,
      '_resolved': {'runs': [{'run': 0, 'seed': 0}, {'run': 1, 'seed': 1}]}}))
  (path / 'runs.csv').write_text('run,seed,status,final_accuracy,best_accuracy\n'
                                 '0,0,ok,0.1,0.1\n1,1,ok,0.9,0.9\n')
  (path / 'metrics.csv').write_text('run,round,test_accuracy\n0,1,0.1\n1,1,0.9\n')
  assert compare.main([str(path), f'--out={tmp_path / "out"}']) == 0
  out = capsys.readouterr().out
  assert '50.00 ± 40.00 [0, 100]: uninformative' in out


def test_one_seed_line_has_no_spread():
  group = {'seeds': 1, 'diverged': 0, 'final_accuracy': {'mean': 0.7, 'std': 0.0},
           'best_accuracy': {'mean': 0.72, 'std': 0.0}}
  assert results._point_line(group) == 'final 0.7000, best 0.7200 (1 seed)'
  group = {**group, 'seeds': 3}
  assert results._point_line(group).endswith('over 3 seeds')


def _figure_of(monkeypatch, plot, *args, **kwargs):
  """The matplotlib figure `plot` would save (report._save captured)."""
  saved = []
  monkeypatch.setattr(report, '_save', lambda fig, path: saved.append(fig))
  plot('unused.png', *args, **kwargs)
  return saved[0]


def test_round_ticks_are_integers(monkeypatch):
  fig = _figure_of(monkeypatch, report.plot_mean_curves,
                   {'a': ([1, 2], np.array([0.3, 0.4]), np.array([0.0, 0.1]))}, 'two rounds')
  fig.canvas.draw()
  ticks = fig.axes[0].get_xticks()
  assert len(ticks) and all(float(t).is_integer() for t in ticks), ticks


def test_diverged_run_plot_shows_its_point_and_round(monkeypatch):
  fig = _figure_of(monkeypatch, report.plot_accuracy, [0], [0.1], [0.1], 'one point',
                   diverged_at=1)
  ax = fig.axes[0]
  assert ax.lines[0].get_marker() not in (None, 'None', '')  # one evaluation: a visible dot
  assert 'diverged at round 1' in [t.get_text() for t in ax.get_legend().get_texts()]

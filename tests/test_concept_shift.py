"""Concept shift as FedFOR §4.4: one class at a time, rate p per round, and its metrics."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_drift import metrics, report
from fedjax_drift.data import scenarios


def _long_run(prob, rounds, num_classes=10, seed=0):
  """Label maps and diagnostics of `rounds` calls of before_round, in one jitted scan."""
  scen = scenarios.concept_shift(num_classes, prob)

  def body(label_map, key):
    new = scen.before_round(label_map, key)
    return new, (new, scen.diagnostics(label_map, new))

  keys = jax.random.split(jax.random.key(seed), rounds)
  _, (maps, diag) = jax.jit(lambda k: jax.lax.scan(body, scen.init(None), k))(keys)
  before = np.concatenate([np.arange(num_classes)[None], np.asarray(maps)[:-1]])
  return before, np.asarray(maps), {k: np.asarray(v) for k, v in diag.items()}


def test_shift_rate_over_a_long_run():
  """2000 rounds at p = 0.05: ~100 shifts (sd ~10), each changing exactly one class to a
  different label, spread over the classes; diagnostics name each one."""
  before, after, diag = _long_run(0.05, 2000)
  changed = before != after
  per_round = changed.sum(axis=1)
  assert set(per_round.tolist()) <= {0, 1}
  shifts = int(per_round.sum())
  assert 65 <= shifts <= 135, shifts
  rounds = np.flatnonzero(per_round)
  classes = changed[rounds].argmax(axis=1)
  np.testing.assert_array_equal(diag['shift_class'][rounds], classes)
  np.testing.assert_array_equal(diag['shift_label'][rounds], after[rounds, classes])
  assert np.all(diag['shift_class'][per_round == 0] == -1)
  assert np.all(diag['shift_label'][per_round == 0] == -1)
  assert np.all(after[rounds, classes] != before[rounds, classes])
  assert len(set(classes.tolist())) == 10  # every class gets picked in ~100 draws
  assert diag['shift_class'].dtype == np.int32


def test_every_round_shifts_one_class_at_prob_one():
  before, after, _ = _long_run(1.0, 300, num_classes=4)
  assert np.all((before != after).sum(axis=1) == 1)
  # The new label is uniform over the 3 others: offsets 1, 2, 3 each about a third.
  rows = np.arange(300)
  c = (before != after).argmax(axis=1)
  offsets = (after[rows, c] - before[rows, c]) % 4
  counts = np.bincount(offsets, minlength=4)
  assert counts[0] == 0 and np.all(np.abs(counts[1:] - 100) < 30)


def test_other_scenarios_report_nothing():
  assert scenarios.static().diagnostics((), ()) == {}
  y = np.repeat(np.arange(3), 10)
  assert scenarios.longtail_stateless(y, 3).diagnostics((), ()) == {}


def test_concept_shift_metrics():
  rounds = [0, 1, 2, 3, 4, 5, 6, 7, 8]
  acc = [0.1, 0.5, 0.7, 0.3, 0.6, 0.75, 0.2, 0.4, 0.5]
  shifts = [{'round': 3, 'class': 2, 'new_label': 0}, {'round': 6, 'class': 1, 'new_label': 2}]
  out = metrics.concept_shift_metrics(rounds, acc, shifts)
  best = [0.1, 0.5, 0.7, 0.7, 0.7, 0.75, 0.75, 0.75, 0.75]
  assert out['average_best_accuracy'] == pytest.approx(np.mean(best))
  assert out['average_accuracy'] == pytest.approx(np.mean(acc))
  first, second = out['shifts']
  assert first['class'] == 2 and first['new_label'] == 0 and first['round'] == 3
  # Shift at the start of round 3: pre-shift accuracy is round 2's 0.7, regained at round 5.
  assert first['pre_shift_accuracy'] == 0.7 and first['rounds_to_regain'] == 3
  assert second['pre_shift_accuracy'] == 0.75 and second['rounds_to_regain'] is None
  # Sparse evaluations: the last evaluation before the shift, the first one after.
  sparse = metrics.concept_shift_metrics([0, 5, 10], [0.2, 0.6, 0.65],
                                         [{'round': 7, 'class': 0, 'new_label': 1}])
  assert sparse['shifts'][0]['pre_shift_accuracy'] == 0.6
  assert sparse['shifts'][0]['rounds_to_regain'] == 4


def test_plot_accuracy_marks_shifts(tmp_path, monkeypatch):
  import matplotlib.axes
  drawn = []
  original = matplotlib.axes.Axes.axvline
  monkeypatch.setattr(matplotlib.axes.Axes, 'axvline',
                      lambda self, x, *a, **k: drawn.append(x) or original(self, x, *a, **k))
  report.plot_accuracy(str(tmp_path / 'a.png'), [0, 5, 10], [0.1, 0.5, 0.4], [0.1, 0.5, 0.5],
                       'run', marks=[3, 7])
  assert drawn == [3, 7] and (tmp_path / 'a.png').stat().st_size > 0
  report.plot_accuracy(str(tmp_path / 'b.png'), [0, 5], [0.1, 0.5], [0.1, 0.5], 'run')
  assert drawn == [3, 7]

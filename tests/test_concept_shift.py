"""Concept shift as FedFOR §4.4: one class at a time, rate p per round, and its metrics."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_drift import metrics, report
from fedjax_drift.data import scenarios


def _long_run(prob, rounds, num_classes=10, seed=0, **options):
  """Label maps and diagnostics of `rounds` calls of before_round, in one jitted scan."""
  scen = scenarios.concept_shift(num_classes, prob, rounds=rounds, **options)

  def body(state, args):
    done, key = args
    new = scen.before_round(state, key, done)
    return new, (scenarios.label_map_of(new), scen.diagnostics(state, new))

  keys = jax.random.split(jax.random.key(seed), rounds)
  init = scen.init(jax.random.key(seed + 100))
  _, (maps, diag) = jax.jit(lambda k: jax.lax.scan(body, init, (jnp.arange(rounds), k)))(keys)
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
  since = [0.1, 0.5, 0.7, 0.3, 0.6, 0.75, 0.2, 0.4, 0.5]  # the best resets at rounds 3 and 6
  assert out['average_best_since_shift'] == pytest.approx(np.mean(since))
  first, second = out['shifts']
  assert first['class'] == 2 and first['new_label'] == 0 and first['round'] == 3
  # Shift at the start of round 3: pre-shift accuracy is round 2's 0.7, regained at round 5;
  # its window is rounds 3..5 (the next shift starts round 6).
  assert first['pre_shift_accuracy'] == 0.7 and first['rounds_to_recover'] == 3
  assert first['recovered'] is True and first['until_round'] == 5
  assert first['best_since'] == 0.75 and first['mean_since'] == pytest.approx(0.55)
  assert first['evaluations_since'] == 3
  assert second['pre_shift_accuracy'] == 0.75 and second['rounds_to_recover'] is None
  assert second['recovered'] is False and second['best_since'] == 0.5
  assert (out['shift_count'], out['recovered'], out['never_recovered'],
          out['unmeasured']) == (2, 1, 1, 0)
  assert out['mean_rounds_to_recover'] == 3.0
  # Sparse evaluations: the last evaluation before the shift, the first one after.
  sparse = metrics.concept_shift_metrics([0, 5, 10], [0.2, 0.6, 0.65],
                                         [{'round': 7, 'class': 0, 'new_label': 1}])
  assert sparse['shifts'][0]['pre_shift_accuracy'] == 0.6
  assert sparse['shifts'][0]['rounds_to_recover'] == 4


def test_recovered_and_never_recovered_runs_are_told_apart():
  """The review's case: the average best accuracy is the same whether a run recovers from
  its shift or not; the metrics since the shift are not."""
  rounds = list(range(8))
  recovers = [0.2, 0.6, 0.7, 0.3, 0.5, 0.7, 0.7, 0.7]
  never = [0.2, 0.6, 0.7, 0.3, 0.3, 0.3, 0.3, 0.3]
  shift = [{'round': 3, 'class': 0, 'new_label': 1}]
  a = metrics.concept_shift_metrics(rounds, recovers, shift)
  b = metrics.concept_shift_metrics(rounds, never, shift)
  assert a['average_best_accuracy'] == b['average_best_accuracy'] == pytest.approx(5.0 / 8)
  assert a['average_best_since_shift'] == pytest.approx((0.2 + 0.6 + 0.7 + 0.3 + 0.5 + 0.7 * 3) / 8)
  assert b['average_best_since_shift'] == pytest.approx((0.2 + 0.6 + 0.7 + 0.3 * 5) / 8)
  assert a['shifts'][0]['rounds_to_recover'] == 3 and a['shifts'][0]['recovered'] is True
  assert b['shifts'][0]['rounds_to_recover'] is None and b['shifts'][0]['recovered'] is False
  assert (a['recovered'], a['never_recovered']) == (1, 0)
  assert (b['recovered'], b['never_recovered'], b['mean_rounds_to_recover']) == (0, 1, None)
  assert b['shifts'][0]['best_since'] == 0.3 and b['shifts'][0]['mean_since'] == pytest.approx(0.3)


def test_recovery_counts_only_before_the_next_shift_and_unmeasured_windows():
  """A shift whose accuracy comes back only after the next shift was never recovered from;
  a shift with no evaluation in its window (sparse --eval_every) cannot be measured."""
  out = metrics.concept_shift_metrics(
      [0, 1, 2, 3, 4, 5], [0.5, 0.8, 0.4, 0.5, 0.9, 0.9],
      [{'round': 2}, {'round': 4}])
  first, second = out['shifts']
  assert first['recovered'] is False and first['until_round'] == 3  # 0.9 only at round 4
  assert second['pre_shift_accuracy'] == 0.5 and second['rounds_to_recover'] == 1
  sparse = metrics.concept_shift_metrics([0, 5, 10], [0.2, 0.6, 0.7],
                                         [{'round': 6}, {'round': 8}])
  assert sparse['shifts'][0]['recovered'] is None and sparse['shifts'][0]['best_since'] is None
  assert sparse['shifts'][1]['pre_shift_accuracy'] == 0.6  # round 5: no evaluation at 6, 7
  assert sparse['unmeasured'] == 1 and sparse['recovered'] == 1
  none = metrics.concept_shift_metrics([0, 1], [0.1, 0.2], [])
  assert none['shift_count'] == 0 and none['average_best_since_shift'] == pytest.approx(0.15)


def test_swap_exchanges_two_labels_and_relabel_merges():
  """swap: exactly two classes change, taking each other's labels (a permutation stays one);
  relabel: one class moves to a label another class holds (two classes merge)."""
  before, after, diag = _long_run(1.0, 200, num_classes=5, kind='swap')
  rows = np.arange(200)
  changed = before != after
  assert np.all(changed.sum(axis=1) == 2)
  c, d = diag['shift_class'], diag['shift_other']
  assert np.all(c < d) and np.all(changed[rows, c] & changed[rows, d])
  np.testing.assert_array_equal(after[rows, c], before[rows, d])
  np.testing.assert_array_equal(after[rows, d], before[rows, c])
  np.testing.assert_array_equal(diag['shift_label'], after[rows, c])
  assert all(sorted(m) == list(range(5)) for m in after)  # always a permutation
  pairs = {(int(a), int(b)) for a, b in zip(c, d)}
  assert len(pairs) == 10  # every one of the 5 * 4 / 2 pairs comes up in 200 draws

  before, after, diag = _long_run(1.0, 1, num_classes=5)
  assert 'shift_other' not in diag  # relabel runs keep their two columns
  moved = int(diag['shift_class'][0])
  label = after[0, moved]
  assert (before[0] != after[0]).sum() == 1 and label != before[0, moved]
  assert (after[0] == label).sum() == 2  # merged with the class that held the label


@pytest.mark.parametrize('kind', ['relabel', 'swap'])
def test_exact_count_of_shifts_at_drawn_rounds(kind):
  """count=N: exactly N shifts over the run, at N distinct rounds in 2..R drawn from the
  init key (so each seed has its own schedule), whatever the probability says."""
  seen = []
  for seed in range(4):
    before, after, diag = _long_run(0.0, 200, seed=seed, kind=kind, count=10)
    shifted = np.flatnonzero(diag['shift_class'] >= 0) + 1  # 1-based round numbers
    assert len(shifted) == 10 and shifted.min() >= 2 and shifted.max() <= 200
    assert np.all((before != after).any(axis=1) == (diag['shift_class'] >= 0))
    scen = scenarios.concept_shift(10, 0.0, kind=kind, count=10, rounds=200)
    np.testing.assert_array_equal(shifted, scen.init(jax.random.key(seed + 100)).shift_rounds)
    seen.append(tuple(shifted))
  assert len(set(seen)) == 4
  every = scenarios.concept_shift(3, 0.0, count=4, rounds=5).init(jax.random.key(0))
  np.testing.assert_array_equal(every.shift_rounds, [2, 3, 4, 5])


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


def _csv(path):
  import csv  # pylint: disable=g-import-not-at-top
  with open(path, newline='') as f:
    return list(csv.DictReader(f))


def _stop_after(round_, monkeypatch):
  """Makes the next run raise KeyboardInterrupt once round `round_` is recorded."""
  from fedjax_drift import simulation  # pylint: disable=g-import-not-at-top
  original = simulation._record  # pylint: disable=protected-access

  def record(cfg, out, prog, state, done, last):
    last = original(cfg, out, prog, state, done, last)
    if done == round_:
      raise KeyboardInterrupt
    return last
  monkeypatch.setattr(simulation, '_record', record)


@pytest.mark.slow
def test_tiny_run_records_its_shifts_and_resume_replays_them(tiny_npz, unequal_partition,
                                                              tmp_path, monkeypatch):
  """A real run with exactly 2 swaps in 6 rounds: summary.json, shifts.csv and rounds.csv
  name the same shifts, the metrics are those of metrics.csv's accuracies, and a run stopped
  after round 3 and resumed draws the same shifts and the same numbers."""
  import fedjax_drift  # pylint: disable=g-import-not-at-top
  from helpers import tiny_config  # pylint: disable=g-import-not-at-top
  quiet = dict(log=lambda *_: None)
  kw = dict(scenario='concept_shift', concept_shift_kind='swap', concept_shift_count=2,
            rounds=6)
  out = tmp_path / 'straight'
  import matplotlib.axes  # pylint: disable=g-import-not-at-top
  drawn, original = [], matplotlib.axes.Axes.axvline
  with monkeypatch.context() as m:
    m.setattr(matplotlib.axes.Axes, 'axvline',
              lambda self, x, *a, **k: drawn.append(x) or original(self, x, *a, **k))
    summary = fedjax_drift.run(tiny_config(tiny_npz, unequal_partition, out=str(out), **kw),
                               **quiet)
  shifts = summary['concept_shifts']
  # accuracy.png marks each shift between the evaluations before and after it
  assert drawn == [s['round'] - 0.5 for s in shifts]
  assert len(shifts) == 2 and all(s['kind'] == 'swap' for s in shifts)
  rows = _csv(out / 'rounds.csv')
  assert [int(r['round']) for r in rows if float(r['shift_class']) >= 0] == \
      [s['round'] for s in shifts]
  evals = _csv(out / 'metrics.csv')
  expected = metrics.concept_shift_metrics([int(r['round']) for r in evals],
                                           [float(r['test_accuracy']) for r in evals], shifts)
  assert summary['concept_shift'] == expected
  table = _csv(out / 'shifts.csv')
  assert [int(r['round']) for r in table] == [s['round'] for s in shifts]
  for row, s in zip(table, expected['shifts']):
    assert row['classes'] == f"{s['class']}<->{s['other_class']}"
    assert row['rounds_to_recover'] == {True: str(s['rounds_to_recover']), False: 'never',
                                        None: 'unmeasured'}[s['recovered']]
  assert summary['grid_points'][0]['concept_shift']['shift_count'] == 2

  resumed = tmp_path / 'resumed'
  with monkeypatch.context() as m:
    _stop_after(3, m)
    with pytest.raises(KeyboardInterrupt):
      fedjax_drift.run(tiny_config(tiny_npz, unequal_partition, out=str(resumed), **kw), **quiet)
  assert not (resumed / 'shifts.csv').exists()
  again = fedjax_drift.resume(str(resumed), **quiet)
  assert again['concept_shifts'] == shifts
  assert again['concept_shift'] == summary['concept_shift']
  assert _csv(resumed / 'shifts.csv') == table


def test_shift_count_must_fit_the_rounds():
  import fedjax_drift  # pylint: disable=g-import-not-at-top
  from fedjax_drift.errors import UserError  # pylint: disable=g-import-not-at-top
  with pytest.raises(UserError, match='--concept_shift_count=5 must be in 0..4'):
    fedjax_drift.Config(scenario='concept_shift', concept_shift_count=5, rounds=5).validate()
  fedjax_drift.Config(scenario='concept_shift', concept_shift_count=4, rounds=5).validate()


@pytest.mark.slow
def test_a_sweep_draws_each_seeds_shifts_as_its_single_run(tiny_npz, unequal_partition,
                                                           tmp_path):
  """Two seeds in one program: each run's shifts (drawn at init from its own key) are those
  of the single run with that seed, and shifts.csv holds both runs' rows."""
  import fedjax_drift  # pylint: disable=g-import-not-at-top
  from helpers import tiny_config  # pylint: disable=g-import-not-at-top
  kw = dict(scenario='concept_shift', concept_shift_count=3, rounds=6)
  sweep = fedjax_drift.run(tiny_config(tiny_npz, unequal_partition, seeds=2,
                                       out=str(tmp_path / 'sweep'), **kw), log=lambda *_: None)
  for run in sweep['runs']:
    single = fedjax_drift.run(tiny_config(tiny_npz, unequal_partition, seed=run['seed'],
                                          out=str(tmp_path / f'seed{run["seed"]}'), **kw),
                              log=lambda *_: None)
    assert run['concept_shifts'] == single['concept_shifts']
    assert len(run['concept_shifts']) == 3
  rows = _csv(tmp_path / 'sweep' / 'shifts.csv')
  assert [(int(r['run']), int(r['round'])) for r in rows] == \
      [(run['run'], s['round']) for run in sweep['runs'] for s in run['concept_shifts']]
  assert sweep['runs'][0]['concept_shifts'] != sweep['runs'][1]['concept_shifts']

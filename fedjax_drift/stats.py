"""Statistics over seeds for results tables: intervals, paired differences, grid selection.

Runs with the same seed share their partition, validation split, initial model, cohorts and
batches (study.py derives all of them from the seed alone), so two methods run on the same
seeds form pairs: the difference seed by seed removes what the seeds share, and its interval
is narrower than the two methods' intervals suggest.

Every interval here is Student's t-interval for a mean at 95%:
  mean ± t_{0.975, n-1} · s / √n,  s the sample standard deviation (ddof = 1),
the quantile from scipy.stats.t. One value (n = 1) has no interval (lo = hi = None).
Accuracy intervals (results.seed_stats) are clipped to [0, 1] (clip_unit); one that then
spans all of it is marked uninformative in every table.
"""
import math

import numpy as np

from fedjax_drift import metrics

CONFIDENCE = 0.95

# What a table reports of each run, in the words every table uses (issue 22: say which).
METRICS = {'final': 'final accuracy (at the last round)',
           'best': 'best accuracy (the highest over the evaluations after round 0)',
           'best_half': 'best accuracy up to half the rounds (after round 0)',
           'last10': 'last-10% mean (mean accuracy over the evaluations in the last 10% of '
                     'the rounds)',
           'at_best_val': 'test accuracy at the evaluation with the best validation accuracy',
           'avg_best': 'average best accuracy (the mean over the evaluations after round 0 of '
                       'the best accuracy so far; FedFOR Table 5)'}


def interval(values, confidence=CONFIDENCE) -> dict:
  """{'mean', 'lo', 'hi', 'n'} of the finite `values`: the t-interval of their mean.

  values: a sequence of floats (None and nan are left out). n < 2 gives lo = hi = None;
  no values gives mean = None too. Equal values give lo = hi = mean."""
  x = np.asarray([v for v in values if v is not None and math.isfinite(v)], np.float64)
  if not len(x):
    return {'mean': None, 'lo': None, 'hi': None, 'n': 0}
  mean = float(x.mean())
  if len(x) < 2:
    return {'mean': mean, 'lo': None, 'hi': None, 'n': 1}
  # Imported here, not at the top: scipy.stats costs ~60 MB of resident memory that a run
  # which never builds a seed table would carry to its peak (issue 23's peak-RSS target).
  from scipy import stats as scipy_stats  # pylint: disable=g-import-not-at-top
  half = float(scipy_stats.t.ppf(0.5 + confidence / 2, len(x) - 1) * x.std(ddof=1)
               / math.sqrt(len(x)))
  return {'mean': mean, 'lo': mean - half, 'hi': mean + half, 'n': int(len(x))}


def clip_unit(stat) -> dict:
  """interval()'s dict of an accuracy with lo and hi clipped to [0, 1], where every accuracy
  and so its mean lies (a t-interval of 2 seeds can reach [-0.33, 1.35]). A clipped interval
  of exactly [0, 1] says nothing: uninformative(stat) is then True."""
  if stat.get('lo') is None:
    return stat
  return {**stat, 'lo': min(max(stat['lo'], 0.0), 1.0), 'hi': min(max(stat['hi'], 0.0), 1.0)}


def uninformative(lo, hi) -> bool:
  """Whether an accuracy interval [lo, hi] (clip_unit's; None: none) spans all of [0, 1]."""
  return lo is not None and hi is not None and lo <= 0.0 and hi >= 1.0


def seeds_words(n) -> str:
  """'1 seed', '3 seeds'."""
  return f'{n} seed' + ('' if n == 1 else 's')


def paired_difference(a: dict, b: dict, confidence=CONFIDENCE) -> dict:
  """The mean difference a - b over the seeds both have, with its t-interval.

  a, b: {seed: value}. Returns interval()'s keys plus 'seeds' (the shared seeds, sorted) and
  'within_noise': True when the interval contains 0, False when it does not, None with fewer
  than two shared seeds (no interval)."""
  shared = sorted(set(a) & set(b))
  pairs = [(a[s], b[s]) for s in shared]
  ok = [(s, x - y) for s, (x, y) in zip(shared, pairs)
        if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)]
  out = interval([d for _, d in ok], confidence)
  out['seeds'] = [s for s, _ in ok]
  out['within_noise'] = None if out['lo'] is None else bool(out['lo'] <= 0 <= out['hi'])
  return out


def best_point(points, score):
  """The point with the highest score(point) (None or nan scores are skipped; the first of
  equals wins, so grid order breaks ties), or None when no point has a score."""
  best, best_score = None, -math.inf
  for p in points:
    s = score(p)
    if s is not None and math.isfinite(s) and s > best_score:
      best, best_score = p, s
  return best


def fmt_interval(stat, digits=4) -> str:
  """'0.7795 [0.7660, 0.7930]', '0.7795 (1 seed)', '0.5000 [0, 1]: uninformative (2 seeds)'
  (an accuracy interval clipped to all of [0, 1], clip_unit) or '–' for an interval() dict."""
  if stat is None or stat.get('mean') is None:
    return '–'
  mean = f'{stat["mean"]:.{digits}f}'
  if stat.get('lo') is None:
    return f'{mean} (1 seed)'
  if uninformative(stat['lo'], stat['hi']):
    return f'{mean} [0, 1]: uninformative ({seeds_words(stat.get("n", 2))})'
  return f'{mean} [{stat["lo"]:.{digits}f}, {stat["hi"]:.{digits}f}]'


def fmt_difference(diff, digits=4) -> str:
  """'+0.0310 [+0.0100, +0.0520]', with ', within noise' when the interval holds 0, and
  '(1 seed: no interval)' / '–' when there is too little to say."""
  if diff is None or diff.get('mean') is None:
    return '–'
  mean = f'{diff["mean"]:+.{digits}f}'
  if diff.get('lo') is None:
    return f'{mean} (1 seed: no interval)'
  text = f'{mean} [{diff["lo"]:+.{digits}f}, {diff["hi"]:+.{digits}f}]'
  return text + (', within noise' if diff['within_noise'] else '')


# What a dataset's own validation split is (--val_source=dataset), for tables' labels.
OWN_SPLITS = {'sst5': 'SST-5\'s official dev split, trees/dev.txt'}


def own_split_name(dataset) -> str:
  """The words naming `dataset`'s own validation split in a selection label."""
  return OWN_SPLITS.get(dataset, f'{dataset}\'s validation split')


def selection_label(select_on, val_fraction=0.0, val_source='clients', metric='',
                    dataset_split='') -> str:
  """One sentence saying how grid points were chosen and what is reported; dataset_split
  names the dataset's own split with val_source='dataset' (e.g. "SST-5's dev.txt")."""
  what = f' {METRICS.get(metric, metric)}' if metric else ''
  if select_on == 'validation':
    source = ('of each client\'s training examples' if val_source == 'clients'
              else 'of the pooled training examples, held out before partitioning')
    split = (f'the dataset\'s own validation split ({dataset_split or "its dev split"}, '
             'apart from the training examples, the same for every method'
             if val_source == 'dataset' else
             f'a validation split ({val_fraction:g} {source}, the same for every method at a '
             'seed')
    return (f'Selection on validation: each method\'s grid point has the best mean{what} on '
            f'{split}); the table reports the test accuracy of that point.')
  return (f'Selection on test (the papers\' protocol): each method\'s grid point has the best '
          f'mean test{what}, and the table reports that same test accuracy, so it includes '
          'the selection\'s own noise (more so for bigger grids).')


def validation_summary(rounds, test_accuracies, val_accuracies, total_rounds) -> dict:
  """One run's validation metrics (--val_fraction): the validation curve's final, best and
  last-10% mean, and the test accuracy at the first evaluation where the validation accuracy
  peaks, the round one would stop at by looking at validation data only (the test curve's
  own best is the oracle's choice). Inputs are one run's evaluations, in round order."""
  val = np.asarray(val_accuracies, np.float64)
  peak = int(np.argmax(val))
  return {'val_final_accuracy': float(val[-1]), 'val_best_accuracy': float(val[peak]),
          'val_last10_mean_accuracy': metrics.last_fraction_mean(rounds, val, total_rounds),
          'test_at_best_val_accuracy': float(test_accuracies[peak])}


VALIDATION_KEYS = ('val_final_accuracy', 'val_best_accuracy', 'val_last10_mean_accuracy',
                   'test_at_best_val_accuracy')

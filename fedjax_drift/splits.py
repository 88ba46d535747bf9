"""What each split of a run holds: the run directory's `splits.csv`, and the one-line warning
for a partition that gives no client some class of the test set.

splits.csv has one row per (run, split, client, label) with a count > 0 (labels a client's
split does not hold have no row), in run order, then split, client and label order:
- `train`: each client's training examples (after any hold-out). Under
  --scenario=longtail_stateless clients are drawn afresh from the whole training set every
  round, so the one row set is client -1, that set;
- `client_val`: each client's own validation share (--val_source=clients);
- `server_val`: the server's validation split (--val_source=server or dataset), client -1;
- `vote_val`: FedGKD-Vote's voting examples (--vote_val_size), client -1;
- `test`: client -1 the whole test set (what `test_accuracy` scores), and with client test
  splits (--test_partition=like_train, --partition=domains) each client's own.
`run` is the run's row of runs.csv: each run of a sweep has its own partition (its seed).
Labels are the dataset's, before any concept shift relabels them.
"""
import csv
import io

import numpy as np

from fedjax_drift import report

COLUMNS = ('run', 'split', 'client', 'label', 'count')
SPLITS = ('train', 'client_val', 'server_val', 'vote_val', 'test')


def _counts(labels, owners, num_classes):
  """[(client, label, count)] of count > 0, sorted, for examples with these labels and
  owners (clients; -1 the server)."""
  labels = np.asarray(labels, np.int64)
  owners = np.asarray(owners, np.int64)
  if not len(labels):
    return []
  keys, counts = np.unique((owners + 1) * num_classes + labels, return_counts=True)
  return list(zip((keys // num_classes - 1).tolist(), (keys % num_classes).tolist(),
                  counts.tolist()))


def _owned(parts):
  """(indices, owners) of per-client index arrays."""
  parts = [np.asarray(p, np.int64) for p in parts]
  if not parts:
    return np.zeros(0, np.int64), np.zeros(0, np.int64)
  return (np.concatenate(parts),
          np.concatenate([np.full(len(p), i, np.int64) for i, p in enumerate(parts)]))


def _labels(dataset):
  """The labels of the rows a Validation's index names: the training examples, then the
  dataset's own validation split (--val_source=dataset)."""
  if getattr(dataset, 'y_val', None) is None:
    return np.asarray(dataset.y_train)
  return np.concatenate([dataset.y_train, dataset.y_val])


def tables(exp) -> dict:
  """split -> [(client, label, count)] of one run (a study.Experiment); splits the run does
  not have are left out."""
  ds, c = exp.dataset, exp.dataset.num_classes
  y_train = np.asarray(ds.y_train)
  out = {}
  if exp.scenario is not None and exp.scenario.fresh_cohort is not None:
    out['train'] = _counts(y_train, np.full(len(y_train), -1), c)
  else:
    index, owner = _owned(exp.train_parts)
    out['train'] = _counts(y_train[index], owner, c)
  if exp.validation is not None:
    labels, owner = _labels(ds)[exp.validation.index], np.asarray(exp.validation.owner)
    if (owner >= 0).any():
      out['client_val'] = _counts(labels[owner >= 0], owner[owner >= 0], c)
    if (owner < 0).any():
      out['server_val'] = _counts(labels[owner < 0], owner[owner < 0], c)
  if exp.vote_index is not None:
    out['vote_val'] = _counts(y_train[exp.vote_index], np.full(len(exp.vote_index), -1), c)
  y_test = np.asarray(ds.y_test)
  test = _counts(y_test, np.full(len(y_test), -1), c)
  if exp.test_parts is not None:
    index, owner = _owned(exp.test_parts)
    test += _counts(y_test[index], owner, c)
  out['test'] = test
  return out


def csv_text(experiments) -> str:
  """splits.csv's text for the runs `experiments` (runs.csv order)."""
  buf = io.StringIO()
  buf.write(','.join(COLUMNS) + '\n')
  for run, exp in enumerate(experiments):
    per_split = tables(exp)
    for split in SPLITS:
      buf.writelines(f'{run},{split},{client},{label},{count}\n'
                     for client, label, count in per_split.get(split, ()))
  return buf.getvalue()


def write(path, experiments):
  """Writes splits.csv (whole, atomically: a --resume rewrites the same rows)."""
  report.atomic_write(path, csv_text(experiments).encode())


def read(path) -> list:
  """splits.csv's rows as dicts with int run, client, label and count."""
  with open(path, newline='') as f:
    return [{k: (v if k == 'split' else int(v)) for k, v in row.items()}
            for row in csv.DictReader(f)]


def untrained_test_classes(exp) -> np.ndarray:
  """The classes of the test set that no client of the run `exp` trains on (sorted)."""
  if exp.scenario is not None and exp.scenario.fresh_cohort is not None:
    trained = np.asarray(exp.dataset.y_train)  # every client is drawn from all of it
  else:
    index, _ = _owned(exp.train_parts)
    trained = np.asarray(exp.dataset.y_train)[index]
  return np.setdiff1d(np.unique(np.asarray(exp.dataset.y_test)), trained)


def coverage_warning(partition, experiments) -> str:
  """The one-line warning for runs whose partition (--partition's name) gives no client
  some class of the test set ('' when every run's clients hold every test class). The run
  goes on: the global model is scored on classes it never trained on."""
  missing = [(exp.config.seed, untrained_test_classes(exp)) for exp in experiments]
  missing = [(seed, classes) for seed, classes in missing if len(classes)]
  if not missing:
    return ''
  seed, classes = missing[0]
  y_test = np.asarray(experiments[0].dataset.y_test)
  share = int(np.isin(y_test, classes).sum())
  runs = (f'seed {seed}' if len(experiments) == 1 else
          f'{len(missing)} of {len(experiments)} runs; seed {seed}')
  shown = ', '.join(map(str, classes[:8].tolist())) + (
      f', ... ({len(classes)} in all)' if len(classes) > 8 else '')
  return (f'warning: --partition={partition} gives no client class(es) {shown} of the '
          f'test set ({share} of its {len(y_test)} examples; {runs}): the global model is '
          'tested on classes it never trains on (splits.csv lists each split; the run '
          'continues)')

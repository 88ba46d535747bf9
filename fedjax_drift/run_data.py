"""One run's data: its clients' parts of the training set, the validation splits carved from
them, FedGKD-Vote's voting examples, and the --cohorts file.

`partition_run` is what study.py builds each run's client tables from; the checks here
(`check_structure`, `read_cohorts`, `check_cohorts`) refuse, in one line naming the flag, a
dataset or file the partition cannot use, before any run is built.
"""
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from fedjax_drift import algorithms
from fedjax_drift.data import partitions
from fedjax_drift.data import pipeline as input_pipeline
from fedjax_drift.errors import UserError, read_json_input


class Validation(NamedTuple):
  """A run's validation split: examples no client trains on, carved from the training set
  (--val_fraction) or the dataset's own (--val_source=dataset: rows n_train.. of the shared
  array, after dataset.x_train)."""
  index: np.ndarray  # int64 [M]: rows of the shared training array, sorted by owner then index
  owner: np.ndarray  # int32 [M]: the client each example was carved from; -1 = the server's


def read_cohorts(path, rounds, cohort_size):
  """--cohorts=file:PATH: a JSON list of one list of client ids per round.

  Args: the file's path; --rounds (the file needs at least that many lists; later ones are
  ignored); --clients_per_round K (every list holds K distinct ids).
  Returns: an int32 array [len(file), K]. Ids are checked against the partition's client
  count in `check_cohorts` once it is known.
  """
  flag = f'--cohorts=file:{path}'
  raw = read_json_input(path, flag, 'a JSON list of client-id lists')
  if not isinstance(raw, list) or not all(isinstance(c, list) for c in raw):
    raise UserError(f'{flag}: expected a JSON list of client-id lists, one per round')
  if len(raw) < rounds:
    raise UserError(f'{flag}: {len(raw)} cohorts for --rounds={rounds}; give one per round')
  for t, c in enumerate(raw):
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in c):
      raise UserError(f'{flag}: round {t}\'s cohort holds a value that is not a client id '
                      '(an int >= 0)')
    if len(c) != cohort_size:
      raise UserError(f'{flag}: round {t}\'s cohort has {len(c)} clients, '
                      f'--clients_per_round={cohort_size}; make them agree')
    if len(set(c)) != len(c):
      raise UserError(f'{flag}: round {t}\'s cohort names a client twice')
  return np.asarray(raw, np.int32).reshape(len(raw), cohort_size)


def check_cohorts(config, cohorts, num_clients):
  """UserError unless every id of --cohorts' file is one of the partition's num_clients."""
  if cohorts is not None and cohorts.size and int(cohorts.max()) >= num_clients:
    t = int(np.argmax(cohorts.max(axis=1) >= num_clients))
    raise UserError(f'--cohorts={config.cohorts}: round {t}\'s cohort names client '
                    f'{int(cohorts[t].max())}, but --partition={config.partition} has '
                    f'{num_clients} clients (ids 0..{num_clients - 1})')


def with_own_validation(config, dataset):
  """(x, y) of the shared array: the training examples, then with --val_source=dataset the
  dataset's own validation split (partitions index only the first n_train rows, so no client
  trains on it, and evaluation gathers it like a carved split)."""
  if config.val_source != 'dataset':
    return dataset.x_train, dataset.y_train
  if dataset.x_val is None:
    raise UserError(f'--val_source=dataset: --dataset={config.dataset} has no validation '
                    'split of its own (sst5 with dev.txt, text: with a validation file, or an '
                    'npz with x_val and y_val); use --val_fraction with --val_source=clients')
  return (np.concatenate([dataset.x_train, dataset.x_val]),
          np.concatenate([dataset.y_train, dataset.y_val]))


def check_structure(config, dataset):
  """The partitions that read a dataset's domain ids or group columns refuse one without
  (partitions.check_dataset: the entry's own check)."""
  partitions.check_dataset(config, dataset)


def validation_split(config, dataset, norm=None, pool=None, held=None):
  """The server validation split a part reads (algorithms.server_validation: FedGKD-Vote's,
  of --vote_val_size training examples), seeded.

  Returns (kept example indices, server_data or None). Clients are partitioned over the kept
  examples only. With a file partition, validation examples come from examples no client
  holds (the file's indices refer to the full training set). pool: the training examples
  to draw from (default all; less the --val_source=server split). held: that server split,
  when there is one: the vote's examples are drawn from it and the clients keep the pool.
  """
  val, keep = _vote_indices(config, dataset, pool, held)
  if val is None:
    return keep, None
  server_data = {'x_val': input_pipeline.preprocess(jnp.asarray(dataset.x_train[val]), norm),
                 'y_val': jnp.asarray(dataset.y_train[val])}
  return keep, server_data


def _vote_indices(config, dataset, pool=None, held=None):
  """(the server validation examples, FedGKD-Vote's voting examples, or None; the kept
  examples): `validation_split`'s draw, as indices into the training set."""
  n = len(dataset.y_train)
  pool = np.arange(n) if pool is None else pool
  field = algorithms.server_validation(config)  # the part's own flag: --vote_val_size
  if not field:
    return None, pool
  size, rng = getattr(config, field), np.random.default_rng(config.seed + 104729)
  if held is not None:  # the server's held-out split (--val_source=server) validates the vote,
    if size > len(held):  # as FedGKD's code does: the clients keep the whole pool
      raise UserError(f'--{field}={size} exceeds the {len(held)} examples that '
                      f'--val_source=server --val_fraction={config.val_fraction:g} holds out')
    val, keep = np.sort(rng.choice(held, size, replace=False)), pool
  elif partitions.is_fixed(config.partition):  # the vote's examples: those no client holds
    used = np.concatenate(partitions.client_parts(config, dataset, np.arange(n))[0])
    free = np.setdiff1d(np.arange(n), used)
    if len(free) < size:
      raise UserError(f'--{field}={size}: only {len(free)} training examples are in no '
                      f'client of --partition={config.partition}')
    val, keep = rng.choice(free, size, replace=False), np.arange(n)
  else:
    if size >= len(pool):
      raise UserError(f'--{field}={size} must be smaller than the {len(pool)} training '
                      'examples' + (' left by --val_fraction' if len(pool) < n else ''))
    perm = rng.permutation(len(pool))  # with the whole pool: the draw before --val_fraction
    val, keep = pool[perm[:size]], np.sort(pool[perm[size:]])
  return val, keep


def partition_run(config, dataset, norm=None):
  """(train parts as indices into the full training set, test parts or None, server data,
  Validation or None, FedGKD-Vote's voting examples or None) of one run: config (resolved,
  its seed the run's), the loaded dataset and its input normalisation (None: none)."""
  ds = dataset
  pool, server_val = np.arange(len(ds.y_train)), None
  if config.val_fraction and config.val_source == 'server':  # first: the same for every method
    server_val, pool = partitions.server_holdout(pool, config.val_fraction, config.seed,
                                                 config.val_order, ds.y_train)
  vote, keep = _vote_indices(config, ds, pool, server_val)
  server_data = None if vote is None else {
      'x_val': input_pipeline.preprocess(jnp.asarray(ds.x_train[vote]), norm),
      'y_val': jnp.asarray(ds.y_train[vote])}
  parts, test_parts = partitions.client_parts(config, ds, keep)
  if config.test_partition == 'like_train' and test_parts is None:  # domains: split by domain
    # From the clients' whole parts, so the test split does not depend on --val_fraction.
    test_parts = partitions.partition_like(parts, ds.y_train, ds.y_test, config.seed,
                                           ds.num_classes)
  parts, validation = _carve_validation(config, parts, server_val, ds)
  if config.clients_per_round > len(parts):
    raise UserError(f'--clients_per_round={config.clients_per_round} exceeds the '
                    f'{len(parts)} clients of --partition={config.partition}')
  if config.cohort_sampler == 'cover_classes':
    _check_cover_possible(config, ds, parts)
  return parts, test_parts, server_data, validation, vote


def _carve_validation(config, parts, server_val, dataset):
  """(the parts clients train on, Validation or None) for --val_fraction/--val_source."""
  if config.val_source == 'dataset':  # the server's: rows after the training examples
    n, m = len(dataset.y_train), len(dataset.y_val)
    return parts, Validation(np.arange(n, n + m), np.full(m, -1, np.int32))
  if not config.val_fraction:
    return parts, None
  if server_val is not None:
    return parts, Validation(server_val, np.full(len(server_val), -1, np.int32))
  pooled = np.concatenate(parts)
  parts, held = partitions.client_holdout(parts, config.val_fraction, config.seed)
  owner = np.concatenate([np.full(len(h), i, np.int32) for i, h in enumerate(held)])
  index = np.concatenate(held)
  if not len(index):
    raise UserError(f'--val_fraction={config.val_fraction} holds out no example: every '
                    'client has too few; raise it or use --val_source=server')
  partitions.check_covers(dataset.y_train, pooled, index, np.concatenate(parts),
                          f'--val_source=clients --val_fraction={config.val_fraction:g} '
                          '(each client\'s own share)',
                          'use --val_source=server --val_order=tail (the last share of each '
                          'class) or a larger --val_fraction')
  return parts, Validation(index, owner)


def _check_cover_possible(config, dataset, parts):
  """A greedy set cover must fit in K clients, or cover_classes cannot hold."""
  has = [set(np.unique(dataset.y_train[p]).tolist()) for p in parts]
  uncovered, used = set().union(*has), 0
  while uncovered and used < config.clients_per_round:
    best = max(has, key=lambda h: len(h & uncovered))
    uncovered -= best
    used += 1
  if uncovered:
    raise UserError(f'--cohort_sampler=cover_classes: {config.clients_per_round} clients per '
                    f'round cannot cover all classes of --partition={config.partition} '
                    f'(seed {config.seed}); raise --clients_per_round')

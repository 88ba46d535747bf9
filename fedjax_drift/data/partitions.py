"""Seeded partitions of a labelled split into clients.

Every partitioner maps (labels, num_clients, rng, ...) to a list of int arrays, one per client,
of example indices. Every example is assigned at most once; partitions that promise
completeness (all but `shards` when the split does not divide evenly) assign every example.
Impossible requests raise `UserError` naming the flag.

Every --partition is a registry entry (kind 'partition', registered at the end of this file)
and is dispatched only through it: `client_parts` builds the chosen one. Its build takes the
flag values, the dataset and `keep` (the training examples clients may hold) and returns the
clients' training parts as indices into the whole training set, with their test parts when
the partition splits the test set too (domains). Its info, a PartitionInfo, says the rest:
the label function of a label partition, whether its parts are fixed indices (file:), and
what it needs of the dataset (`check`, run before any run is built).
"""
from typing import Callable, NamedTuple, Optional

import numpy as np

from fedjax_drift.errors import UserError, read_json_input
from fedjax_drift import registry
from fedjax_drift.data import domains


class PartitionInfo(NamedTuple):
  """A partition entry's info."""
  # A label partition's function: (labels, num_clients, rng, *values of its reads) -> parts.
  split: Optional[Callable] = None
  # Its parts are given indices into the whole training set (file:), not drawn from `keep`:
  # examples held out of the clients (FedGKD-Vote's) come from those no part holds.
  fixed: bool = False
  # check(values, dataset): a UserError naming the flag when the dataset lacks what the
  # partition reads (domain ids, a group column); run on the loaded dataset, before any run.
  check: Optional[Callable] = None
  # Its build splits the test set too (domains): every client has a test split of its own.
  splits_test: bool = False


def iid(labels, num_clients, rng):
  """Shuffles and deals examples into near-equal clients."""
  return [np.sort(part) for part in np.array_split(rng.permutation(len(labels)), num_clients)]


def shards(labels, num_clients, rng, classes_per_client):
  """Sort-and-partition (McMahan et al.): each client gets s equal, single-label shards.

  Each class's examples (shuffled) are cut into shards of one common size, the largest size
  that still yields num_clients * s shards in all; every shard holds one label, so a client
  sees at most s labels. Shards are dealt so a client gets s different labels when a random
  deal allows it (50 tries). Examples that fill no shard are left out, so sizes are equal.
  """
  s = classes_per_client
  num_classes = int(labels.max()) + 1
  if s < 1 or s > num_classes:
    raise UserError(f'--classes_per_client={s} must be between 1 and the number of classes '
                    f'({num_classes})')
  num_shards = num_clients * s
  counts = np.bincount(labels, minlength=num_classes)
  size = len(labels) // num_shards
  while size > 0 and np.sum(counts // size) < num_shards:
    size -= 1
  if size == 0:
    raise UserError(f'--partition=shards: {len(labels)} examples cannot fill '
                    f'{num_clients} clients x {s} shards')
  pool = []  # (label, indices) per shard
  for c in range(num_classes):
    idx = rng.permutation(np.flatnonzero(labels == c))
    pool += [(c, idx[k * size:(k + 1) * size]) for k in range(counts[c] // size)]
  # Keep num_shards shards, dropping from the classes that have the most.
  while len(pool) > num_shards:
    per_class = np.bincount([c for c, _ in pool], minlength=num_classes)
    richest = int(np.argmax(per_class))
    drop = max(k for k, (c, _) in enumerate(pool) if c == richest)
    pool.pop(drop)
  shard_labels = np.array([c for c, _ in pool])
  best, best_dupes = None, None
  for _ in range(50):
    assign = rng.permutation(num_shards).reshape(num_clients, s)
    dupes = sum(len(set(shard_labels[row])) < s for row in assign)
    if best is None or dupes < best_dupes:
      best, best_dupes = assign, dupes
    if dupes == 0:
      break
  return [np.sort(np.concatenate([pool[k][1] for k in row])) for row in best]


def dirichlet(labels, num_clients, rng, alpha, min_size=1):
  """Per-class Dirichlet allocation (Hsu et al. 2019 / Yurochkin et al.): for each class c,
  the class's examples are split across clients in proportions ~ Dir(alpha * 1_N).

  Redraws (up to 100 times) until every client has at least `min_size` examples.
  """
  if alpha <= 0:
    raise UserError(f'--dirichlet_alpha={alpha} must be > 0')
  num_classes = int(labels.max()) + 1
  for _ in range(100):
    parts = [[] for _ in range(num_clients)]
    for c in range(num_classes):
      idx = rng.permutation(np.flatnonzero(labels == c))
      props = rng.dirichlet(np.full(num_clients, alpha))
      cuts = (np.cumsum(props)[:-1] * len(idx)).astype(int)
      for i, chunk in enumerate(np.split(idx, cuts)):
        parts[i].append(chunk)
    parts = [np.sort(np.concatenate(p)) for p in parts]
    if min(len(p) for p in parts) >= min_size:
      return parts
  raise UserError(f'--partition=dirichlet with --dirichlet_alpha={alpha} left a client with '
                  f'fewer than {min_size} examples in 100 draws; raise alpha or lower '
                  '--num_clients')


def dirichlet_client(labels, num_clients, rng, alpha):
  """Per-client class mixtures (Hsu et al. 2019): client i draws q_i ~ Dir(alpha * 1_C) and
  takes an equal share (len / num_clients examples) with labels drawn from q_i, without
  replacement. A class that runs out is removed and the client's mixture renormalised.
  """
  if alpha <= 0:
    raise UserError(f'--dirichlet_alpha={alpha} must be > 0')
  num_classes = int(labels.max()) + 1
  pools = [list(rng.permutation(np.flatnonzero(labels == c))) for c in range(num_classes)]
  size = len(labels) // num_clients
  if size == 0:
    raise UserError(f'--num_clients={num_clients} exceeds the {len(labels)} examples')
  parts = []
  for _ in range(num_clients):
    q = rng.dirichlet(np.full(num_classes, alpha))
    take = []
    for _ in range(size):
      avail = np.array([len(p) > 0 for p in pools])
      w = q * avail
      if w.sum() <= 0:  # the mixture's classes are exhausted: fall back to what remains
        w = avail.astype(float)
      c = rng.choice(num_classes, p=w / w.sum())
      take.append(pools[c].pop())
    parts.append(np.sort(np.asarray(take, np.int64)))
  return parts


def quantity(labels, num_clients, rng, alpha):
  """Quantity skew: client sizes ~ Dir(alpha), labels IID; every client gets >= 1 example."""
  if alpha <= 0:
    raise UserError(f'--dirichlet_alpha={alpha} must be > 0')
  n = len(labels)
  if n < num_clients:
    raise UserError(f'--num_clients={num_clients} exceeds the {n} training examples')
  props = rng.dirichlet(np.full(num_clients, alpha))
  sizes = 1 + np.floor(props * (n - num_clients)).astype(int)
  sizes[np.argmax(props)] += n - sizes.sum()
  perm = rng.permutation(n)
  return [np.sort(p) for p in np.split(perm, np.cumsum(sizes)[:-1])]


# FedDF's dealer works on groups of this many clients (its `n_auxi_workers`).
_FEDDF_GROUP = 10


def feddf(labels, num_clients, rng, alpha, max_redraws=1000):
  """FedDF's Dirichlet partitioner (Lin et al. 2020, "Ensemble Distillation for Robust Model
  Fusion in Federated Learning"), as the FedDF and FedGKD authors' code draws it
  (epfml/federated-learning-public-code codes/FedDF-code and CGCL-codes/FedGKD,
  pcode/datasets/partition_data.py: `build_non_iid_by_dirichlet` and
  `DataPartitioner.partition_indices`).

  Steps, in the code's order and with its random draws (`rng.shuffle`, `rng.dirichlet`):
  1. shuffle the (index, label) rows of the split;
  2. cut them into ceil(N/10) consecutive groups of int(10/N * n) rows (the last takes the
     rest), one group per 10 clients (the last group's clients: the remainder);
  3. in each group of G clients and m rows, deal each class c = 0..C-1 in turn: draw
     p ~ Dir(alpha * 1_G), zero p_j for clients already holding >= m/G rows (the balancing
     rule), renormalise, and split the class's rows at int(cumsum(p) * n_c); redraw the whole
     group until every client holds >= int(0.5 * m / G) rows (the minimum size);
  4. concatenate the clients' rows in client order and cut the result into consecutive
     chunks of int(1/N * n) examples, one per client (the last n mod N examples are dropped).
  So every client gets exactly int(n/N) examples and a window of its group's label mix, where
  `dirichlet` draws per-client sizes.

  Args:
    labels: int label per example, classes 0..max(labels).
    num_clients: N; with fewer than 10 clients the one group has N clients (the code asserts
      N >= 10: from 10 on the draws are the code's).
    rng: a numpy RandomState (the authors' `conf.random_state`, RandomState(seed)) or
      Generator; only its shuffle and dirichlet methods are used.
    alpha: the Dirichlet concentration (--dirichlet_alpha, the code's --non_iid_alpha).
    max_redraws: a group that misses the minimum size this many times raises UserError (the
      code loops forever); draws before that are the code's.
  Returns: per-client sorted arrays of indices into `labels`.
  """
  if alpha <= 0:
    raise UserError(f'--dirichlet_alpha={alpha} must be > 0')
  labels = np.asarray(labels)
  n, num_classes = len(labels), int(labels.max()) + 1
  rows = np.stack([np.arange(n), labels], axis=1)
  rng.shuffle(rows)
  group = min(_FEDDF_GROUP, num_clients)
  num_groups = -(-num_clients // group)
  step = int(group / num_clients * n)  # the code's float expression, truncated
  dealt, remaining = [], num_clients
  for g in range(num_groups):
    block = rows[g * step:(n if g == num_groups - 1 else (g + 1) * step)]
    size, workers = len(block), min(group, remaining)
    remaining -= group
    if int(0.50 * size / workers) < 1:  # the code would deal nothing (its loop never runs)
      raise UserError(f'--partition=feddf: {n} examples are too few for --num_clients='
                      f'{num_clients} (a group needs 2 examples per client)')
    for _ in range(max_redraws):
      batch = [[] for _ in range(workers)]
      for c in range(num_classes):
        idx = block[block[:, 1] == c, 0]
        props = rng.dirichlet(np.repeat(alpha, workers))
        props = np.array([p * (len(b) < size / workers) for p, b in zip(props, batch)])
        cuts = (np.cumsum(props / props.sum()) * len(idx)).astype(int)[:-1]
        batch = [b + part.tolist() for b, part in zip(batch, np.split(idx, cuts))]
      if min(len(b) for b in batch) >= int(0.50 * size / workers):
        break
    else:
      raise UserError(f'--partition=feddf with --dirichlet_alpha={alpha}: a group of {workers} '
                      f'clients missed the minimum size in {max_redraws} draws; raise alpha')
    dealt += batch
  flat = np.asarray(sum(dealt, []), np.int64)
  share = int(1.0 / num_clients * n)
  return [np.sort(flat[i * share:(i + 1) * share]) for i in range(num_clients)]


def natural(ids, num_clients, rng, column='COLUMN'):
  """--partition=natural:COLUMN: one client per distinct id (a writer, a user, a device).

  Args:
    ids: int id per training example (Dataset.groups[COLUMN]).
    num_clients: how many of the ids become clients: a seeded random subset (`rng`), kept
      in increasing id order; all of them when it equals their number.
    column: the column's name, for the error message.
  Returns: per-client arrays of indices into `ids`, each sorted.
  Vectorised: one stable argsort and np.unique, so 3,500 writers over 350k examples take a
  fraction of a second (docs/data.md, Partitions).
  """
  values, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
  if num_clients > len(values):
    raise UserError(f'--num_clients={num_clients} exceeds the {len(values)} clients of '
                    f'--partition=natural:{column} (one per distinct {column} id)')
  order = np.argsort(inverse, kind='stable')  # examples grouped by id, in index order
  groups = np.split(order, np.cumsum(counts)[:-1])
  chosen = np.sort(rng.choice(len(values), num_clients, replace=False))
  return [groups[i] for i in chosen]


def natural_column(partition, columns, dataset):
  """The group column --partition=natural:COLUMN names, or for a bare --partition=natural the
  dataset's one column (FEMNIST's writer, Shakespeare's role); None for any other partition.

  columns: the dataset's group columns (Dataset.groups' keys); dataset: the --dataset value,
  for the error when a bare natural cannot choose (none, or several columns)."""
  if partition.startswith('natural:'):
    return partition[len('natural:'):]
  if partition != 'natural':
    return None
  if len(columns) != 1:
    raise UserError(f'--partition=natural: --dataset={dataset} has '
                    + (f'group columns {", ".join(sorted(columns))}; name one, e.g. '
                       f'--partition=natural:{sorted(columns)[0]}' if columns else
                       'no group column (its examples carry no client ids)'))
  return next(iter(columns))


def from_file(path, num_examples):
  """A JSON list of per-client lists of training-example indices."""
  raw = read_json_input(path, f'--partition=file:{path}', 'a JSON list of index lists')
  if not isinstance(raw, list) or not all(isinstance(p, list) for p in raw):
    raise UserError(f'--partition=file:{path}: expected a JSON list of index lists')
  parts = []
  for i, p in enumerate(raw):
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in p):
      raise UserError(f'--partition=file:{path}: client {i} has non-integer indices')
    outside = [v for v in p if not 0 <= v < num_examples]
    if outside:  # checked before the int64 conversion, which a huge number would overflow
      shown = str(outside[0]) if len(str(outside[0])) <= 24 else f'{str(outside[0])[:20]}...'
      raise UserError(f'--partition=file:{path}: client {i} has index {shown}; indices must '
                      f'lie in [0, {num_examples})')
    parts.append(np.asarray(p, np.int64))
  flat = np.concatenate(parts) if parts else np.zeros(0, np.int64)
  if len(flat) and (flat.min() < 0 or flat.max() >= num_examples):
    raise UserError(f'--partition=file:{path}: indices must lie in [0, {num_examples})')
  if len(np.unique(flat)) != len(flat):
    raise UserError(f'--partition=file:{path}: an example is assigned more than once')
  return parts


def partition(name, labels, num_clients, seed, classes_per_client=2, dirichlet_alpha=0.5):
  """The parts of `labels` (indices into them) that label partition `name` (a registered
  entry whose info has a `split`) deals to num_clients clients, seeded; no client empty."""
  rng = np.random.default_rng(seed)
  if num_clients < 1:
    raise UserError(f'--num_clients={num_clients} must be >= 1')
  if num_clients > len(labels):
    raise UserError(f'--num_clients={num_clients} exceeds the {len(labels)} training examples')
  entry = registry.get('partition', name)
  if entry.info is None or entry.info.split is None:
    raise UserError(f'--partition={name} does not split by labels')
  values = {'classes_per_client': classes_per_client, 'dirichlet_alpha': dirichlet_alpha}
  return _nonempty(name, entry.info.split(labels, num_clients, rng,
                                          *[values[f] for f in entry.reads]))


def _nonempty(name, parts):
  """parts, or a UserError naming the clients --partition=name leaves empty."""
  empty = [i for i, p in enumerate(parts) if len(p) == 0]
  if empty:
    raise UserError(f'--partition={name} leaves client(s) {empty[:5]} empty')
  return parts


def client_parts(config, dataset, keep):
  """(train parts, test parts or None) of --partition=config.partition, built through its
  registry entry: config (a Config; its seed the run's), the loaded dataset, and keep, the
  sorted training examples clients may hold. Train parts index the whole training set."""
  return registry.build('partition', config.partition, config, dataset=dataset, keep=keep)


def check_dataset(config, dataset):
  """UserError naming --partition when the loaded dataset lacks what it reads (its info's
  `check`: domain ids, a group column); nothing for the partitions that read labels only."""
  entry = registry.get('partition', config.partition)
  if entry.info is not None and entry.info.check is not None:
    entry.info.check(registry.Values(entry, config), dataset)


def splits_test(name) -> bool:
  """Whether --partition=name gives every client a test split of its own (False for a name
  no entry matches: the flag checks refuse it)."""
  entry = registry.find('partition', name)
  return entry is not None and entry.info is not None and entry.info.splits_test


def is_fixed(name) -> bool:
  """Whether --partition=name's parts are fixed indices into the whole training set."""
  info = registry.get('partition', name).info
  return info is not None and info.fixed


def partition_like(train_parts, train_labels, test_labels, seed, num_classes):
  """Splits the test set so each client's test labels follow its training label mix.

  Test examples of class c are dealt to clients in proportion to how many training examples
  of class c each holds (a client without class c gets none). Used for per-client evaluation.
  """
  rng = np.random.default_rng(seed + 7919)
  hist = np.stack([np.bincount(train_labels[p], minlength=num_classes) for p in train_parts])
  parts = [[] for _ in train_parts]
  for c in range(num_classes):
    idx = rng.permutation(np.flatnonzero(test_labels == c))
    total = hist[:, c].sum()
    if total == 0 or len(idx) == 0:
      continue
    cuts = np.round(np.cumsum(hist[:, c])[:-1] / total * len(idx)).astype(int)
    for i, chunk in enumerate(np.split(idx, cuts)):
      parts[i].append(chunk)
  return [np.sort(np.concatenate(p)) if p else np.zeros(0, np.int64) for p in parts]


# A validation split (--val_fraction) has its own random stream, apart from the partition's,
# so it is the same for every method run with the same seed (methods stay paired).
_VAL_STREAM = 15485863


def holdout_count(n, fraction):
  """How many of n examples a validation share takes: round(fraction * n), keeping at least
  one example for training (0 when fraction is 0 or n <= 1)."""
  return int(min(round(fraction * n), max(n - 1, 0))) if fraction > 0 else 0


def client_holdout(parts, fraction, seed):
  """--val_source=clients: each client keeps holdout_count(n_i) of its examples apart.

  Args: parts, per-client index arrays (into the training set); fraction; the run seed.
  Returns (train parts, validation parts): both lists of sorted index arrays, one per client,
  disjoint, their union each client's part. Client i's draw uses its own fold of the seed, so
  it depends only on the seed and that client's examples.
  """
  train, val = [], []
  for i, part in enumerate(parts):
    part = np.asarray(part, np.int64)
    rng = np.random.default_rng([seed, _VAL_STREAM, i])
    held = rng.permutation(len(part))[:holdout_count(len(part), fraction)]
    mask = np.zeros(len(part), bool)
    mask[held] = True
    train.append(part[~mask])
    val.append(part[mask])
  return train, val


def server_holdout(keep, fraction, seed, order='random', labels=None):
  """--val_source=server: a slice of the pooled training examples `keep`, held out before
  partitioning, that holds every class of `keep` and leaves every class some training
  examples.

  order='tail' (--val_order=tail), a stratified tail: of each class's examples in `keep`,
  the last holdout_count(n_c) in file order, and at least one of a class with two or more
  (`stratified_tail`). FedGKD's code (CGCL-codes/FedGKD pcode/create_dataset.py,
  `define_val_dataset`: a DataPartitioner of type 'origin') cuts the unshuffled training set
  into its first 90% for the clients and its last 10% for validation, the last 10% of the
  whole file (for Tiny-ImageNet it shuffles first: type 'random', a seeded random 10%); on a
  class-ordered file (the Tiny-ImageNet zip, CIFAR-10's JPEG folders) that is whole classes,
  so this takes the last share of each class instead. On a randomly ordered file (CIFAR-10's
  pickled tarball, which the code reads through torchvision) the two differ only by the
  spread of the code's per-class counts: as many examples (when the shares round alike) and
  97-99% of them in common on shuffles of CIFAR-10's 50,000 labels (tests/test_splits.py).
  order='random': a seeded draw of holdout_count(len(keep)) examples (at least one), refused
  in one line naming --val_order when it misses a class or takes all of one (`check_covers`).

  labels: the label of every training example (indexed by `keep`'s values); needed by both
  orders (the draw is checked, the tail is stratified by it).
  Returns (validation indices, the rest), both sorted."""
  keep = np.asarray(keep, np.int64)
  if order == 'tail':
    val = stratified_tail(keep, np.asarray(labels)[keep], fraction)
    return val, np.setdiff1d(keep, val)
  size = max(holdout_count(len(keep), fraction), 1)
  rng = np.random.default_rng([seed, _VAL_STREAM])
  perm = rng.permutation(len(keep))
  val, rest = np.sort(keep[perm[:size]]), np.sort(keep[perm[size:]])
  if labels is not None:
    check_covers(labels, keep, val, rest, f'--val_source=server --val_order={order} '
                 f'--val_fraction={fraction:g}: the seeded draw',
                 'use --val_order=tail (the last share of each class)')
  return val, rest


def stratified_tail(keep, labels, fraction):
  """The last share of each class in file order: of the examples `keep` (sorted by their
  place in the file) of each label c, the last max(holdout_count(n_c, fraction), 1) when
  n_c >= 2. A class with one example cannot be in both training and validation: UserError
  naming --val_order. Returns the held-out indices (values of `keep`), sorted."""
  keep, labels = np.asarray(keep, np.int64), np.asarray(labels)
  order = np.argsort(keep, kind='stable')
  keep, labels = keep[order], labels[order]
  classes, counts = np.unique(labels, return_counts=True)
  single = classes[counts < 2]
  if len(single):
    raise UserError(f'--val_order=tail --val_fraction={fraction:g}: class(es) '
                    f'{_listed(single)} have a single training example, which cannot be both '
                    'trained on and held out; use --val_source=clients or a dataset with '
                    'more examples of each class')
  held = []
  for c, n_c in zip(classes, counts):
    mine = keep[labels == c]
    held.append(mine[n_c - max(holdout_count(n_c, fraction), 1):])
  return np.sort(np.concatenate(held)) if held else np.zeros(0, np.int64)


def _listed(values, limit=8):
  """'3, 7, 9' (the first `limit`, then '... (N in all)')."""
  values = [int(v) for v in values]
  shown = ', '.join(map(str, values[:limit]))
  return shown + (f', ... ({len(values)} in all)' if len(values) > limit else '')


def check_covers(labels, pool, val, train, what, remedy):
  """UserError unless the validation indices `val` hold every class of `pool` (the examples
  they were carved from) and the training indices `train` keep every class of it too.
  what: the hold-out, as the message's subject (naming its flags); remedy: what to do."""
  labels = np.asarray(labels)
  have = np.unique(labels[np.asarray(pool, np.int64)])
  unseen = np.setdiff1d(have, labels[np.asarray(val, np.int64)])
  if len(unseen):
    raise UserError(f'{what} holds out no example of class(es) {_listed(unseen)} of the '
                    f'training set, so validation would never score them; {remedy}')
  untrained = np.setdiff1d(have, labels[np.asarray(train, np.int64)])
  if len(untrained):
    raise UserError(f'{what} holds out every training example of class(es) '
                    f'{_listed(untrained)}, so no client would train on them; {remedy}')


# --- Registration -----------------------------------------------------------------------------
def _label_partition(name, summary, split, reads=()):
  """Registers label partition `name`: split(labels, num_clients, rng, *values of reads) is its
  info's, and its build deals the labels of `keep` (the examples clients may hold)."""

  def build(v, dataset, keep):
    parts = partition(name, dataset.y_train[keep], v.num_clients, v.seed,
                      **{f: getattr(v, f) for f in reads})
    return [keep[p] for p in parts], None

  registry.register('partition', name, summary, reads=reads, build=build,
                    info=PartitionInfo(split=split))


def _domains(v, dataset, keep):
  """--partition=domains: each domain's examples (of keep) to its own clients, which are
  tested on their share of their own domain's test examples."""
  parts, test_parts, _ = domains.domain_partition(dataset.domains_train[keep],
                                                  dataset.domains_test, v.num_clients,
                                                  np.random.default_rng(v.seed))
  return [keep[p] for p in parts], test_parts


def _has_domains(v, dataset):
  if dataset.domains_train is None:
    raise UserError(f'--partition=domains needs a dataset with domain ids; --dataset='
                    f'{v.dataset} has none (multi-domain: digits5, domainnet, '
                    'digits_domains, or an npz with d_train and d_test)')


def _file(v, dataset, keep):
  """--partition=file:PATH: the file's parts, as given (keep does not apply)."""
  del keep
  return _nonempty(v.partition, from_file(v.partition[len('file:'):],
                                          len(dataset.y_train))), None


def _natural(v, dataset, keep):
  """--partition=natural[:COLUMN]: one client per id of the group column (of keep)."""
  column = natural_column(v.partition, list(dataset.groups or {}), v.dataset)
  parts = natural(dataset.groups[column][keep], v.num_clients, np.random.default_rng(v.seed),
                  column)
  return [keep[p] for p in parts], None


def _has_column(v, dataset):
  have = sorted(dataset.groups or {})
  column = natural_column(v.partition, have, v.dataset)
  if column not in have:
    raise UserError(f'--partition=natural:{column}: --dataset={v.dataset} has no group '
                    f'column {column!r}; '
                    + (f'it has {", ".join(have)}' if have else
                       'it has none (an npz gives them as <column>_train arrays)'))


_label_partition('iid', 'uniformly at random', iid)
_label_partition('shards', 'sort-and-partition: --classes_per_client single-label shards per '
                 'client', shards, reads=('classes_per_client',))
_label_partition('dirichlet', 'per-class Dirichlet(--dirichlet_alpha) allocation', dirichlet,
                 reads=('dirichlet_alpha',))
_label_partition('dirichlet_client', 'a Dirichlet class mixture per client (Hsu et al.)',
                 dirichlet_client, reads=('dirichlet_alpha',))
_label_partition('quantity', 'Dirichlet client sizes, IID labels', quantity,
                 reads=('dirichlet_alpha',))
_label_partition('feddf', 'FedDF\'s Dirichlet(--dirichlet_alpha) dealer (Lin et al. 2020; '
                 'FedGKD\'s code): groups of 10 clients, equal sizes', feddf,
                 reads=('dirichlet_alpha',))
registry.register('partition', 'domains', 'each domain\'s examples to its own clients (any '
                  'dataset with domain ids: digits5, domainnet, digits_domains, npz with '
                  'd_train/d_test); N >= domains', build=_domains,
                  info=PartitionInfo(check=_has_domains, splits_test=True))
registry.register('partition', 'file:', 'file:PATH, a JSON list of per-client index lists',
                  build=_file, prefix=True, info=PartitionInfo(fixed=True))
registry.register('partition', 'natural', 'one client per id of the dataset\'s own group '
                  'column (femnist: writer, shakespeare: role); --num_clients picks a seeded '
                  'subset', build=_natural, info=PartitionInfo(check=_has_column))
registry.register('partition', 'natural:', 'natural:COLUMN, one client per id of the '
                  'dataset\'s group column (e.g. writer); --num_clients picks a seeded subset',
                  build=_natural, prefix=True, info=PartitionInfo(check=_has_column))

"""Small datasets for the cross-checks, written as one npz that --dataset=npz:PATH reads.

  python benchmarks/crosscheck/small_data.py cifar10 OUT.npz --tarball=cifar10-jpeg.tar.gz
  python benchmarks/crosscheck/small_data.py embedded OUT.npz

cifar10: the first --train_per_class (20) and --test_per_class (10) images of every class, by
file name, from the tarball --dataset=cifar10 reads (train/<class>/NNNN.jpg, labels in the
canonical order), streamed so that only those images are decoded. embedded: the first images of
every class, in index order, of the Fashion-MNIST subset shipped in the package (28x28x1).
Every client of a cross-check trains on its whole share in one batch, so small is what keeps
both codes to seconds on a CPU.
"""
import argparse
import bisect
import os
import sys
import tarfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)  # this clone's fedjax_drift, installed or not

# pylint: disable=wrong-import-position
from fedjax_drift.data import formats
from fedjax_drift.data.local import EMBEDDED_PATH


def first_per_class(labels, per_class):
  """Indices of the first `per_class` examples of every label, in index order."""
  keep = np.concatenate([np.flatnonzero(labels == c)[:per_class] for c in np.unique(labels)])
  return np.sort(keep)


def cifar10_subset(tarball, train_per_class, test_per_class):
  """(x_train, y_train, x_test, y_test) of the first images per class, by name, from the
  tarball: a pass over it keeps, per split and class, the smallest names seen so far."""
  quota = {'train': train_per_class, 'test': test_per_class}
  kept = {}  # (split, class) -> sorted [(name, bytes)]
  with tarfile.open(tarball, 'r:gz') as tar:
    for member in tar:
      parts = member.name.strip('./').split('/')
      if not member.isfile() or len(parts) < 3 or parts[-3] not in quota:
        continue
      if not parts[-1].endswith('.jpg') or parts[-2] not in formats.CIFAR10_CLASSES:
        continue
      items = kept.setdefault((parts[-3], parts[-2]), [])
      if len(items) < quota[parts[-3]] or member.name < items[-1][0]:
        bisect.insort(items, (member.name, tar.extractfile(member).read()))
        del items[quota[parts[-3]]:]
  return formats.cifar10_from_jpegs((item for items in kept.values() for item in items),
                                    tarball)


def embedded_subset(train_per_class, test_per_class):
  """(x_train, y_train, x_test, y_test): the first images per class of the embedded subset."""
  with np.load(EMBEDDED_PATH) as f:
    x_train, y_train, x_test, y_test = (f[k] for k in ('x_train', 'y_train', 'x_test', 'y_test'))
  train = first_per_class(y_train, train_per_class)
  test = first_per_class(y_test, test_per_class)
  return x_train[train], y_train[train], x_test[test], y_test[test]


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('source', choices=('cifar10', 'embedded'))
  parser.add_argument('out')
  parser.add_argument('--tarball', default='', help='cifar10: cifar10-jpeg.tar.gz')
  parser.add_argument('--train_per_class', type=int, default=20)
  parser.add_argument('--test_per_class', type=int, default=10)
  args = parser.parse_args(argv)
  if args.source == 'cifar10':
    if not args.tarball:
      parser.error('cifar10 needs --tarball')
    arrays = cifar10_subset(args.tarball, args.train_per_class, args.test_per_class)
  else:
    arrays = embedded_subset(args.train_per_class, args.test_per_class)
  names = ('x_train', 'y_train', 'x_test', 'y_test')
  np.savez(args.out, **dict(zip(names, arrays)))
  print(f'wrote {args.out}: ' + ', '.join(f'{n} {a.shape}' for n, a in zip(names, arrays)))
  return 0


if __name__ == '__main__':
  sys.exit(main())

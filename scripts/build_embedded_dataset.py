"""Builds fedjax_drift/data/fashion_mnist_small.npz from the offline Fashion-MNIST copy.

A balanced, seeded subset (per-class counts fixed below) of Fashion-MNIST (Zalando SE, MIT
licence), stored as uint8 so the package can run real experiments with no network and no data
folder. Run from the project root:

    python scripts/build_embedded_dataset.py --source=DIR  # DIR: Fashion-MNIST IDX .gz files
"""
import argparse
import hashlib
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fedjax_drift.data.sources import read_idx_dir  # noqa: E402

TRAIN_PER_CLASS = 600
TEST_PER_CLASS = 100
SEED = 0


def balanced_subset(x, y, per_class, rng):
  keep = np.concatenate([
      rng.choice(np.flatnonzero(y == c), per_class, replace=False) for c in range(10)])
  keep.sort()  # keep the original order, so the file does not depend on class grouping
  return x[keep], y[keep], keep


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--source', required=True,
                      help='directory of the four Fashion-MNIST IDX .gz files')
  parser.add_argument('--out', default='fedjax_drift/data/fashion_mnist_small.npz')
  args = parser.parse_args()
  x_train, y_train, x_test, y_test = read_idx_dir(args.source)
  rng = np.random.default_rng(SEED)
  xtr, ytr, itr = balanced_subset(x_train, y_train, TRAIN_PER_CLASS, rng)
  xte, yte, ite = balanced_subset(x_test, y_test, TEST_PER_CLASS, rng)
  np.savez_compressed(args.out, x_train=xtr, y_train=ytr, x_test=xte, y_test=yte,
                      train_index=itr.astype(np.int32), test_index=ite.astype(np.int32))
  sha = hashlib.sha256(open(args.out, 'rb').read()).hexdigest()
  provenance = {
      'dataset': 'Fashion-MNIST (Xiao, Rasul & Vollgraf, 2017), Zalando SE, MIT (Expat) licence',
      'source': 'Debian package dataset-fashion-mnist (gzipped IDX files)',
      'subset': f'{TRAIN_PER_CLASS} train and {TEST_PER_CLASS} test images per class, '
                f'drawn with numpy default_rng({SEED}); train_index/test_index give the '
                'positions in the original train/test files',
      'built_by': 'scripts/build_embedded_dataset.py',
      'sha256': sha,
  }
  with open(os.path.splitext(args.out)[0] + '.json', 'w') as f:
    json.dump(provenance, f, indent=2)
  print(f'wrote {args.out}: {os.path.getsize(args.out) / 1e6:.2f} MB, sha256 {sha[:12]}')


if __name__ == '__main__':
  main()

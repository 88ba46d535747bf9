"""`fedjax-drift-data`: import downloaded dataset files once, so `--dataset=NAME` finds them.

    fedjax-drift-data import DIR [--dataset=NAME]   # or: python -m fedjax_drift.data.prepare
    fedjax-drift-data list

`import` looks through DIR (and its subfolders) for the files these datasets are distributed
as, checks them, and writes each as CACHE/datasets/NAME.npz (CACHE is $FEDJAX_DRIFT_CACHE, by
default ~/.cache/fedjax_drift):
  mnist, fashion_mnist  the four IDX .gz files (train-images-idx3-ubyte.gz, ...); a folder
                        whose path contains "fashion" is Fashion-MNIST, any other MNIST
  cifar10               cifar-10-python.tar.gz (or cifar-10-batches-py/), cifar10-jpeg.tar.gz,
                        or a folder of {train,test}/<class>/*.jpg
  usps                  usps.bz2 + usps.t.bz2 (LIBSVM), usps.h5, or usps.npz
--dataset=NAME names what a single DIR holds, when the folder name does not tell.
Bad files end with one line naming the file, and exit code 2.
"""
import argparse
import os
import sys

import numpy as np

from fedjax_drift.data import formats, sources
from fedjax_drift.errors import UserError


def _idx_name(dirpath):
  return 'fashion_mnist' if 'fashion' in dirpath.lower() else 'mnist'


def _found_in(dirpath, files, subdirs):
  """[(dataset, reader)] for the dataset files in one folder."""
  found = []
  if all(name in files for name in sources.IDX_FILES):
    found.append((_idx_name(dirpath), lambda: sources.read_idx_dir(dirpath)))
  if 'cifar-10-python.tar.gz' in files:
    path = os.path.join(dirpath, 'cifar-10-python.tar.gz')
    found.append(('cifar10', lambda: formats.read_cifar10_python(path)))
  elif 'test_batch' in files and 'data_batch_1' in files:
    found.append(('cifar10', lambda: formats.read_cifar10_python(dirpath)))
  elif 'cifar10-jpeg.tar.gz' in files:
    found.append(('cifar10', lambda: sources.load_cifar10_jpeg(dirpath)))
  elif 'train' in subdirs and 'test' in subdirs and os.path.isdir(
      os.path.join(dirpath, 'train', formats.CIFAR10_CLASSES[0])):
    found.append(('cifar10', lambda: formats.read_cifar10_jpeg_dir(dirpath)))
  if {'usps.bz2', 'usps.t.bz2'} <= set(files) or {'usps.h5', 'usps.npz'} & set(files):
    found.append(('usps', lambda: sources.load_usps(dirpath)))
  return found


def find(root):
  """[(dataset, reader)] for every dataset found under `root`, in walk order."""
  if not os.path.isdir(root):
    raise UserError(f'{root} is not a directory')
  found = []
  for dirpath, subdirs, files in os.walk(root):
    subdirs.sort()
    found += _found_in(dirpath, set(files), set(subdirs))
  return found


def save(name, arrays):
  """Validates the arrays and writes them to sources.imported_path(name); returns the Dataset."""
  ds = sources.validate(name, *arrays)
  path = sources.imported_path(name)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  tmp = f'{path}.tmp{os.getpid()}.npz'
  np.savez(tmp, x_train=ds.x_train, y_train=ds.y_train, x_test=ds.x_test, y_test=ds.y_test)
  os.replace(tmp, path)
  return ds


def import_dir(root, dataset=''):
  """Imports every dataset found under `root` (all as `dataset`, if given); returns their names."""
  if dataset and dataset not in sources.IMPORTABLE:
    raise UserError(f'--dataset={dataset} cannot be imported; use one of '
                    f'{", ".join(sources.IMPORTABLE)}')
  found = find(root)
  if not found:
    raise UserError(f'found no dataset files under {root} (see `fedjax-drift-data --help`)')
  names = []
  for name, reader in found:
    name = dataset or name
    ds = save(name, reader())
    print(f'{name}: {len(ds.y_train)} train / {len(ds.y_test)} test, '
          f'{"x".join(map(str, ds.x_train.shape[1:]))} {ds.x_train.dtype} -> '
          f'{sources.imported_path(name)}')
    names.append(name)
  return names


def list_imported():
  for name in sources.IMPORTABLE:
    path = sources.imported_path(name)
    print(f'{name:14s} {path if os.path.exists(path) else "not imported"}')


def main(argv=None):
  parser = argparse.ArgumentParser(prog='fedjax-drift-data', description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  commands = parser.add_subparsers(dest='command', required=True)
  imp = commands.add_parser('import', help='import the dataset files found under DIR')
  imp.add_argument('dir', metavar='DIR')
  imp.add_argument('--dataset', default='', help='what DIR holds: ' +
                   ', '.join(sources.IMPORTABLE))
  commands.add_parser('list', help='show which datasets are imported, and where')
  args = parser.parse_args(argv)
  try:
    if args.command == 'import':
      import_dir(args.dir, args.dataset)
    else:
      list_imported()
  except UserError as e:
    sys.stderr.write(f'error: {e}\n')
    return 2
  return 0


if __name__ == '__main__':
  sys.exit(main())

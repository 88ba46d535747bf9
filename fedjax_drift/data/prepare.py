"""`fedjax-drift-data`: import downloaded dataset files once, so `--dataset=NAME` finds them.

    fedjax-drift-data import DIR [--dataset=NAME]   # or: python -m fedjax_drift.data.prepare
    fedjax-drift-data list

`import` looks through DIR (and its subfolders) for the files these datasets are distributed
as, checks them, and writes each as CACHE/datasets/NAME.npz (CACHE is $FEDJAX_DRIFT_CACHE, by
default ~/.cache/fedjax_drift):
  mnist, fashion_mnist  the four IDX .gz files (train-images-idx3-ubyte.gz, ...); the
                        official files are recognised by their checksums, other copies by
                        the folder: a path that contains "fashion" is Fashion-MNIST
  cifar10               cifar-10-python.tar.gz (or cifar-10-batches-py/), cifar10-jpeg.tar.gz,
                        or a folder of {train,test}/<class>/*.jpg
  usps                  usps.bz2 + usps.t.bz2 (LIBSVM), usps.h5, or usps.npz
  digits5               FedBN's digit archive: MNIST/, SVHN/, USPS/, SynthDigits/, MNIST_M/,
                        each with partitions/train_part{0..9}.pkl and test.pkl
  domainnet             FedBN's DomainNet/{site}_{train,test}.pkl + the six DomainNet
                        domains (DomainNet/{site}/ or DomainNet/{site}.zip), resized to
                        --image_size (default 64; FedBN uses 256)
  cifar100              cifar-100-python.tar.gz (or cifar-100-python/); fine and coarse labels
  tiny_imagenet         tiny-imagenet-200.zip (or tiny-imagenet-200/); val/ is the test split
  emnist_SPLIT          NIST's gzip.zip (or its emnist-SPLIT-*-ubyte.gz files): the byclass
                        split, or the one --dataset=emnist_SPLIT names
  svhn                  train_32x32.mat + test_32x32.mat
  femnist, shakespeare  TFF's fed_emnist_{train,test}.h5 / shakespeare_{train,test}.h5, or a
                        LEAF data folder (train/ and test/ of .json, told apart by their x);
                        each example keeps its client (group column writer / role)
  ag_news               ag_news_csv.tgz (or ag_news_csv/ with train.csv, test.csv)
  sst5                  trainDevTestTrees_PTB.zip (or trees/ with train.txt, dev.txt,
                        test.txt); text datasets are stored as texts and tokenised when a
                        run loads them (--tokenizer, --max_seq_len)
--dataset=NAME names what a single DIR holds, when the folder name does not tell.
Bad files, unreadable files and a full disk end with one line naming the file, and exit
code 2. Ctrl-C (SIGTERM, SIGHUP) ends with one line and exit code 130 (143, 129); each cache
file is whole or absent, never half-written.
"""
import argparse
import os
import signal
import sys
import time

import numpy as np

from fedjax_drift import interrupts
from fedjax_drift.data import downloads, formats, local, multidomain, natural, sources, text
from fedjax_drift.errors import UserError


def _idx_name(dirpath):
  """The official files by their checksums, else a folder whose path says "fashion"."""
  return local.idx_identity(dirpath) or (
      'fashion_mnist' if 'fashion' in dirpath.lower() else 'mnist')


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
    # No decode cache: the import's own npz is the one copy kept.
    found.append(('cifar10', lambda: sources.load_cifar10_jpeg(dirpath, cache=False)))
  elif 'train' in subdirs and 'test' in subdirs and os.path.isdir(
      os.path.join(dirpath, 'train', formats.CIFAR10_CLASSES[0])):
    found.append(('cifar10', lambda: formats.read_cifar10_jpeg_dir(dirpath)))
  if {'usps.bz2', 'usps.t.bz2'} <= set(files) or {'usps.h5', 'usps.npz'} & set(files):
    found.append(('usps', lambda: sources.load_usps(dirpath)))
  return found


def find(root, image_size=0):
  """[(dataset, reader)] for every dataset found under `root`, in walk order; image_size
  (0 = each dataset's default) is for datasets resized on import."""
  if not os.path.isdir(root):
    raise UserError(f'{root} is not a directory')
  found = []
  for dirpath, subdirs, files in os.walk(root):
    subdirs.sort()
    found += _found_in(dirpath, set(files), set(subdirs))
    found += downloads.found_in(dirpath, set(files), set(subdirs))
    found += text.found_in(dirpath, set(files), set(subdirs))
    found += natural.found_in(dirpath, set(files), set(subdirs))
    if 'wnids.txt' in files:  # an extracted Tiny-ImageNet: do not walk its 120,000 images
      subdirs[:] = []
    # An archive's extracted copy beside it would be imported twice: the archive is enough.
    copies = downloads.extracted_copies(set(files)) | text.extracted_copies(set(files))
    subdirs[:] = [d for d in subdirs if d not in copies]
    domains = multidomain.found_in(dirpath, set(files), set(subdirs), image_size)
    if domains:  # do not walk DomainNet's image folders or the digit domains' own folders
      found, subdirs[:] = found + domains, [d for d in subdirs if d not in multidomain.FOLDERS]
  return found


def save(name, arrays):
  """Validates the arrays and writes them to sources.imported_path(name); returns the Dataset.

  arrays: (x_train, y_train, x_test, y_test), a Dataset, or a reader's dict of those four
  plus extra arrays, stored under their own names (CIFAR-100's y_train_coarse, ...)."""
  extras = {}
  if isinstance(arrays, dict):
    four = ('x_train', 'y_train', 'x_test', 'y_test')
    extras = {k: v for k, v in arrays.items() if k not in four}
    arrays = tuple(arrays[k] for k in four)
  ds = arrays._replace(name=name) if isinstance(arrays, sources.Dataset) else sources.validate(
      name, *arrays)
  sources.write_npz(sources.imported_path(name), x_train=ds.x_train, y_train=ds.y_train,
                    x_test=ds.x_test, y_test=ds.y_test, **_structure_arrays(ds), **extras)
  return ds


def _structure_arrays(ds):
  """A Dataset's domain ids, domain names and group columns as the cache npz stores them."""
  out = {f'{k}_train': v for k, v in (ds.groups or {}).items()}
  out.update({f'{k}_test': v for k, v in (ds.groups_test or {}).items()})
  if ds.domains_train is not None:
    out.update(d_train=ds.domains_train, d_test=ds.domains_test)
  if ds.domain_names:
    out['domain_names'] = np.asarray(ds.domain_names, str)
  return out


def import_dir(root, dataset='', image_size=0):
  """Imports every dataset found under `root` (all as `dataset`, if given); returns their names."""
  if dataset and dataset not in sources.importable():
    raise UserError(f'--dataset={dataset} cannot be imported; use one of '
                    f'{", ".join(sources.importable())}')
  found = find(root, image_size)
  if not found:
    raise UserError(f'found no dataset files under {root} (see `fedjax-drift-data --help`)')
  if dataset in text.IMPORTABLE and dataset not in [name for name, _ in found]:
    raise UserError(f'found no {dataset} files under {root} (see `fedjax-drift-data --help`)')
  if dataset in local.IDX_MD5:  # a renaming of official files to the other dataset
    for dirpath, _, files in os.walk(root):
      if all(name in files for name in sources.IDX_FILES):
        local.check_idx_identity(dirpath, dataset, '--dataset')
  if dataset:  # one split of a download that holds several (EMNIST), or a renaming
    found = [f for f in found if f[0] == dataset] or found
  else:
    found, skipped = downloads.default_imports(found)
    for name in skipped:
      print(f'{name}: found, not imported (import it with --dataset={name})')
  names = []
  for name, reader in found:
    name = dataset or name
    arrays = reader()
    _say_if_replacing(name)
    if isinstance(arrays, text.Texts):  # stored as texts, tokenised when loaded
      if name not in text.IMPORTABLE:
        raise UserError(f'--dataset={name}: {root} holds text files, not {name}\'s')
      text.save_imported(name, arrays)
      val = f' / {len(arrays.val)} validation' if arrays.val is not None else ''
      print(f'{name}: {len(arrays.train)} train / {len(arrays.test)} test{val} texts -> '
            f'{sources.imported_path(name)}')
      names.append(name)
      continue
    ds = save(name, arrays)
    print(f'{name}: {len(ds.y_train)} train / {len(ds.y_test)} test, '
          f'{"x".join(map(str, ds.x_train.shape[1:]))} {ds.x_train.dtype} -> '
          f'{sources.imported_path(name)}')
    names.append(name)
  return names


def _say_if_replacing(name):
  """Prints one line when `name` was imported before: which copy (its path and when it was
  written) this import replaces."""
  path = sources.imported_path(name)
  if os.path.exists(path):
    when = time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(os.path.getmtime(path)))
    print(f'{name}: replacing the earlier import {path} (written {when})')


def list_imported():
  width = max(map(len, sources.importable()))
  for name in sources.importable():
    path = sources.imported_path(name)
    print(f'{name:{width}s} {path if os.path.exists(path) else "not imported"}')


def sources_text() -> str:
  """The --help epilog: each dataset and where its files come from (sources.where_to_get)."""
  table = sources.where_to_get()
  width = max(map(len, table))
  return 'where to get the files:\n' + '\n'.join(
      f'  {name:{width}s}  {where}' for name, where in table.items())


def main(argv=None):
  parser = argparse.ArgumentParser(prog='fedjax-drift-data', description=__doc__,
                                   epilog=sources_text(),
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  commands = parser.add_subparsers(dest='command', required=True)
  imp = commands.add_parser('import', help='import the dataset files found under DIR')
  imp.add_argument('dir', metavar='DIR')
  imp.add_argument('--dataset', default='', help='what DIR holds: ' +
                   ', '.join(sources.importable()))
  imp.add_argument('--image_size', type=int, default=0, help='resize images to NxN on import '
                   '(domainnet: default 64, FedBN uses 256; digits5: default 28)')
  commands.add_parser('list', help='show which datasets are imported, and where')
  args = parser.parse_args(argv)
  with interrupts.guard():  # SIGINT, SIGTERM, SIGHUP: one line (interrupts.py)
    try:
      if args.command == 'import':
        import_dir(args.dir, args.dataset, args.image_size)
      else:
        list_imported()
    except UserError as e:
      sys.stderr.write(f'error: {e}\n')
      return 2
    except OSError as e:  # reading DIR (permission, a vanished file); writes are UserErrors
      sys.stderr.write(f'error: {e.filename or args.dir}: {e.strerror or e}\n')
      return 2
    except KeyboardInterrupt as e:  # every cache file is whole or absent (sources.write_npz)
      sys.stderr.write(f'error: {interrupts.what(getattr(e, "signum", signal.SIGINT))}; '
                       'datasets imported before it are kept, run the import again for the '
                       'rest\n')
      return interrupts.exit_code(e)
  return 0


if __name__ == '__main__':
  sys.exit(main())

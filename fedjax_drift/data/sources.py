"""Where examples come from: the dispatcher from a --dataset value to its loader.

Each dataset registers once, beside its loader (fedjax_drift/registry.py, kind 'dataset';
data/common.py's register_dataset): data/local.py (embedded, mnist, fashion_mnist, cifar10,
usps, npz:PATH), downloads.py (cifar100, tiny_imagenet, emnist, svhn), natural.py (femnist,
shakespeare), stackoverflow.py, text.py (ag_news, sst5, text:PATH), domains.py
(digits_domains), multidomain.py (digits5, domainnet) and hub.py (tfds:NAME, hf:NAME). This
module imports them all, so that they have registered before anything reads the registry, and
derives from their entries the tables below: the --list summaries (datasets()), the names
`fedjax-drift-data import` accepts (importable()), where their files come from
(where_to_get()), the Config fields the loaders take (load_options()), the loader (`load`)
and the files a run reads (`dataset_files`). The loaders import data/common.py, never this
module.
"""
import numpy as np  # noqa: F401 (tests patch sources.np.savez, numpy's own)

from fedjax_drift import registry
from fedjax_drift.data import (common, domains, downloads, hub, local, multidomain, natural,
                               stackoverflow, text)
# Re-exported: importers name these sources.X (the toolbox moved to data/common.py, the local
# file loaders to data/local.py).
from fedjax_drift.data.common import (  # noqa: F401
    Dataset, check_tokens, imported_path, load_imported, load_npz, npz_structure, validate,
    write_npz)
from fedjax_drift.data.common import cache_dir as _cache_dir  # noqa: F401
from fedjax_drift.data.formats import CIFAR10_CLASSES  # noqa: F401
from fedjax_drift.data.local import (EMBEDDED_PATH, IDX_FILES, load_cifar10,  # noqa: F401
                                     load_cifar10_jpeg, load_usps, read_idx_dir)
from fedjax_drift.errors import UserError, did_you_mean

# The loader modules in --list order (entries of one module keep their registration order).
LOADERS = (local, downloads, natural, stackoverflow, text, domains, multidomain, hub)


def _entries():
  """The dataset entries in LOADERS order, whichever module the process imported first."""
  order = {m.__name__: i for i, m in enumerate(LOADERS)}
  return sorted(registry.entries('dataset').values(),
                key=lambda e: order.get(e.info.load.__module__, len(LOADERS)))


def _options(entries):
  """The Config fields the loaders take: the entries' reads and shared fields, once each."""
  return tuple(dict.fromkeys(f for e in entries for f in e.info.shared + e.reads))


def datasets() -> dict:
  """--dataset values as --list shows them (npz:PATH for the prefix npz:), with one line each."""
  return {e.info.shown: e.summary for e in _entries() if e.info.shown}


def importable() -> tuple:
  """What `fedjax-drift-data import` writes and --dataset=NAME then reads without --data_dir."""
  return tuple(e.name for e in _entries() if e.info.importable)


def where_to_get() -> dict:
  """{--dataset value: where its files come from} (the `source` beside its registration), for
  `fedjax-drift-data --help`; datasets with no source (embedded, npz:PATH ...) left out."""
  return {e.info.shown: e.info.source for e in _entries() if e.info.shown and e.info.source}


def load_options() -> tuple:
  """Config fields that reach the loaders (load's keyword options)."""
  return _options(_entries())


def load(dataset, data_dir=None, **options):
  """Loads `dataset` (a name from the CLI's --dataset) into a validated `Dataset`.

  options: the load_options() flags (image_size, hf_* ...); each loader takes the ones it uses."""
  entry = registry.find('dataset', dataset)
  if entry is None:
    shown = datasets()
    raise UserError(f'--dataset={dataset} is unknown; use one of {", ".join(shown)}'
                    f'{did_you_mean(dataset, [d for d in shown if d.islower()])}')
  return entry.info.load(dataset, data_dir, **options)


def dataset_files(dataset, data_dir) -> list:
  """The files the loader of --dataset reads (whether or not they exist), for the run's input
  fingerprint; an unknown dataset: --data_dir when it names a file."""
  entry = registry.find('dataset', dataset)
  if entry is None:
    return common.usual_files(dataset, data_dir, importable=False)
  return entry.info.files(dataset, data_dir)

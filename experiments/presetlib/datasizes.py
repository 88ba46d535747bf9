"""How many training examples a preset's run reads: the one table of training-set sizes
(TRAIN_SETS, each with its source) and what a run's resolved values make of it.

A size is a constant only where it is the dataset's own (an official training split); the
share a run reads (FedBN's digit parts, the held-out validation fraction, the clients) comes
from the run's values (`train_sizes`). The cpu tier scales populations by these sizes
(tiers.TRAIN_SIZE) and estimates.py counts client examples with them.
"""
import math

from fedjax_drift.data import multidomain

# DomainNet's cleaned training lists (Peng et al. 2019, ai.bu.edu/M3SDA: {site}_train.txt,
# 345 classes): images per site, in FedBN's site order. FedBN's 10-class subset keeps 10 of the
# 345 classes; its split files (domainnet_dataset.zip) hold the exact counts, which no source
# at hand states, so the subset's size per site is estimated as the class average, 10/345 of
# the site's list (quickdraw is exact that way: 350 training images in every class). The
# import prints the true N.
DOMAINNET_SITE_TRAIN = {'clipart': 33_525, 'infograph': 36_023, 'painting': 50_416,
                        'quickdraw': 120_750, 'real': 120_906, 'sketch': 48_212}
DOMAINNET_CLASSES = 345
# FedBN's digit archive: 7,438 training images per domain in 10 parts of 743 or 744 (FedBN's
# utils/data_preprocess.py; docs/data.md), every domain the same.
DIGITS5_DOMAIN_TRAIN = 7_438

# dataset: (training examples per domain, in domain order (one entry: a single domain), source)
TRAIN_SETS = {
    'cifar10': ((50_000,), 'CIFAR-10: 50,000 training images (Krizhevsky 2009)'),
    'cifar100': ((50_000,), 'CIFAR-100: 50,000 training images (Krizhevsky 2009)'),
    'tiny_imagenet': ((100_000,), 'Tiny-ImageNet: 500 training images x 200 classes '
                      '(cs231n tiny-imagenet-200.zip)'),
    'emnist': ((697_932,), 'EMNIST byclass: 697,932 training images (Cohen et al. 2017, '
               'Table II)'),
    'embedded': ((6_000,), 'the embedded Fashion-MNIST subset: 6,000 training images '
                 '(fedjax_drift/data/fashion_mnist_small.json)'),
    'ag_news': ((120_000,), 'AG News: 120,000 training texts (Zhang et al. 2015)'),
    'sst5': ((8_544,), 'SST-5: 8,544 training sentences (Socher et al. 2013)'),
    'digits5': ((DIGITS5_DOMAIN_TRAIN,) * len(multidomain.DIGITS5),
                'FedBN\'s digit archive: 7,438 training images per domain (10 parts of 743-744; '
                'FedBN utils/data_preprocess.py), MNIST, SVHN, USPS, SynthDigits, MNIST-M'),
    'domainnet': (tuple(round(DOMAINNET_SITE_TRAIN[s] * 10 / DOMAINNET_CLASSES)
                        for s in multidomain.DOMAINNET_SITES),
                  'FedBN\'s 10-class DomainNet subset, per site: an estimate, 10/345 of the '
                  'site\'s cleaned training list (Peng et al. 2019); FedBN\'s split files hold '
                  'the exact counts'),
}


def total(dataset):
  """The whole training set of `dataset` (every domain, every part), None when unknown."""
  entry = TRAIN_SETS.get(dataset)
  return sum(entry[0]) if entry else None


def train_sizes(values):
  """Training examples per domain that a run with Config `values` (a dict or a Config) reads
  before any validation split: the table's, with FedBN's digit parts (--digits5_parts of 10)
  taken from the values. None when the dataset is not in TRAIN_SETS."""
  get = values.get if isinstance(values, dict) else lambda k, d=None: getattr(values, k, d)
  entry = TRAIN_SETS.get(get('dataset', 'embedded'))
  if entry is None:
    return None
  sizes = entry[0]
  if get('dataset') == 'digits5':
    parts = get('digits5_parts', 1) or multidomain.DIGITS5_MAX_PARTS
    sizes = tuple(n * parts / multidomain.DIGITS5_MAX_PARTS for n in sizes)
  return sizes


def client_sizes(values):
  """Training examples of each of the run's num_clients clients, from train_sizes: the
  training share (1 - val_fraction) of each domain split evenly over its clients under
  --partition=domains (num_clients / domains clients per domain), else of the whole set
  evenly over every client. None when the dataset is not in TRAIN_SETS."""
  get = values.get if isinstance(values, dict) else lambda k, d=None: getattr(values, k, d)
  sizes = train_sizes(values)
  if sizes is None:
    return None
  keep = 1 - (get('val_fraction', 0.0) or 0.0)
  n = get('num_clients', 1)
  if get('partition') == 'domains' and len(sizes) > 1:
    per = max(1, n // len(sizes))
    return [d * keep / per for d in sizes for _ in range(per)]
  return [sum(sizes) * keep / n] * n


def mean_batches(sizes, batch_size):
  """The mean over clients of ceil(examples / batch_size): one local epoch's steps."""
  return sum(math.ceil(s / batch_size) for s in sizes) / len(sizes)

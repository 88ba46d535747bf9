"""Covariate shift: digit domains built from MNIST and USPS (FedFOR's "one client per
domain", with digit datasets anyone can download).

Domains (all 28x28 uint8, 10 classes):
  0 mnist         MNIST as is
  1 usps          USPS, resized from 16x16 (bilinear)
  2 rotated       MNIST rotated by 45 degrees
  3 inverted      255 - MNIST
  4 noisy         MNIST + Gaussian noise (sigma 0.3), clipped
  5 low_contrast  MNIST scaled into [0.35, 0.65]
The MNIST-based domains use disjoint slices of MNIST's train and test sets, so no image
appears in two domains. With --partition=domains, clients are split evenly across domains
(--num_clients a multiple of 6) and each domain's examples are dealt IID to its clients.
"""
import os

import numpy as np

from fedjax_drift.data import common, local
from fedjax_drift.errors import UserError

DOMAINS = ('mnist', 'usps', 'rotated', 'inverted', 'noisy', 'low_contrast')


def _resize(images, size):
  from PIL import Image  # pylint: disable=g-import-not-at-top
  return np.stack([np.asarray(Image.fromarray(im).resize((size, size), Image.BILINEAR))
                   for im in images])


def _rotate(images, angle):
  from PIL import Image  # pylint: disable=g-import-not-at-top
  return np.stack([np.asarray(Image.fromarray(im).rotate(angle, Image.BILINEAR))
                   for im in images])


def _transform(name, images, rng):
  x = images.astype(np.float32)
  if name == 'rotated':
    return _rotate(images, 45)
  if name == 'inverted':
    return (255 - images).astype(np.uint8)
  if name == 'noisy':
    return np.clip(x + rng.normal(0, 0.3 * 255, x.shape), 0, 255).astype(np.uint8)
  if name == 'low_contrast':
    return (0.35 * 255 + 0.3 * x).astype(np.uint8)
  return images


def _mnist_and_usps(data_dir):
  """MNIST and USPS arrays from DIR/mnist and DIR/usps, or from the imported copies."""
  if not data_dir:
    return common.load_imported('mnist'), common.load_imported('usps')
  mnist_dir, usps_dir = os.path.join(data_dir, 'mnist'), os.path.join(data_dir, 'usps')
  if not os.path.isdir(mnist_dir) or not os.path.isdir(usps_dir):
    raise UserError(f'--dataset=digits_domains needs --data_dir holding mnist/ (IDX files) and '
                    f'usps/; {data_dir} does not (or import both with fedjax-drift-data)')
  return local.read_idx_dir(mnist_dir), local.load_usps(usps_dir)


def load_digits_domains(data_dir, seed=0):
  """The six domains as one Dataset with domain ids and names; data_dir '' = imported copies.

  `seed` fixes the construction (which MNIST slice goes to which domain, the noise); the run
  seed does not enter, so every run sees the same domains."""
  (mx, my, mtx, mty), (ux, uy, utx, uty) = _mnist_and_usps(data_dir)
  to_u8 = lambda a: np.clip(np.round(a[..., 0] * 255), 0, 255).astype(np.uint8)
  ux, utx = _resize(to_u8(ux), 28), _resize(to_u8(utx), 28)
  rng = np.random.default_rng(seed)
  mnist_domains = [d for d in DOMAINS if d != 'usps']
  train_slices = np.array_split(rng.permutation(len(my)), len(mnist_domains))
  test_slices = np.array_split(rng.permutation(len(mty)), len(mnist_domains))
  parts = {'train': ([], [], []), 'test': ([], [], [])}
  for d, name in enumerate(DOMAINS):
    if name == 'usps':
      splits = {'train': (ux, uy), 'test': (utx, uty)}
    else:
      k = mnist_domains.index(name)
      splits = {'train': (mx[train_slices[k], ..., 0], my[train_slices[k]]),
                'test': (mtx[test_slices[k], ..., 0], mty[test_slices[k]])}
    for split, (x, y) in splits.items():
      parts[split][0].append(_transform(name, x, rng))
      parts[split][1].append(np.asarray(y))
      parts[split][2].append(np.full(len(y), d, np.int32))
  (xtr, ytr, dtr), (xte, yte, dte) = [[np.concatenate(a) for a in parts[s]]
                                      for s in ('train', 'test')]
  return common.validate('digits_domains', xtr[..., None], ytr, xte[..., None], yte,
                         domains_train=dtr, domains_test=dte, domain_names=DOMAINS)


def load(dataset, data_dir=None, **_):
  """--dataset=digits_domains: load_digits_domains(data_dir) (the imported copies without)."""
  del dataset
  return load_digits_domains(data_dir)


def _folder_files(dataset, folder):
  """The files digits_domains reads from a --data_dir folder."""
  del dataset
  return ([os.path.join(folder, 'mnist', n) for n in local.IDX_FILES]
          + [os.path.join(folder, 'usps', 'usps.npz')])


common.register_dataset(
    'digits_domains', 'six digit domains from MNIST and USPS (covariate shift, '
    '--partition=domains)', load, folder_files=_folder_files)


def clients_per_domain(train_sizes, num_clients):
  """How many clients each domain gets: floor(N / D) each, and the N mod D clients left over
  go one each to the domains with the most training examples (ties: lower id first), so
  client sizes stay as even as the domains allow. Returns an int array [D]."""
  num_domains = len(train_sizes)
  counts = np.full(num_domains, num_clients // num_domains)
  larger_first = np.argsort(-np.asarray(train_sizes), kind='stable')
  counts[larger_first[:num_clients % num_domains]] += 1
  return counts


def domain_partition(domains_train, domains_test, num_clients, rng):
  """--partition=domains: each domain's examples go to that domain's own clients.

  Args:
    domains_train, domains_test: int domain id per training / test example.
    num_clients: N >= the number of domains D (the ids 0..D-1 seen in either split).
    rng: a numpy Generator (the run seed's).
  Returns:
    (train_parts, test_parts, client_domain): per-client index arrays into each split, and
    each client's domain id. Clients are numbered domain by domain (domain 0's first); the
    counts come from `clients_per_domain`. A domain's training examples, shuffled, are dealt
    into near-equal consecutive shares, and so are its test examples: each client is tested on
    its share of its own domain's test set. With one client per domain (FedBN's setting) that
    share is the domain's whole test set, and each test example is evaluated exactly once
    whatever N is.
  """
  num_domains = int(max(domains_train.max(), domains_test.max())) + 1
  if num_clients < num_domains:
    raise UserError(f'--partition=domains: --num_clients={num_clients} is fewer than the '
                    f'{num_domains} domains (each domain needs a client of its own)')
  sizes = np.bincount(domains_train, minlength=num_domains)
  empty = np.flatnonzero(sizes == 0)
  if len(empty):
    raise UserError(f'--partition=domains: domain {int(empty[0])} has no training examples')
  counts = clients_per_domain(sizes, num_clients)
  train_parts, test_parts, client_domain = [], [], []
  for d in range(num_domains):
    train = rng.permutation(np.flatnonzero(domains_train == d))
    test = rng.permutation(np.flatnonzero(domains_test == d))
    if counts[d] > len(train):
      raise UserError(f'--partition=domains: domain {d} has {len(train)} training examples, '
                      f'too few for its {counts[d]} clients; lower --num_clients')
    train_parts += [np.sort(p) for p in np.array_split(train, counts[d])]
    test_parts += [np.sort(p) for p in np.array_split(test, counts[d])]
    client_domain += [d] * int(counts[d])
  return train_parts, test_parts, np.asarray(client_domain, np.int32)

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

from fedjax_drift.data import sources
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
    return sources.load_imported('mnist'), sources.load_imported('usps')
  mnist_dir, usps_dir = os.path.join(data_dir, 'mnist'), os.path.join(data_dir, 'usps')
  if not os.path.isdir(mnist_dir) or not os.path.isdir(usps_dir):
    raise UserError(f'--dataset=digits_domains needs --data_dir holding mnist/ (IDX files) and '
                    f'usps/; {data_dir} does not (or import both with fedjax-drift-data)')
  return sources.read_idx_dir(mnist_dir), sources.load_usps(usps_dir)


def load_digits_domains(data_dir, seed=0):
  """Returns (Dataset, train domain ids, test domain ids); data_dir '' = imported copies."""
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
  ds = sources.validate('digits_domains', xtr[..., None], ytr, xte[..., None], yte)
  return ds, dtr, dte


def domain_partition(domain_ids, num_clients, rng):
  """Clients split evenly over domains; a domain's examples dealt IID to its clients."""
  num_domains = int(domain_ids.max()) + 1
  if num_clients % num_domains:
    raise UserError(f'--partition=domains: --num_clients={num_clients} must be a multiple of '
                    f'the {num_domains} domains')
  per = num_clients // num_domains
  parts = []
  for d in range(num_domains):
    idx = rng.permutation(np.flatnonzero(domain_ids == d))
    parts += [np.sort(p) for p in np.array_split(idx, per)]
  return parts

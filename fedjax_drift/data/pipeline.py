"""The input pipeline inside the compiled step: scaling, normalisation and augmentation.

Training batches go  uint8/float x -> [0, 1] floats -> augment -> normalise;  evaluation
inputs skip the augmentation (`preprocess`). Augmenting before normalising is torchvision's
order (`RandomCrop`/`RandomRotation` on the image, then `ToTensor`, `Normalize`), so the
crop's padding and the rotation's fill are black pixels, not the channel means.

Augmentations (all per example, on [B, H, W, C] images):
  crop_flip    pad every side with `pad` zero pixels, take a random H x W window, and flip
               horizontally with probability 1/2: torchvision's RandomCrop(32, padding=4) +
               RandomHorizontalFlip, as the FedGKD and MOON code train CIFAR.
  flip_rotate  flip horizontally with probability 1/2, then rotate by an angle uniform in
               [-degrees, degrees], nearest pixel, zero fill: FedBN's DomainNet transform
               (RandomHorizontalFlip, RandomRotation((-30, 30))).

Randomness: every draw derives from the key `make_batch_fn` gets for (run, round, client) and
the step number (`step_keys`), so augmentation does not depend on how clients are run, a
resumed run draws what an uninterrupted one does, and each step and client differs.
"""
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_drift.data.federated import to_float
from fedjax_drift.errors import UserError
from fedjax_drift import registry

# Augmentations are data: the Pipeline carries the kind and its values into the step.
registry.register('augment', 'none', 'no augmentation')
registry.register('augment', 'crop_flip', 'random crop with --augment_pad zero padding + '
                  'horizontal flip (CIFAR)', reads=('augment_pad',))
registry.register('augment', 'flip_rotate', 'horizontal flip + rotation within '
                  '+-(--augment_degrees) (FedBN DomainNet)', reads=('augment_degrees',))
AUGMENTATIONS = registry.names('augment')
NORMALIZATIONS = ('none', 'per_channel', 'fedgkd_code')
_STEP_TAG = 0xA06  # fold_in tag separating the per-step keys from the batch-shuffle seed


class Normalization(NamedTuple):
  """Per-channel statistics: x <- (x - mean) / std on [0, 1]-scaled inputs (last axis)."""
  mean: jax.Array  # [C] float32
  std: jax.Array   # [C] float32, > 0


class Pipeline(NamedTuple):
  """What happens to a batch between the gather and the model (static, closed over)."""
  augment: str = 'none'
  pad: int = 4
  degrees: float = 30.0
  norm: Optional[Normalization] = None
  dropout: bool = False  # the model takes a per-step 'dropout' key (Batch.rng)

  @property
  def is_identity(self):
    """True when training batches are exactly to_float(x) (the pipeline before these flags)."""
    return self.augment == 'none' and self.norm is None and not self.dropout


def preprocess(x, norm: Optional[Normalization] = None):
  """Model inputs for evaluation (and the end of the training path): [0, 1] floats,
  normalised per channel when `norm` is given. Pure; x is any [..., C] array."""
  x = to_float(x)
  if norm is None:
    return x
  return (x - norm.mean) / norm.std


def step_keys(key, step):
  """(augmentation key, dropout key) for one local step of the client whose key is `key`."""
  k = jax.random.fold_in(jax.random.fold_in(key, _STEP_TAG), step)
  return jax.random.fold_in(k, 0), jax.random.fold_in(k, 1)


def crop(image, top, left, pad):
  """The H x W window at (top, left) of `image` [H, W, C] zero-padded by `pad` on each side
  (top = left = pad is the image itself)."""
  h, w, c = image.shape
  padded = jnp.pad(image, ((pad, pad), (pad, pad), (0, 0)))
  return jax.lax.dynamic_slice(padded, (top, left, 0), (h, w, c))


def hflip(image, flip):
  """`image` [H, W, C] mirrored left-right when `flip` (a traced bool) is true."""
  return jnp.where(flip, image[:, ::-1, :], image)


def rotate(image, degrees):
  """`image` [H, W, C] rotated counter-clockwise by `degrees` about its centre, nearest
  pixel, zero outside (torchvision's RandomRotation defaults: NEAREST, fill 0, no expand).
  rotate(x, 90) equals np.rot90(x) on a square image."""
  h, w, _ = image.shape
  theta = jnp.deg2rad(degrees)
  cos, sin = jnp.cos(theta), jnp.sin(theta)
  rows, cols = jnp.meshgrid(jnp.arange(h, dtype=jnp.float32),
                            jnp.arange(w, dtype=jnp.float32), indexing='ij')
  cy, cx = (h - 1) / 2.0, (w - 1) / 2.0
  x, y = cols - cx, cy - rows  # y up, so positive angles turn counter-clockwise on screen
  # The output pixel at p shows the source pixel at R(-theta) p.
  src_x = jnp.round(x * cos + y * sin + cx).astype(jnp.int32)
  src_y = jnp.round(cy - (-x * sin + y * cos)).astype(jnp.int32)
  inside = (src_x >= 0) & (src_x < w) & (src_y >= 0) & (src_y < h)
  pixels = image[jnp.clip(src_y, 0, h - 1), jnp.clip(src_x, 0, w - 1)]
  return jnp.where(inside[..., None], pixels, jnp.zeros_like(pixels))


def _crop_flip(image, key, pad):
  k_top, k_left, k_flip = jax.random.split(key, 3)
  top = jax.random.randint(k_top, (), 0, 2 * pad + 1)
  left = jax.random.randint(k_left, (), 0, 2 * pad + 1)
  return hflip(crop(image, top, left, pad), jax.random.bernoulli(k_flip))


def _flip_rotate(image, key, degrees):
  k_flip, k_angle = jax.random.split(key)
  angle = jax.random.uniform(k_angle, (), jnp.float32, -degrees, degrees)
  return rotate(hflip(image, jax.random.bernoulli(k_flip)), angle)


def augment(x, key, kind, pad=4, degrees=30.0):
  """A batch [B, H, W, C] of floats augmented per example (`kind` as in the module
  docstring); example b uses fold_in(key, b), so a batch's draws do not depend on B."""
  if kind == 'none':
    return x
  keys = jax.vmap(lambda b: jax.random.fold_in(key, b))(jnp.arange(x.shape[0]))
  if kind == 'crop_flip':
    return jax.vmap(lambda im, k: _crop_flip(im, k, pad))(x, keys)
  if kind == 'flip_rotate':
    return jax.vmap(lambda im, k: _flip_rotate(im, k, degrees))(x, keys)
  raise ValueError(f'unknown augmentation {kind!r}')


def train_inputs(x, key, pipeline: Optional[Pipeline]):
  """A training batch's model inputs: to_float, augment with `key`, normalise."""
  if pipeline is None:
    return to_float(x)
  return preprocess(augment(to_float(x), key, pipeline.augment, pipeline.pad,
                            pipeline.degrees), pipeline.norm)


def channel_stats(x, chunk=4096):
  """(mean [C], std [C]) over every example and position of x [n, ..., C] on the [0, 1]
  scale to_float gives, in float64 on the host, a chunk of examples at a time (a float64
  copy of a whole image set would not fit). std is the population std (numpy's)."""
  x = np.asarray(x)
  scale = 1.0 / 255.0 if x.dtype == np.uint8 else 1.0
  total = np.zeros(x.shape[-1])
  squares = np.zeros(x.shape[-1])
  count = 0
  for start in range(0, x.shape[0], chunk):
    part = x[start:start + chunk].reshape(-1, x.shape[-1]).astype(np.float64) * scale
    total += part.sum(0)
    squares += (part * part).sum(0)
    count += part.shape[0]
  mean = total / max(count, 1)
  var = np.maximum(squares / max(count, 1) - mean * mean, 0.0)
  return mean, np.sqrt(var)


def parse_floats(text, flag):
  """'0.1, 0.2' -> [0.1, 0.2]; a UserError naming --flag otherwise."""
  try:
    values = [float(v) for v in text.split(',') if v.strip()]
  except ValueError:
    raise UserError(f'--{flag}={text} must be a comma list of numbers') from None
  if not values:
    raise UserError(f'--{flag}={text!r} must be a comma list of numbers')
  return values


# --normalize=fedgkd_code: the fixed (mean, std) FedGKD's code normalises each dataset with
# (CGCL-codes/FedGKD pcode/datasets/prepare_data.py, transforms.Normalize), on the [0, 1]
# scale. CIFAR-10's std is the widely copied 0.2023, 0.1994, 0.2010, not the training set's
# 0.247, 0.243, 0.261 that per_channel computes.
FEDGKD_CODE_CONSTANTS = {
    'cifar10': ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)),
    'cifar100': ((0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761)),
    'tiny_imagenet': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
    'svhn': ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
    'mnist': ((0.1307,), (0.3081,)),
}


def code_constants(dataset):
  """--normalize=fedgkd_code's (mean, std) for --dataset (its tfds: form too), or UserError."""
  name = dataset[len('tfds:'):] if dataset.startswith('tfds:') else dataset
  if name not in FEDGKD_CODE_CONSTANTS:
    raise UserError(f'--normalize=fedgkd_code: FedGKD\'s code has constants for '
                    f'{", ".join(FEDGKD_CODE_CONSTANTS)}, not --dataset={dataset}; give '
                    '--normalize_mean and --normalize_std')
  return tuple(np.array(v) for v in FEDGKD_CODE_CONSTANTS[name])


def normalization(x_train, normalize='none', normalize_mean='', normalize_std='',
                  dataset='') -> Optional[Normalization]:
  """The run's Normalization, or None: normalize_mean/normalize_std (comma lists) when given,
  else the training images' per-channel statistics with normalize='per_channel', or FedGKD's
  code's constants for `dataset` with normalize='fedgkd_code'. The channel axis is
  the last (features, for flat inputs). A channel with zero spread keeps std 1 (it would
  otherwise divide by zero; every training value of it equals its mean)."""
  channels = x_train.shape[-1]
  if normalize_mean or normalize_std:
    mean = np.array(parse_floats(normalize_mean, 'normalize_mean'))
    std = np.array(parse_floats(normalize_std, 'normalize_std'))
    for flag, values in (('normalize_mean', mean), ('normalize_std', std)):
      if len(values) not in (1, channels):
        raise UserError(f'--{flag} has {len(values)} values; the data has {channels} '
                        'channels (give one per channel, or one for all)')
    if not np.all(std > 0):
      raise UserError(f'--normalize_std={normalize_std} must be > 0')
  elif normalize == 'per_channel':
    mean, std = channel_stats(x_train)
    std = np.where(std > 0, std, 1.0)
  elif normalize == 'fedgkd_code':
    mean, std = code_constants(dataset)
    if len(mean) not in (1, channels):
      raise UserError(f'--normalize=fedgkd_code has {len(mean)} channels for '
                      f'--dataset={dataset}; the data has {channels}')
  else:
    return None
  mean = np.broadcast_to(mean, (channels,))
  std = np.broadcast_to(std, (channels,))
  return Normalization(jnp.asarray(mean, jnp.float32), jnp.asarray(std, jnp.float32))


def check(x_train, augment='none', normalize='none', normalize_mean='', normalize_std=''):
  """Refuses augmentations (the --augment name) on data that is not images [n, H, W, C], and
  augmentation or normalisation of token ids (integer arrays other than uint8: text)."""
  dtype = np.asarray(x_train[:0]).dtype
  if np.issubdtype(dtype, np.integer) and dtype != np.uint8:
    for flag, value in (('augment', augment), ('normalize', normalize),
                        ('normalize_mean', normalize_mean), ('normalize_std', normalize_std)):
      if value not in ('none', ''):
        raise UserError(f'--{flag}={value} works on images and features; the data is text '
                        '(token ids), which is neither augmented nor normalised')
  if augment != 'none' and np.ndim(x_train) != 4:
    raise UserError(f'--augment={augment} needs images [H, W, C]; the data has shape '
                    f'{tuple(np.shape(x_train)[1:])}')


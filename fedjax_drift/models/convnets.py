"""Plain convolutional networks of the papers: McMahan et al.'s CNNs, FedADC's CIFAR CNN,
FedBN's AlexNet and DigitModel, Reddi et al.'s EMNIST CNN.

All take NHWC float32 images (uint8 already scaled to [0, 1]).
"""
from typing import Tuple

import jax.numpy as jnp
from flax import linen as nn

from fedjax_drift import registry
from fedjax_drift.errors import UserError
from fedjax_drift.models.layers import (Conv, ConvReluPool, StridedConv, adaptive_avg_pool, dense,
                                        max_pool_2x2, max_pool_valid)
from fedjax_drift.models.info import ModelInfo
from fedjax_drift.models.norms import batch_norm_torch


class CNNMnist(nn.Module):
  """McMahan et al.'s CNN: conv5x5-32, pool, conv5x5-64, pool, fc-512, fc-C (SAME padding)."""
  num_classes: int

  @nn.compact
  def __call__(self, x, return_features=False):
    x = ConvReluPool(32, 5, name='conv1')(x)
    x = ConvReluPool(64, 5, name='conv2')(x)
    x = nn.relu(dense(x.reshape(x.shape[0], -1), 512, 'fc1'))
    logits = dense(x, self.num_classes, 'head')
    return (logits, x) if return_features else logits


class CNNCifar(nn.Module):
  """FedADC's CIFAR CNN: 4 conv + 4 fc, max-pooling, no normalisation.

  The papers give only "four convolutional and four fully connected layers"; the widths here
  (conv3x3 32-32-pool-64-64-pool, fc 512-256-128-C) are ours.
  """
  num_classes: int

  @nn.compact
  def __call__(self, x, return_features=False):
    x = nn.relu(Conv(32, 3, name='conv1')(x))
    x = ConvReluPool(32, 3, name='conv2')(x)
    x = nn.relu(Conv(64, 3, name='conv3')(x))
    x = ConvReluPool(64, 3, name='conv4')(x)
    x = x.reshape(x.shape[0], -1)
    for i, h in enumerate((512, 256, 128)):
      x = nn.relu(dense(x, h, f'fc{i + 1}'))
    logits = dense(x, self.num_classes, 'head')
    return (logits, x) if return_features else logits


class CNNMnistBN(nn.Module):
  """McMahan et al.'s CNN with BatchNorm after each conv (conv -> BN -> ReLU -> pool)."""
  num_classes: int

  @nn.compact
  def __call__(self, x, return_features=False, train=False):
    for i, width in enumerate((32, 64)):
      x = Conv(width, 5, use_bias=False, name=f'conv{i + 1}')(x)
      x = nn.BatchNorm(use_running_average=not train, momentum=0.9, name=f'bn{i + 1}')(x)
      x = max_pool_2x2(nn.relu(x))
    x = nn.relu(dense(x.reshape(x.shape[0], -1), 512, 'fc1'))
    logits = dense(x, self.num_classes, 'head')
    return (logits, x) if return_features else logits


# --- McMahan et al.'s CIFAR-10 model: the TensorFlow tutorial's conventions. -------------------

def max_pool_3x3_s2(x):
  """3x3/stride-2 max-pooling with TensorFlow's SAME padding, as the max of 9 strided slices."""
  h, w = x.shape[1], x.shape[2]
  oh, ow = -(-h // 2), -(-w // 2)
  ph, pw = max((oh - 1) * 2 + 3 - h, 0), max((ow - 1) * 2 + 3 - w, 0)
  x = jnp.pad(x, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)),
              constant_values=-jnp.inf)
  out = None
  for i in range(3):
    for j in range(3):
      s = x[:, i:i + 2 * oh - 1:2, j:j + 2 * ow - 1:2, :]
      out = s if out is None else jnp.maximum(out, s)
  return out


def local_response_norm(x, depth_radius=4, bias=1.0, alpha=0.001 / 9.0, beta=0.75):
  """tf.nn.lrn over channels, with the TensorFlow CIFAR-10 tutorial's constants."""
  c = x.shape[-1]
  sq = jnp.pad(jnp.square(x), ((0, 0), (0, 0), (0, 0), (depth_radius, depth_radius)))
  window = sum(sq[..., d:d + c] for d in range(2 * depth_radius + 1))
  return x / (bias + alpha * window) ** beta


def center_crop(x, size):
  """The central size x size window of NHWC `x` (UserError when the images are smaller)."""
  h, w = x.shape[1], x.shape[2]
  if h < size or w < size:
    raise UserError(f'cnn_mcmahan_cifar needs images of at least {size}x{size}, got {h}x{w}')
  top, left = (h - size) // 2, (w - size) // 2
  return x[:, top:top + size, left:left + size, :]


def per_image_standardization(x):
  """tf.image.per_image_standardization: (x - mean) / max(std, 1/sqrt(N)) per image."""
  n = x.shape[1] * x.shape[2] * x.shape[3]
  mean = jnp.mean(x, axis=(1, 2, 3), keepdims=True)
  std = jnp.std(x, axis=(1, 2, 3), keepdims=True)
  return (x - mean) / jnp.maximum(std, 1.0 / jnp.sqrt(float(n)))


class CNNMcMahanCifar(nn.Module):
  """McMahan et al.'s (2017) CIFAR-10 model, "the model architecture ... from the TensorFlow
  tutorial": 24x24 crop, conv5x5-64, pool3x3/2, LRN, conv5x5-64, LRN, pool3x3/2, fc-384,
  fc-192, linear (1,068,298 parameters for 10 classes; the paper says "about 10^6").

  IGFL (§5, "the same network structure as in McMahan et al.") uses it for CIFAR-10. The
  tutorial's input pipeline is kept in its evaluation form for every batch: a central 24x24
  crop and per-image standardisation. Its training-time augmentation (random crop, flip,
  brightness, contrast) is not applied; initialisation is --init's (models/layers.py).
  """
  num_classes: int

  @nn.compact
  def __call__(self, x, return_features=False):
    x = per_image_standardization(center_crop(x, 24))
    x = nn.relu(Conv(64, 5, name='conv1')(x))
    x = local_response_norm(max_pool_3x3_s2(x))
    x = local_response_norm(nn.relu(Conv(64, 5, name='conv2')(x)))
    x = max_pool_3x3_s2(x).reshape(x.shape[0], -1)
    x = nn.relu(dense(x, 384, 'fc1'))
    x = nn.relu(dense(x, 192, 'fc2'))
    logits = dense(x, self.num_classes, 'head')
    return (logits, x) if return_features else logits


# --- FedBN's models (med-air/FedBN nets/models.py). --------------------------------------------

ALEXNET_MIN_SIZE = 63  # the smallest input for which the third 3x3/2 max-pool has a window


class AlexNetBN(nn.Module):
  """FedBN's AlexNet with BatchNorm after each conv and hidden dense layer (DomainNet).

  FedBN (Li et al. 2021), code: med-air/FedBN nets/models.py `AlexNet`: conv11x11/4-64 (pad 2),
  pool3x3/2, conv5x5-192, pool3x3/2, conv3x3-384, conv3x3-256, conv3x3-256, pool3x3/2,
  adaptive average pooling to 6x6, fc-4096, fc-4096, fc-C; BatchNorm after every layer but the
  last. FedBN feeds 256x256 images; the adaptive pooling lets any size from 63x63 up work
  (64x64 ends the features at 1x1, which the pooling repeats to 6x6). Flattening is NHWC, a
  fixed permutation of fc1's rows against torch's NCHW.
  """
  num_classes: int

  @nn.compact
  def __call__(self, x, return_features=False, train=False):
    if min(x.shape[1], x.shape[2]) < ALEXNET_MIN_SIZE:
      raise UserError(f'--model=alexnet_bn needs images of at least {ALEXNET_MIN_SIZE}x'
                      f'{ALEXNET_MIN_SIZE}, got {x.shape[1]}x{x.shape[2]}')
    x = StridedConv(64, 11, 4, 2, name='conv1')(x)
    x = max_pool_valid(nn.relu(batch_norm_torch('bn1', train)(x)), 3, 2)
    x = Conv(192, 5, name='conv2')(x)  # torch padding 2 = SAME for a 5x5 kernel
    x = max_pool_valid(nn.relu(batch_norm_torch('bn2', train)(x)), 3, 2)
    for i, width in ((3, 384), (4, 256), (5, 256)):
      x = nn.relu(batch_norm_torch(f'bn{i}', train)(Conv(width, 3, name=f'conv{i}')(x)))
    x = adaptive_avg_pool(max_pool_valid(x, 3, 2), 6)
    x = x.reshape(x.shape[0], -1)
    x = nn.relu(batch_norm_torch('bn6', train)(dense(x, 4096, 'fc1')))
    x = nn.relu(batch_norm_torch('bn7', train)(dense(x, 4096, 'fc2')))
    logits = dense(x, self.num_classes, 'head')
    return (logits, x) if return_features else logits


class DigitCNNBN(nn.Module):
  """FedBN's DigitModel: 3 conv5x5 (64, 64, 128), fc-2048, fc-512, fc-C, BatchNorm throughout.

  FedBN (Li et al. 2021), code: med-air/FedBN nets/models.py `DigitModel`, for the five digit
  domains at 28x28x3: conv -> BN -> ReLU -> pool2x2 twice, conv -> BN -> ReLU, flatten
  (7 x 7 x 128 = 6272), then fc -> BN -> ReLU twice and the output layer.
  """
  num_classes: int

  @nn.compact
  def __call__(self, x, return_features=False, train=False):
    for i, width in enumerate((64, 64, 128)):
      x = Conv(width, 5, name=f'conv{i + 1}')(x)  # torch padding 2 = SAME
      x = nn.relu(batch_norm_torch(f'bn{i + 1}', train)(x))
      if i < 2:
        x = max_pool_2x2(x)
    x = x.reshape(x.shape[0], -1)
    x = nn.relu(batch_norm_torch('bn4', train)(dense(x, 2048, 'fc1')))
    x = nn.relu(batch_norm_torch('bn5', train)(dense(x, 512, 'fc2')))
    logits = dense(x, self.num_classes, 'head')
    return (logits, x) if return_features else logits


class CNNEmnist(nn.Module):
  """Reddi et al.'s (2021) EMNIST CNN: conv3x3-32, conv3x3-64, pool, fc-128, fc-C, dropout.

  "Adaptive Federated Optimization" (ICLR 2021), the EMNIST CNN of its appendix: two VALID
  3x3 convs with ReLU, 2x2 max-pooling, dropout `rates[0]` (0.25), flatten, fc-128 with ReLU,
  dropout `rates[1]` (0.5), fc-C (1,206,590 parameters for 62 classes on 28x28x1).
  Dropout is active only with `train=True` and a 'dropout' rng (models.get's train_apply
  with an rng); evaluation is deterministic.
  """
  num_classes: int
  rates: Tuple[float, float] = (0.25, 0.5)

  @nn.compact
  def __call__(self, x, return_features=False, train=False):
    deterministic = not (train and self.has_rng('dropout'))
    x = nn.relu(Conv(32, 3, padding='VALID', name='conv1')(x))
    x = max_pool_2x2(nn.relu(Conv(64, 3, padding='VALID', name='conv2')(x)))
    x = nn.Dropout(self.rates[0], deterministic=deterministic)(x)
    x = nn.relu(dense(x.reshape(x.shape[0], -1), 128, 'fc1'))
    x = nn.Dropout(self.rates[1], deterministic=deterministic)(x)
    logits = dense(x, self.num_classes, 'head')
    return (logits, x) if return_features else logits


def cnn_emnist(num_classes, dropout=-1.0):
  """Reddi et al.'s (2021) EMNIST CNN: conv3x3-32, conv3x3-64, pool, fc-128, fc-C, dropout.

  See `CNNEmnist`. dropout (--dropout): -1 keeps its rates 0.25 and 0.5, 0 turns dropout off,
  p in (0, 1) sets both rates to p.
  """
  return CNNEmnist(num_classes, (0.25, 0.5) if dropout < 0 else (dropout, dropout))


class CNNCifarMoon(nn.Module):
  """FedADC's CNN for MOON: cnn_cifar's convs, global average pooling, fc-512, fc-256, fc-C.

  FedADC §IV-A2: "For experiments that train on CNN, we remove last two linear layers at the
  end of the network and swap it with average pooling to reduce the image size following with
  a projection layer of 2 layer MLP with output dimension of 256." Our reading, with
  `CNNCifar`'s widths: its last two dense layers (fc-128 and the output layer) go, the 8x8x64
  conv maps are averaged to 64 features (the pooling "reduces the image size"), fc-512 and
  fc-256 remain, and the 256-d output is the representation. With --algo=moon (any recipe
  with a projection head) `WithProjection` adds the MOON head on it (--moon_projection_dim=256
  outputs, hidden width --projection_hidden) and the classifier; the own output layer `head`
  serves only runs without a projection head.
  """
  num_classes: int

  @nn.compact
  def __call__(self, x, return_features=False):
    x = nn.relu(Conv(32, 3, name='conv1')(x))
    x = ConvReluPool(32, 3, name='conv2')(x)
    x = nn.relu(Conv(64, 3, name='conv3')(x))
    x = ConvReluPool(64, 3, name='conv4')(x)
    x = jnp.mean(x, axis=(1, 2))
    for i, h in enumerate((512, 256)):
      x = nn.relu(dense(x, h, f'fc{i + 1}'))
    logits = dense(x, self.num_classes, 'head')
    return (logits, x) if return_features else logits


# --- Registration -----------------------------------------------------------------------------
# build(values, num_classes, **shapes) -> the flax module; info: a ModelInfo (family 'conv',
# BatchNorm, the BatchNorm twin).

def _plain(module):
  """The build of a model whose only argument is num_classes."""
  return lambda values, num_classes, **_: module(num_classes)


_CONV, _CONV_BN = ModelInfo('conv'), ModelInfo('conv', batchnorm=True)
for _name, _module, _info, _summary in (
    ('cnn_mnist', CNNMnist, ModelInfo('conv', twin='cnn_mnist_bn'),
     'McMahan et al.\'s CNN: conv5x5-32, pool, conv5x5-64, pool, fc-512, fc-C (SAME padding)'),
    ('cnn_cifar', CNNCifar, _CONV,
     'FedADC\'s CIFAR CNN: 4 conv + 4 fc, max-pooling, no normalisation'),
    ('cnn_mnist_bn', CNNMnistBN, _CONV_BN,
     'McMahan et al.\'s CNN with BatchNorm after each conv (conv -> BN -> ReLU -> pool)'),
    ('cnn_mcmahan_cifar', CNNMcMahanCifar, _CONV,
     'McMahan et al.\'s (2017) CIFAR-10 CNN from the TensorFlow tutorial (IGFL)'),
    ('alexnet_bn', AlexNetBN, _CONV_BN,
     'FedBN\'s AlexNet with BatchNorm after each conv and hidden dense layer (DomainNet)'),
    ('digit_cnn_bn', DigitCNNBN, _CONV_BN,
     'FedBN\'s DigitModel: 3 conv5x5 (64, 64, 128), fc-2048, fc-512, fc-C, BatchNorm throughout'),
    ('cnn_cifar_moon', CNNCifarMoon, _CONV, 'FedADC\'s CNN for MOON: cnn_cifar\'s convs, global '
     'average pooling, fc-512, fc-256, fc-C')):
  registry.register('model', _name, _summary, build=_plain(_module), info=_info)
registry.register('model', 'cnn_emnist', 'Reddi et al.\'s (2021) EMNIST CNN: conv3x3-32, '
                  'conv3x3-64, pool, fc-128, fc-C, dropout', reads=('dropout',),
                  build=lambda v, num_classes, **_: cnn_emnist(num_classes, v.dropout),
                  info=_CONV)

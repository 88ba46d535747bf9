"""The model zoo: flax modules mapping a batch of inputs to logits.

Inputs arrive as float32 (uint8 images already scaled to [0, 1]). Convolutional models take
NHWC images; dense models flatten whatever they get.
"""
from typing import Sequence

import jax.numpy as jnp
from flax import linen as nn

from fedjax_drift.errors import UserError
from fedjax_drift.models.layers import Conv, ConvReluPool, max_pool_2x2


class LogReg(nn.Module):
  """Multinomial logistic regression: one Dense layer on the flattened input."""
  num_classes: int

  @nn.compact
  def __call__(self, x, return_features=False):
    h = x.reshape(x.shape[0], -1)
    logits = nn.Dense(self.num_classes, name='dense')(h)
    return (logits, h) if return_features else logits


class MLP(nn.Module):
  """ReLU MLP on the flattened input (default 2 x 200 hidden units, as McMahan et al.)."""
  num_classes: int
  hidden: Sequence[int] = (200, 200)

  @nn.compact
  def __call__(self, x, return_features=False):
    x = x.reshape(x.shape[0], -1)
    for i, h in enumerate(self.hidden):
      x = nn.relu(nn.Dense(h, name=f'dense{i}')(x))
    logits = nn.Dense(self.num_classes, name='head')(x)
    return (logits, x) if return_features else logits


class CNNMnist(nn.Module):
  """McMahan et al.'s CNN: conv5x5-32, pool, conv5x5-64, pool, fc-512, fc-C (SAME padding)."""
  num_classes: int

  @nn.compact
  def __call__(self, x, return_features=False):
    x = ConvReluPool(32, 5, name='conv1')(x)
    x = ConvReluPool(64, 5, name='conv2')(x)
    x = nn.relu(nn.Dense(512, name='fc1')(x.reshape(x.shape[0], -1)))
    logits = nn.Dense(self.num_classes, name='head')(x)
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
      x = nn.relu(nn.Dense(h, name=f'fc{i + 1}')(x))
    logits = nn.Dense(self.num_classes, name='head')(x)
    return (logits, x) if return_features else logits


class MLPBN(nn.Module):
  """The MLP with BatchNorm after each hidden layer (for FedBN)."""
  num_classes: int
  hidden: Sequence[int] = (200, 200)

  @nn.compact
  def __call__(self, x, return_features=False, train=False):
    x = x.reshape(x.shape[0], -1)
    for i, h in enumerate(self.hidden):
      x = nn.Dense(h, name=f'dense{i}')(x)
      x = nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9, name=f'bn{i}')(x))
    logits = nn.Dense(self.num_classes, name='head')(x)
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
    x = nn.relu(nn.Dense(512, name='fc1')(x.reshape(x.shape[0], -1)))
    logits = nn.Dense(self.num_classes, name='head')(x)
    return (logits, x) if return_features else logits


def _group_norm(name, channels):
  """The GroupNorm of the original `resnet18`/`resnet20`: 32 groups, or 2 when 32 does not divide."""
  return nn.GroupNorm(num_groups=min(32, channels) if channels % 32 == 0 else 2, name=name)


def _norm(kind, name, channels, train):
  """One normalisation layer after a convolution.

  'gn16': GroupNorm with 16 channels per group (FedGKD §5.1: "we set the channels of each
  group as 16"); 'bn': BatchNorm as in He et al. (2016) §3.4, flax momentum 0.9 (PyTorch's
  0.1); 'gn': the original rule of `_group_norm`.
  """
  if kind == 'gn16':
    return nn.GroupNorm(num_groups=max(1, channels // 16), name=name)
  if kind == 'bn':
    return nn.BatchNorm(use_running_average=not train, momentum=0.9, name=name)
  return _group_norm(name, channels)


def _pad_shortcut(x, features, stride):
  """He et al.'s option A: identity, subsampled by the stride, zero-padded to `features`."""
  x = x[:, ::stride, ::stride, :]
  extra = features - x.shape[-1]
  return jnp.pad(x, ((0, 0), (0, 0), (0, 0), (extra // 2, extra - extra // 2)))


class BasicBlock(nn.Module):
  """conv3x3 -> norm -> ReLU -> conv3x3 -> norm, plus the shortcut, then ReLU.

  A stride-2 3x3 SAME conv equals the stride-1 conv subsampled at even positions (PyTorch's
  padding=1 convention). The shortcut is a 1x1 conv + norm ('projection', option B) or the
  zero-padded identity ('pad', option A) when the shape changes.
  """
  features: int
  stride: int = 1
  norm: str = 'gn'
  shortcut: str = 'projection'

  @nn.compact
  def __call__(self, x, train=False):
    prefix = 'bn' if self.norm == 'bn' else 'gn'  # FedBN finds norm layers by the 'bn' prefix
    y = Conv(self.features, 3, use_bias=False, name='conv1')(x)
    if self.stride == 2:
      y = y[:, ::2, ::2, :]
    y = nn.relu(_norm(self.norm, f'{prefix}1', self.features, train)(y))
    y = Conv(self.features, 3, use_bias=False, name='conv2')(y)
    y = _norm(self.norm, f'{prefix}2', self.features, train)(y)
    if self.stride != 1 or x.shape[-1] != self.features:
      if self.shortcut == 'pad':
        x = _pad_shortcut(x, self.features, self.stride)
      else:
        x = Conv(self.features, 1, use_bias=False, name='shortcut')(
            x[:, ::self.stride, ::self.stride, :])
        x = _norm(self.norm, f'{prefix}_shortcut', self.features, train)(x)
    return nn.relu(x + y)


class ResNet(nn.Module):
  """CIFAR-style ResNet (He et al., 2016, §4.2): 3x3 stem, stages, global average pool, fc.

  `norm` and `shortcut` are described in `_norm` and `BasicBlock`. With 'bn' the model has
  batch statistics; `train=True` uses and updates them (models.get names such models *_bn).
  """
  num_classes: int
  stage_sizes: Sequence[int]
  widths: Sequence[int]
  norm: str = 'gn'
  shortcut: str = 'projection'

  @nn.compact
  def __call__(self, x, return_features=False, train=False):
    prefix = 'bn' if self.norm == 'bn' else 'gn'
    x = Conv(self.widths[0], 3, use_bias=False, name='stem')(x)
    x = nn.relu(_norm(self.norm, f'{prefix}_stem', self.widths[0], train)(x))
    for s, (blocks, width) in enumerate(zip(self.stage_sizes, self.widths)):
      for b in range(blocks):
        x = BasicBlock(width, 2 if (b == 0 and s > 0) else 1, self.norm, self.shortcut,
                       name=f'stage{s}_block{b}')(x, train)
    x = jnp.mean(x, axis=(1, 2))
    logits = nn.Dense(self.num_classes, name='head')(x)
    return (logits, x) if return_features else logits


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
  brightness, contrast) is not applied; initialisation is flax's default.
  """
  num_classes: int

  @nn.compact
  def __call__(self, x, return_features=False):
    x = per_image_standardization(center_crop(x, 24))
    x = nn.relu(Conv(64, 5, name='conv1')(x))
    x = local_response_norm(max_pool_3x3_s2(x))
    x = local_response_norm(nn.relu(Conv(64, 5, name='conv2')(x)))
    x = max_pool_3x3_s2(x).reshape(x.shape[0], -1)
    x = nn.relu(nn.Dense(384, name='fc1')(x))
    x = nn.relu(nn.Dense(192, name='fc2')(x))
    logits = nn.Dense(self.num_classes, name='head')(x)
    return (logits, x) if return_features else logits


OUTPUT_LAYERS = ('head', 'dense')  # the names every zoo model gives its last Dense layer


def _skip_output_layer(next_fun, args, kwargs, context):
  """flax method interceptor: the base model's own output layer becomes the identity."""
  m = context.module
  if (isinstance(m, nn.Dense) and context.method_name == '__call__' and m.name in OUTPUT_LAYERS
      and m.scope.path == ('base', m.name)):
    return args[0]
  return next_fun(*args, **kwargs)


class WithProjection(nn.Module):
  """A model with a projection head between its features and its output layer.

  MOON (Li et al. 2021, §3.2: base encoder, projection head, output layer) and FedGKD+ (FedGKD
  paper, §5.1: "the projection head adding before the classification layer", SimCLR's 2-layer
  MLP with 256 outputs): h = base features, z = W2 relu(W1 h), logits = classifier(z). The
  base's own output layer is skipped (it has no parameters here); `return_features` gives
  (logits, z).
  """
  base: nn.Module
  dim: int = 256

  @nn.compact
  def __call__(self, x, return_features=False):
    with nn.intercept_methods(_skip_output_layer):
      _, h = self.base(x, return_features=True)
    z = nn.Dense(self.dim, name='projection_dense1')(h)
    z = nn.Dense(self.dim, name='projection_dense2')(nn.relu(z))
    logits = nn.Dense(self.base.num_classes, name='classifier')(z)
    return (logits, z) if return_features else logits


def resnet8(num_classes):
  """FedGKD's ResNet-8 (§5.1): one block per stage, 1x1 projection shortcuts, GroupNorm with
  16 channels per group ("For all the CV tasks, we set the channels of each group as 16")."""
  return ResNet(num_classes, (1, 1, 1), (16, 32, 64), norm='gn16')


def resnet20(num_classes):  # ResNet-20's layout with the original GroupNorm rule
  return ResNet(num_classes, (3, 3, 3), (16, 32, 64))


def resnet20_bn(num_classes):
  """He et al.'s (2016, §4.2) CIFAR ResNet-20, as FedFOR uses it (App. D, "the proper ResNet
  implementation for CIFAR10"): BatchNorm after every conv, identity shortcuts with zero
  padding (option A), 0.27M parameters."""
  return ResNet(num_classes, (3, 3, 3), (16, 32, 64), norm='bn', shortcut='pad')


def resnet18(num_classes):  # the ImageNet ResNet-18 layout on 32x32 inputs
  return ResNet(num_classes, (2, 2, 2, 2), (64, 128, 256, 512))


# name -> (constructor, family); the family drives the client-parallelism choice.
MODELS = {
    'logreg': (LogReg, 'dense'),
    'mlp': (MLP, 'dense'),
    'cnn_mnist': (CNNMnist, 'conv'),
    'cnn_cifar': (CNNCifar, 'conv'),
    'mlp_bn': (MLPBN, 'dense'),
    'cnn_mnist_bn': (CNNMnistBN, 'conv'),
    'resnet8': (resnet8, 'conv'),
    'resnet18': (resnet18, 'conv'),
    'resnet20': (resnet20, 'conv'),
    'resnet20_bn': (resnet20_bn, 'conv'),
    'cnn_mcmahan_cifar': (CNNMcMahanCifar, 'conv'),
}

__all__ = ['MODELS', 'WithProjection', 'max_pool_2x2']

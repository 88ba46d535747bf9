"""The model zoo: flax modules mapping a batch of inputs to logits.

Inputs arrive as float32 (uint8 images already scaled to [0, 1]). Convolutional models take
NHWC images; dense models flatten whatever they get.
"""
from typing import Sequence

import jax.numpy as jnp
from flax import linen as nn

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
  return nn.GroupNorm(num_groups=min(32, channels) if channels % 32 == 0 else 2, name=name)


class BasicBlock(nn.Module):
  features: int
  stride: int = 1

  @nn.compact
  def __call__(self, x):
    y = Conv(self.features, 3, use_bias=False, name='conv1')(x)
    if self.stride == 2:
      y = y[:, ::2, ::2, :]  # stride-2 3x3 SAME conv == stride-1 conv, subsampled
    y = nn.relu(_group_norm('gn1', self.features)(y))
    y = Conv(self.features, 3, use_bias=False, name='conv2')(y)
    y = _group_norm('gn2', self.features)(y)
    if self.stride != 1 or x.shape[-1] != self.features:
      x = Conv(self.features, 1, use_bias=False, name='shortcut')(x[:, ::self.stride,
                                                                  ::self.stride, :])
      x = _group_norm('gn_shortcut', self.features)(x)
    return nn.relu(x + y)


class ResNet(nn.Module):
  """CIFAR-style ResNet with GroupNorm in place of BatchNorm (FedADC, FedGKD)."""
  num_classes: int
  stage_sizes: Sequence[int]
  widths: Sequence[int]

  @nn.compact
  def __call__(self, x, return_features=False):
    x = Conv(self.widths[0], 3, use_bias=False, name='stem')(x)
    x = nn.relu(_group_norm('gn_stem', self.widths[0])(x))
    for s, (blocks, width) in enumerate(zip(self.stage_sizes, self.widths)):
      for b in range(blocks):
        x = BasicBlock(width, 2 if (b == 0 and s > 0) else 1, name=f'stage{s}_block{b}')(x)
    x = jnp.mean(x, axis=(1, 2))
    logits = nn.Dense(self.num_classes, name='head')(x)
    return (logits, x) if return_features else logits


class WithProjection(nn.Module):
  """A model plus MOON's projection head: a 2-layer MLP on the penultimate features."""
  base: nn.Module
  dim: int = 256

  @nn.compact
  def __call__(self, x, return_features=False):
    logits, h = self.base(x, return_features=True)
    if not return_features:
      return logits
    z = nn.Dense(self.dim, name='projection_dense1')(h)
    z = nn.Dense(self.dim, name='projection_dense2')(nn.relu(z))
    return logits, z


def resnet8(num_classes):  # FedGKD's ResNet-8: 3 stages of one block
  return ResNet(num_classes, (1, 1, 1), (16, 32, 64))


def resnet20(num_classes):  # He et al.'s CIFAR ResNet-20
  return ResNet(num_classes, (3, 3, 3), (16, 32, 64))


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
}

__all__ = ['MODELS', 'WithProjection', 'max_pool_2x2']

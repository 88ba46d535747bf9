"""The papers' ResNets: CIFAR-style ResNet-8/18/20 (GroupNorm or BatchNorm) and FedGKD's
bottleneck ResNet-50.

Initialisation: with --init=default, flax's lecun-normal convolutions (ResNet-50: FedGKD's
fan-out normal, always); with --init=torch, as the papers' code does: FedGKD's
`_weight_initialization` (CGCL-codes/FedGKD pcode/models/resnet.py: conv kernels
N(0, 2 / (k * k * out_channels)), norm layers 1 and 0, nn.Linear's default) for the GroupNorm
ResNets and ResNet-50, and for `resnet20_bn` (FedFOR: "the proper ResNet implementation for
CIFAR10", akamaster/pytorch_resnet_cifar10 resnet.py `_weights_init`) kaiming_normal_ with
fan-in, N(0, 2 / fan_in), on conv and linear weights.
"""
from typing import Any, Sequence

import jax.numpy as jnp
from flax import linen as nn

from fedjax_drift import registry
from fedjax_drift.models.info import ModelInfo
from fedjax_drift.models.layers import Conv, StridedConv, current_init_scheme, dense
from fedjax_drift.models.norms import FLAX_GN_EPS, TORCH_EPS, norm_maker

# He initialisation with fan-out, not truncated: FedGKD's `_weight_initialization` draws conv
# kernels from N(0, 2 / (k * k * out_channels)) (pcode/models/resnet.py).
FAN_OUT_NORMAL = nn.initializers.variance_scaling(2.0, 'fan_out', 'normal')
# torch's kaiming_normal_ defaults (fan_in, gain sqrt(2)): N(0, 2 / fan_in), not truncated.
FAN_IN_NORMAL = nn.initializers.variance_scaling(2.0, 'fan_in', 'normal')

# The code whose initialisation --init=torch follows -> (conv kernel init, linear kernel init;
# None = nn.Linear's default).
PAPER_INITS = {'fedgkd': (FAN_OUT_NORMAL, None), 'akamaster': (FAN_IN_NORMAL, FAN_IN_NORMAL)}


def _paper_inits(code):
  """(conv kernel init, linear kernel init) for the model whose torch code is `code`: the
  code's own in a 'torch' init scope, (None, None) (the scope's defaults) otherwise."""
  return PAPER_INITS[code] if current_init_scheme() == 'torch' else (None, None)


def _pad_shortcut(x, features, stride):
  """He et al.'s option A: identity, subsampled by the stride, zero-padded to `features`."""
  x = x[:, ::stride, ::stride, :]
  extra = features - x.shape[-1]
  return jnp.pad(x, ((0, 0), (0, 0), (0, 0), (extra // 2, extra - extra // 2)))


class BasicBlock(nn.Module):
  """conv3x3 -> norm -> ReLU -> conv3x3 -> norm, plus the shortcut, then ReLU.

  A stride-2 3x3 SAME conv equals the stride-1 conv subsampled at even positions (PyTorch's
  padding=1 convention). The shortcut is a 1x1 conv + norm ('projection', option B) or the
  zero-padded identity ('pad', option A) when the shape changes. gn_groups, gn_group_size,
  gn_eps: see norms.norm; conv_init: the kernels' initializer (None: the init scope's).
  """
  features: int
  stride: int = 1
  norm: str = 'gn'
  shortcut: str = 'projection'
  gn_groups: int = 0
  gn_group_size: int = 0
  gn_eps: float = FLAX_GN_EPS
  conv_init: Any = None

  @nn.compact
  def __call__(self, x, train=False):
    norm = norm_maker(self, train)
    init = self.conv_init
    y = Conv(self.features, 3, use_bias=False, kernel_init=init, name='conv1')(x)
    if self.stride == 2:
      y = y[:, ::2, ::2, :]
    y = nn.relu(norm('1', self.features)(y))
    y = Conv(self.features, 3, use_bias=False, kernel_init=init, name='conv2')(y)
    y = norm('2', self.features)(y)
    if self.stride != 1 or x.shape[-1] != self.features:
      if self.shortcut == 'pad':
        x = _pad_shortcut(x, self.features, self.stride)
      else:
        x = Conv(self.features, 1, use_bias=False, kernel_init=init, name='shortcut')(
            x[:, ::self.stride, ::self.stride, :])
        x = norm('_shortcut', self.features)(x)
    return nn.relu(x + y)


class ResNet(nn.Module):
  """CIFAR-style ResNet (He et al., 2016, §4.2): 3x3 stem, stages, global average pool, fc.

  `norm`, `shortcut`, `gn_groups`, `gn_group_size` and `gn_eps` are described in norms.norm
  and `BasicBlock`. With 'bn' the model has batch statistics; `train=True` uses and updates
  them (models.get names such models *_bn). `code`: whose initialisation --init=torch follows
  (PAPER_INITS).
  """
  num_classes: int
  stage_sizes: Sequence[int]
  widths: Sequence[int]
  norm: str = 'gn'
  shortcut: str = 'projection'
  gn_groups: int = 0
  gn_group_size: int = 0
  gn_eps: float = FLAX_GN_EPS
  code: str = 'fedgkd'

  @nn.compact
  def __call__(self, x, return_features=False, train=False):
    conv_init, linear_init = _paper_inits(self.code)
    x = Conv(self.widths[0], 3, use_bias=False, kernel_init=conv_init, name='stem')(x)
    x = nn.relu(norm_maker(self, train)('_stem', self.widths[0])(x))
    for s, (blocks, width) in enumerate(zip(self.stage_sizes, self.widths)):
      for b in range(blocks):
        x = BasicBlock(width, 2 if (b == 0 and s > 0) else 1, self.norm, self.shortcut,
                       self.gn_groups, self.gn_group_size, self.gn_eps, conv_init,
                       name=f'stage{s}_block{b}')(x, train)
    x = jnp.mean(x, axis=(1, 2))
    logits = dense(x, self.num_classes, 'head', linear_init)
    return (logits, x) if return_features else logits


class Bottleneck(nn.Module):
  """1x1 -> norm -> ReLU -> 3x3 (stride) -> norm -> ReLU -> 1x1 (4x) -> norm, + shortcut, ReLU.

  As FedGKD's `Bottleneck` (pcode/models/resnet.py): the stride sits on the 3x3 conv (torch
  padding 1), and the shortcut is a strided 1x1 conv + norm whenever the shape changes
  (He et al.'s option B), else the identity. Conv kernels: FAN_OUT_NORMAL, as their code.
  """
  features: int
  stride: int = 1
  norm: str = 'gn16'
  gn_groups: int = 0
  gn_group_size: int = 0
  gn_eps: float = TORCH_EPS

  @nn.compact
  def __call__(self, x, train=False):
    norm = norm_maker(self, train)
    out, init = 4 * self.features, FAN_OUT_NORMAL
    y = Conv(self.features, 1, use_bias=False, kernel_init=init, name='conv1')(x)
    y = nn.relu(norm('1', self.features)(y))
    if self.stride == 1:
      y = Conv(self.features, 3, use_bias=False, kernel_init=init, name='conv2')(y)
    else:
      y = StridedConv(self.features, 3, self.stride, 1, use_bias=False, kernel_init=init,
                      name='conv2')(y)
    y = nn.relu(norm('2', self.features)(y))
    y = norm('3', out)(Conv(out, 1, use_bias=False, kernel_init=init, name='conv3')(y))
    if self.stride != 1 or x.shape[-1] != out:
      x = x[:, ::self.stride, ::self.stride, :]  # a strided 1x1 conv reads these positions
      x = Conv(out, 1, use_bias=False, kernel_init=init, name='shortcut')(x)
      x = norm('_shortcut', out)(x)
    return nn.relu(x + y)


class ResNet50(nn.Module):
  """Bottleneck ResNet-50 (3-4-6-3 blocks, expansion 4) with FedGKD's 3x3 stride-1 stem.

  He et al. (2016) Table 1's ResNet-50 as FedGKD trains it on Tiny-ImageNet (§5.1, Table 3):
  their `ResNet_imagenet` (CGCL-codes/FedGKD pcode/models/resnet.py) replaces the 7x7/2 stem
  and its max-pool (both commented out there) with a 3x3 stride-1 conv, so 64x64 inputs keep
  their size through stage 1. Stages of 64, 128, 256, 512 (x4) channels, strides 1, 2, 2, 2,
  global average pooling, fc-C. `norm`: 'gn16' (FedGKD: 16 channels per group) or 'bn'
  (FedGKD §5.1 uses BN with MOON and FedGKD+: "if GN is used in ResNet-50 and a 2-layer MLP is
  added, the model will not converge"). Conv kernels are initialised as in their code; GroupNorm
  has torch's ε.
  """
  num_classes: int
  norm: str = 'gn16'
  gn_groups: int = 0
  gn_group_size: int = 0
  gn_eps: float = TORCH_EPS
  stage_sizes: Sequence[int] = (3, 4, 6, 3)

  @nn.compact
  def __call__(self, x, return_features=False, train=False):
    x = Conv(64, 3, use_bias=False, kernel_init=FAN_OUT_NORMAL, name='stem')(x)
    x = nn.relu(norm_maker(self, train)('_stem', 64)(x))
    for s, (blocks, width) in enumerate(zip(self.stage_sizes, (64, 128, 256, 512))):
      for b in range(blocks):
        x = Bottleneck(width, 2 if (b == 0 and s > 0) else 1, self.norm, self.gn_groups,
                       self.gn_group_size, self.gn_eps, name=f'stage{s}_block{b}')(x, train)
    x = jnp.mean(x, axis=(1, 2))
    logits = dense(x, self.num_classes, 'head')
    return (logits, x) if return_features else logits


def _eps(gn_eps, own):
  """--gn_eps (-1 = the model's own ε `own`)."""
  return own if gn_eps < 0 else gn_eps


def resnet8(num_classes, gn_groups=0, gn_group_size=0, gn_eps=-1.0):
  """FedGKD's ResNet-8 (§5.1): one block per stage, 1x1 projection shortcuts, GroupNorm with
  16 channels per group ("For all the CV tasks, we set the channels of each group as 16") and
  torch's ε, as their code."""
  return ResNet(num_classes, (1, 1, 1), (16, 32, 64), norm='gn16', gn_groups=gn_groups,
                gn_group_size=gn_group_size, gn_eps=_eps(gn_eps, TORCH_EPS))


def resnet20(num_classes, gn_groups=0, gn_group_size=0, gn_eps=-1.0):
  """ResNet-20's layout with the original GroupNorm rule (flax's ε)."""
  return ResNet(num_classes, (3, 3, 3), (16, 32, 64), gn_groups=gn_groups,
                gn_group_size=gn_group_size, gn_eps=_eps(gn_eps, FLAX_GN_EPS))


def resnet20_bn(num_classes):
  """He et al.'s (2016, §4.2) CIFAR ResNet-20, as FedFOR uses it (App. D, "the proper ResNet
  implementation for CIFAR10"): BatchNorm after every conv, identity shortcuts with zero
  padding (option A), 0.27M parameters."""
  return ResNet(num_classes, (3, 3, 3), (16, 32, 64), norm='bn', shortcut='pad',
                code='akamaster')


def resnet18(num_classes, gn_groups=0, gn_group_size=0, gn_eps=-1.0):
  """The ImageNet ResNet-18 layout on 32x32 inputs (FedADC, CIFAR-100), GroupNorm (flax's ε)."""
  return ResNet(num_classes, (2, 2, 2, 2), (64, 128, 256, 512), gn_groups=gn_groups,
                gn_group_size=gn_group_size, gn_eps=_eps(gn_eps, FLAX_GN_EPS))


def resnet50_gn(num_classes, gn_groups=0, gn_group_size=0, gn_eps=-1.0):
  """FedGKD's ResNet-50 with GroupNorm, 16 channels per group (Tiny-ImageNet, §5.1).

  See `ResNet50`; --gn_groups / --gn_group_size replace the grouping, --gn_eps the ε.
  """
  return ResNet50(num_classes, 'gn16', gn_groups, gn_group_size, _eps(gn_eps, TORCH_EPS))


def resnet50_bn(num_classes):
  """FedGKD's ResNet-50 with BatchNorm, for MOON and FedGKD+ on Tiny-ImageNet (§5.1)."""
  return ResNet50(num_classes, 'bn')


# --- Registration -----------------------------------------------------------------------------
# build(values, num_classes, **shapes) -> the flax module; info: a ModelInfo (family 'conv';
# BatchNorm or the BatchNorm twin).
GN_READS = ('gn_groups', 'gn_group_size', 'gn_eps')


def _gn(make):
  """The build of a GroupNorm ResNet: its GN_READS are --gn_groups, --gn_group_size, --gn_eps."""
  return lambda v, num_classes, **_: make(num_classes, v.gn_groups, v.gn_group_size, v.gn_eps)


def _plain(make):
  return lambda values, num_classes, **_: make(num_classes)


registry.register('model', 'resnet8', 'CIFAR ResNet-8 with GroupNorm (FedGKD): 3 stages of one '
                  'block', GN_READS, _gn(resnet8), info=ModelInfo('conv'))
registry.register('model', 'resnet18', 'the ResNet-18 layout on 32x32 inputs, GroupNorm',
                  GN_READS, _gn(resnet18), info=ModelInfo('conv'))
registry.register('model', 'resnet20', 'He et al.\'s CIFAR ResNet-20, GroupNorm', GN_READS,
                  _gn(resnet20), info=ModelInfo('conv', twin='resnet20_bn'))
registry.register('model', 'resnet20_bn', 'He et al.\'s CIFAR ResNet-20 with BatchNorm, option A '
                  'shortcuts (FedFOR)', build=_plain(resnet20_bn),
                  info=ModelInfo('conv', batchnorm=True))
registry.register('model', 'resnet50_gn', 'FedGKD\'s ResNet-50 with GroupNorm, 16 channels per '
                  'group (Tiny-ImageNet, §5.1)', GN_READS, _gn(resnet50_gn),
                  info=ModelInfo('conv'))
registry.register('model', 'resnet50_bn', 'FedGKD\'s ResNet-50 with BatchNorm, for MOON and '
                  'FedGKD+ on Tiny-ImageNet (§5.1)', build=_plain(resnet50_bn),
                  info=ModelInfo('conv', batchnorm=True))

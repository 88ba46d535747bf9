"""The model zoo: flax modules mapping a batch of inputs to logits.

Inputs arrive as float32 (uint8 images already scaled to [0, 1]). Convolutional models take
NHWC images; dense models flatten whatever they get. Text models (models/text.py, family
'text') take int32 [B, 2, L] token ids and attention masks.
"""
import inspect
from typing import Any, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

from fedjax_drift.errors import UserError
from fedjax_drift.models import onednn, text
from fedjax_drift.models.layers import Conv, ConvReluPool, current_conv_impl, max_pool_2x2


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


def gn_num_groups(channels, groups=0, group_size=0):
  """The number of GroupNorm groups for a layer of `channels` under --gn_groups/--gn_group_size.

  groups > 0: that many groups; group_size > 0: channels / group_size groups; both 0: None (the
  model's own rule). Raises UserError naming the flag when the channels do not divide evenly.
  """
  if groups and group_size:
    raise UserError(f'--gn_groups={groups} and --gn_group_size={group_size} conflict: give '
                    'only one of them')
  if groups:
    if channels % groups:
      raise UserError(f'--gn_groups={groups} does not divide a GroupNorm layer of {channels} '
                      'channels')
    return groups
  if group_size:
    if channels % group_size:
      raise UserError(f'--gn_group_size={group_size} does not divide a GroupNorm layer of '
                      f'{channels} channels')
    return channels // group_size
  return None


def _norm(kind, name, channels, train, groups=0, group_size=0):
  """One normalisation layer after a convolution.

  'gn16': GroupNorm with 16 channels per group (FedGKD §5.1: "we set the channels of each
  group as 16"; their code's `norm2d` makes planes // 16 groups); 'bn': BatchNorm as in He et
  al. (2016) §3.4, flax momentum 0.9 (PyTorch's 0.1); 'gn': the original rule of
  `_group_norm`. For the GroupNorm kinds, groups / group_size (--gn_groups / --gn_group_size,
  see `gn_num_groups`) replace the kind's own rule when set.
  """
  if kind == 'bn':
    return nn.BatchNorm(use_running_average=not train, momentum=0.9, name=name)
  override = gn_num_groups(channels, groups, group_size)
  if override:
    return nn.GroupNorm(num_groups=override, name=name)
  if kind == 'gn16':
    return nn.GroupNorm(num_groups=max(1, channels // 16), name=name)
  return _group_norm(name, channels)


def _norm_maker(module, train):
  """norm(suffix, channels) -> the norm layer `module` uses (its fields norm, gn_groups,
  gn_group_size; see `_norm`), named 'bn<suffix>' for BatchNorm and 'gn<suffix>' otherwise:
  FedBN finds norm layers by the 'bn' prefix."""
  prefix = 'bn' if module.norm == 'bn' else 'gn'
  return lambda suffix, channels: _norm(module.norm, f'{prefix}{suffix}', channels, train,
                                        module.gn_groups, module.gn_group_size)


def _pad_shortcut(x, features, stride):
  """He et al.'s option A: identity, subsampled by the stride, zero-padded to `features`."""
  x = x[:, ::stride, ::stride, :]
  extra = features - x.shape[-1]
  return jnp.pad(x, ((0, 0), (0, 0), (0, 0), (extra // 2, extra - extra // 2)))


class BasicBlock(nn.Module):
  """conv3x3 -> norm -> ReLU -> conv3x3 -> norm, plus the shortcut, then ReLU.

  A stride-2 3x3 SAME conv equals the stride-1 conv subsampled at even positions (PyTorch's
  padding=1 convention). The shortcut is a 1x1 conv + norm ('projection', option B) or the
  zero-padded identity ('pad', option A) when the shape changes. gn_groups / gn_group_size:
  see `_norm`.
  """
  features: int
  stride: int = 1
  norm: str = 'gn'
  shortcut: str = 'projection'
  gn_groups: int = 0
  gn_group_size: int = 0

  @nn.compact
  def __call__(self, x, train=False):
    norm = _norm_maker(self, train)
    y = Conv(self.features, 3, use_bias=False, name='conv1')(x)
    if self.stride == 2:
      y = y[:, ::2, ::2, :]
    y = nn.relu(norm('1', self.features)(y))
    y = Conv(self.features, 3, use_bias=False, name='conv2')(y)
    y = norm('2', self.features)(y)
    if self.stride != 1 or x.shape[-1] != self.features:
      if self.shortcut == 'pad':
        x = _pad_shortcut(x, self.features, self.stride)
      else:
        x = Conv(self.features, 1, use_bias=False, name='shortcut')(
            x[:, ::self.stride, ::self.stride, :])
        x = norm('_shortcut', self.features)(x)
    return nn.relu(x + y)


class ResNet(nn.Module):
  """CIFAR-style ResNet (He et al., 2016, §4.2): 3x3 stem, stages, global average pool, fc.

  `norm`, `shortcut`, `gn_groups` and `gn_group_size` are described in `_norm` and
  `BasicBlock`. With 'bn' the model has batch statistics; `train=True` uses and updates them
  (models.get names such models *_bn).
  """
  num_classes: int
  stage_sizes: Sequence[int]
  widths: Sequence[int]
  norm: str = 'gn'
  shortcut: str = 'projection'
  gn_groups: int = 0
  gn_group_size: int = 0

  @nn.compact
  def __call__(self, x, return_features=False, train=False):
    x = Conv(self.widths[0], 3, use_bias=False, name='stem')(x)
    x = nn.relu(_norm_maker(self, train)('_stem', self.widths[0])(x))
    for s, (blocks, width) in enumerate(zip(self.stage_sizes, self.widths)):
      for b in range(blocks):
        x = BasicBlock(width, 2 if (b == 0 and s > 0) else 1, self.norm, self.shortcut,
                       self.gn_groups, self.gn_group_size, name=f'stage{s}_block{b}')(x, train)
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


# --- Strided convolution and pooling in PyTorch's conventions (FedBN's AlexNet, ResNet-50). ---

def conv2d_strided(x, kernel, stride, padding, impl):
  """torch's Conv2d(stride, padding) of NHWC `x` with an HWIO `kernel`, bias excluded.

  im2col takes the patches with strided slices, so only the output positions are gathered
  (a stride-1 conv subsampled afterwards would compute stride^2 times the work); lax passes
  the stride to `lax.conv_general_dilated`, onednn to oneDNN's convolution. Output size:
  (H + 2 padding - k) // stride + 1.
  """
  k, _, c, f = kernel.shape
  pads = ((padding, padding), (padding, padding))
  if impl == 'lax':
    return jax.lax.conv_general_dilated(x, kernel, (stride, stride), pads,
                                        dimension_numbers=('NHWC', 'HWIO', 'NHWC'))
  if impl == 'onednn':
    return onednn.conv(x, kernel, (stride, stride), pads)
  if impl != 'im2col':
    raise ValueError(f'conv2d_strided: impl must be im2col, lax or onednn, got {impl!r}')
  x = jnp.pad(x, ((0, 0),) + pads + ((0, 0),))
  oh, ow = (x.shape[1] - k) // stride + 1, (x.shape[2] - k) // stride + 1
  patches = jnp.concatenate(
      [x[:, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride, :]
       for i in range(k) for j in range(k)], -1)  # ordered (kh, kw, c) like an HWIO kernel
  return patches @ kernel.reshape(k * k * c, f)


class StridedConv(nn.Module):
  """A 2-D convolution with a stride and explicit zero padding (torch's Conv2d arguments).

  Computed as `layers.Conv` is: im2col + GEMM, lax.conv or oneDNN, as the enclosing
  --conv_impl scope says (models/layers.py).
  """
  features: int
  kernel_size: int
  stride: int
  padding: int
  use_bias: bool = True
  kernel_init: Any = nn.initializers.lecun_normal()

  @nn.compact
  def __call__(self, x):
    k = self.kernel_size
    kernel = self.param('kernel', self.kernel_init, (k, k, x.shape[-1], self.features))
    y = conv2d_strided(x, kernel, self.stride, self.padding, current_conv_impl())
    if self.use_bias:
      y = y + self.param('bias', nn.initializers.zeros, (self.features,))
    return y


def max_pool_valid(x, size, stride):
  """torch's MaxPool2d(size, stride) (no padding, floor) of NHWC `x`, as a max of slices."""
  h, w = x.shape[1], x.shape[2]
  if h < size or w < size:
    raise ValueError(f'max_pool_valid: a {h}x{w} map is smaller than the {size}x{size} window')
  oh, ow = (h - size) // stride + 1, (w - size) // stride + 1
  out = None
  for i in range(size):
    for j in range(size):
      s = x[:, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride, :]
      out = s if out is None else jnp.maximum(out, s)
  return out


def _adaptive_weights(size, out):
  """[out, size] averaging matrix of torch's AdaptiveAvgPool: bin i covers
  [floor(i size / out), ceil((i + 1) size / out))."""
  m = np.zeros((out, size), np.float32)
  for i in range(out):
    lo, hi = (i * size) // out, -(-((i + 1) * size) // out)
    m[i, lo:hi] = 1.0 / (hi - lo)
  return m


def adaptive_avg_pool(x, out):
  """torch's AdaptiveAvgPool2d((out, out)) of NHWC `x` (bins overlap or repeat as torch's do)."""
  mh, mw = _adaptive_weights(x.shape[1], out), _adaptive_weights(x.shape[2], out)
  return jnp.einsum('ih,bhwc,jw->bijc', mh, x, mw)


def _batch_norm(name, train):
  """BatchNorm as FedBN's torch models have it: momentum 0.1 in torch = 0.9 in flax, eps 1e-5."""
  return nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5, name=name)


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
    x = max_pool_valid(nn.relu(_batch_norm('bn1', train)(x)), 3, 2)
    x = Conv(192, 5, name='conv2')(x)  # torch padding 2 = SAME for a 5x5 kernel
    x = max_pool_valid(nn.relu(_batch_norm('bn2', train)(x)), 3, 2)
    for i, width in ((3, 384), (4, 256), (5, 256)):
      x = nn.relu(_batch_norm(f'bn{i}', train)(Conv(width, 3, name=f'conv{i}')(x)))
    x = adaptive_avg_pool(max_pool_valid(x, 3, 2), 6)
    x = x.reshape(x.shape[0], -1)
    x = nn.relu(_batch_norm('bn6', train)(nn.Dense(4096, name='fc1')(x)))
    x = nn.relu(_batch_norm('bn7', train)(nn.Dense(4096, name='fc2')(x)))
    logits = nn.Dense(self.num_classes, name='head')(x)
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
      x = nn.relu(_batch_norm(f'bn{i + 1}', train)(x))
      if i < 2:
        x = max_pool_2x2(x)
    x = x.reshape(x.shape[0], -1)
    x = nn.relu(_batch_norm('bn4', train)(nn.Dense(2048, name='fc1')(x)))
    x = nn.relu(_batch_norm('bn5', train)(nn.Dense(512, name='fc2')(x)))
    logits = nn.Dense(self.num_classes, name='head')(x)
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
    x = nn.relu(nn.Dense(128, name='fc1')(x.reshape(x.shape[0], -1)))
    x = nn.Dropout(self.rates[1], deterministic=deterministic)(x)
    logits = nn.Dense(self.num_classes, name='head')(x)
    return (logits, x) if return_features else logits


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
      x = nn.relu(nn.Dense(h, name=f'fc{i + 1}')(x))
    logits = nn.Dense(self.num_classes, name='head')(x)
    return (logits, x) if return_features else logits


# He initialisation with fan-out, not truncated: FedGKD's `_weight_initialization` draws conv
# kernels from N(0, 2 / (k * k * out_channels)) (pcode/models/resnet.py).
_FAN_OUT_NORMAL = nn.initializers.variance_scaling(2.0, 'fan_out', 'normal')


class Bottleneck(nn.Module):
  """1x1 -> norm -> ReLU -> 3x3 (stride) -> norm -> ReLU -> 1x1 (4x) -> norm, + shortcut, ReLU.

  As FedGKD's `Bottleneck` (pcode/models/resnet.py): the stride sits on the 3x3 conv (torch
  padding 1), and the shortcut is a strided 1x1 conv + norm whenever the shape changes
  (He et al.'s option B), else the identity.
  """
  features: int
  stride: int = 1
  norm: str = 'gn16'
  gn_groups: int = 0
  gn_group_size: int = 0

  @nn.compact
  def __call__(self, x, train=False):
    norm = _norm_maker(self, train)
    out, init = 4 * self.features, _FAN_OUT_NORMAL
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
  added, the model will not converge"). Conv kernels are initialised as in their code.
  """
  num_classes: int
  norm: str = 'gn16'
  gn_groups: int = 0
  gn_group_size: int = 0
  stage_sizes: Sequence[int] = (3, 4, 6, 3)

  @nn.compact
  def __call__(self, x, return_features=False, train=False):
    x = Conv(64, 3, use_bias=False, kernel_init=_FAN_OUT_NORMAL, name='stem')(x)
    x = nn.relu(_norm_maker(self, train)('_stem', 64)(x))
    for s, (blocks, width) in enumerate(zip(self.stage_sizes, (64, 128, 256, 512))):
      for b in range(blocks):
        x = Bottleneck(width, 2 if (b == 0 and s > 0) else 1, self.norm, self.gn_groups,
                       self.gn_group_size, name=f'stage{s}_block{b}')(x, train)
    x = jnp.mean(x, axis=(1, 2))
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


def takes_train(module):
  """Whether `module`'s __call__ has a `train` argument (BatchNorm statistics, dropout)."""
  return 'train' in inspect.signature(type(module).__call__).parameters


class WithProjection(nn.Module):
  """A model with a projection head between its features and its output layer.

  MOON (Li et al. 2021, §3.2: base encoder, projection head, output layer) and FedGKD+ (FedGKD
  paper, §5.1: "the projection head adding before the classification layer", SimCLR's 2-layer
  MLP with 256 outputs): h = base features, z = W2 relu(W1 h), logits = classifier(z). The
  base's own output layer is skipped (it has no parameters here); `return_features` gives
  (logits, z). `dim` is z's width; `hidden` is W1's width, 0 = h's width as both codes have
  it (QinbinLi/MOON model.py `ModelFedCon`: l1 = Linear(num_ftrs, num_ftrs), l2 =
  Linear(num_ftrs, out_dim); CGCL-codes/FedGKD pcode/models/resnet.py `projection_layer`:
  Linear(feature_dim, feature_dim), ReLU, Linear(feature_dim, 256)). `train` reaches the base
  when it has BatchNorm statistics or dropout; the head has neither.
  """
  base: nn.Module
  dim: int = 256
  hidden: int = 0

  @nn.compact
  def __call__(self, x, return_features=False, train=False):
    kwargs = {'train': train} if takes_train(self.base) else {}
    with nn.intercept_methods(_skip_output_layer):
      _, h = self.base(x, return_features=True, **kwargs)
    z = nn.Dense(self.hidden or h.shape[-1], name='projection_dense1')(h)
    z = nn.Dense(self.dim, name='projection_dense2')(nn.relu(z))
    logits = nn.Dense(self.base.num_classes, name='classifier')(z)
    return (logits, z) if return_features else logits


def resnet8(num_classes, gn_groups=0, gn_group_size=0):
  """FedGKD's ResNet-8 (§5.1): one block per stage, 1x1 projection shortcuts, GroupNorm with
  16 channels per group ("For all the CV tasks, we set the channels of each group as 16")."""
  return ResNet(num_classes, (1, 1, 1), (16, 32, 64), norm='gn16', gn_groups=gn_groups,
                gn_group_size=gn_group_size)


def resnet20(num_classes, gn_groups=0, gn_group_size=0):
  """ResNet-20's layout with the original GroupNorm rule."""
  return ResNet(num_classes, (3, 3, 3), (16, 32, 64), gn_groups=gn_groups,
                gn_group_size=gn_group_size)


def resnet20_bn(num_classes):
  """He et al.'s (2016, §4.2) CIFAR ResNet-20, as FedFOR uses it (App. D, "the proper ResNet
  implementation for CIFAR10"): BatchNorm after every conv, identity shortcuts with zero
  padding (option A), 0.27M parameters."""
  return ResNet(num_classes, (3, 3, 3), (16, 32, 64), norm='bn', shortcut='pad')


def resnet18(num_classes, gn_groups=0, gn_group_size=0):
  """The ImageNet ResNet-18 layout on 32x32 inputs (FedADC, CIFAR-100), GroupNorm."""
  return ResNet(num_classes, (2, 2, 2, 2), (64, 128, 256, 512), gn_groups=gn_groups,
                gn_group_size=gn_group_size)


def resnet50_gn(num_classes, gn_groups=0, gn_group_size=0):
  """FedGKD's ResNet-50 with GroupNorm, 16 channels per group (Tiny-ImageNet, §5.1).

  See `ResNet50`; --gn_groups / --gn_group_size replace the grouping.
  """
  return ResNet50(num_classes, 'gn16', gn_groups, gn_group_size)


def resnet50_bn(num_classes):
  """FedGKD's ResNet-50 with BatchNorm, for MOON and FedGKD+ on Tiny-ImageNet (§5.1)."""
  return ResNet50(num_classes, 'bn')


def cnn_emnist(num_classes, dropout=-1.0):
  """Reddi et al.'s (2021) EMNIST CNN: conv3x3-32, conv3x3-64, pool, fc-128, fc-C, dropout.

  See `CNNEmnist`. dropout (--dropout): -1 keeps its rates 0.25 and 0.5, 0 turns dropout off,
  p in (0, 1) sets both rates to p.
  """
  return CNNEmnist(num_classes, (0.25, 0.5) if dropout < 0 else (dropout, dropout))


# name -> (constructor, family); the family drives the client-parallelism choice. A
# constructor's keyword arguments beyond num_classes (dropout, gn_groups, gn_group_size) are
# the options models.get passes from the flags of the same names.
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
    'resnet50_gn': (resnet50_gn, 'conv'),
    'resnet50_bn': (resnet50_bn, 'conv'),
    'alexnet_bn': (AlexNetBN, 'conv'),
    'digit_cnn_bn': (DigitCNNBN, 'conv'),
    'cnn_emnist': (cnn_emnist, 'conv'),
    'cnn_cifar_moon': (CNNCifarMoon, 'conv'),
    # Text (models/text.py): int32 [B, 2, L] token ids and attention mask; models.get passes
    # vocab_size and seq_len (and --pretrained to distilbert).
    'distilbert': (text.distilbert, 'text'),
    'text_bag': (text.text_bag, 'text'),
    'text_transformer': (text.text_transformer, 'text'),
}

__all__ = ['MODELS', 'WithProjection', 'max_pool_2x2']

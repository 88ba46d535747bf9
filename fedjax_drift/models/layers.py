"""Layers written for XLA:CPU's strengths (see ../shared/PERF-NOTES.md and benchmarks/).

On this CPU, autodiff of `lax.conv_general_dilated` inside loops is about 28x slower than a GEMM
for the kernel gradient, and flax's max-pool backward is slow. So convolutions are im2col
(shifted slices, concatenated) followed by one matmul, and 2x2 max-pooling is the max of four
strided slices. Both are exact re-expressions of the usual ops (tests/test_models.py checks them
against lax.conv and nn.max_pool), and their gradients are only slices, pads and GEMMs.
"""
from typing import Any

import jax.numpy as jnp
from flax import linen as nn


def im2col(x, kernel_size, padding):
  """[B, H, W, C] -> [B, H', W', k*k*C] patches, ordered (kh, kw, c) like an HWIO kernel."""
  k = kernel_size
  if padding == 'SAME':
    lo = (k - 1) // 2
    x = jnp.pad(x, ((0, 0), (lo, k - 1 - lo), (lo, k - 1 - lo), (0, 0)))
  elif padding != 'VALID':
    raise ValueError(f'padding must be SAME or VALID, got {padding}')
  h, w = x.shape[1] - k + 1, x.shape[2] - k + 1
  return jnp.concatenate([x[:, i:i + h, j:j + w, :] for i in range(k) for j in range(k)], -1)


def max_pool_2x2(x):
  """2x2/stride-2 max-pooling (VALID) as the max of four strided slices."""
  h, w = x.shape[1] // 2 * 2, x.shape[2] // 2 * 2
  x = x[:, :h, :w, :]
  return jnp.maximum(jnp.maximum(x[:, 0::2, 0::2], x[:, 0::2, 1::2]),
                     jnp.maximum(x[:, 1::2, 0::2], x[:, 1::2, 1::2]))


class Conv(nn.Module):
  """Stride-1 2-D convolution (NHWC, HWIO kernel) computed as im2col + GEMM."""
  features: int
  kernel_size: int = 3
  padding: str = 'SAME'
  use_bias: bool = True
  kernel_init: Any = nn.initializers.lecun_normal()

  @nn.compact
  def __call__(self, x):
    k, c = self.kernel_size, x.shape[-1]
    kernel = self.param('kernel', self.kernel_init, (k, k, c, self.features))
    y = im2col(x, k, self.padding) @ kernel.reshape(k * k * c, self.features)
    if self.use_bias:
      y = y + self.param('bias', nn.initializers.zeros, (self.features,))
    return y


class ConvReluPool(nn.Module):
  """conv -> ReLU -> 2x2 max-pool, computed as conv -> pool -> bias -> ReLU.

  Max-pooling commutes with adding a per-channel bias and with the monotone ReLU, so this is
  the same function; pooling first makes the bias, ReLU and their gradients 4x cheaper.
  """
  features: int
  kernel_size: int = 5

  @nn.compact
  def __call__(self, x):
    y = Conv(self.features, self.kernel_size, use_bias=False, name='conv')(x)
    bias = self.param('bias', nn.initializers.zeros, (self.features,))
    return nn.relu(max_pool_2x2(y) + bias)

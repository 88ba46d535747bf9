"""Layers written for XLA:CPU's strengths (measured in benchmarks/).

On this CPU, autodiff of `lax.conv_general_dilated` inside loops is about 28x slower than a GEMM
for the kernel gradient, and flax's max-pool backward is slow. So convolutions are im2col
(shifted slices, concatenated) followed by one matmul, and 2x2 max-pooling is the max of four
strided slices. Both are exact re-expressions of the usual ops (tests/test_layers.py checks them
against lax.conv and nn.max_pool), and their gradients are only slices, pads and GEMMs. Two
refinements came from profiling the MNIST CNN's round op by op: the pooling has a custom VJP
(masks, no recomputed maxima), and image layers with 1-3 channels build their patches
transposed (`conv2d_few_channels`).

On GPU and TPU the native convolution (cuDNN, the TPU's MXU) is the better choice, so the
convolution is selectable (`--conv_impl`):
  im2col  patches + one GEMM (the CPU fallback)
  lax     `lax.conv_general_dilated` (the GPU/TPU default)
  onednn  oneDNN's convolution primitives as XLA custom calls (CPU; models/onednn.py), where
          the extension builds; elsewhere the run says so in one line and uses im2col (CPU)
          or lax (GPU/TPU)
  auto    onednn on CPUs where the extension builds (x86-64 Linux with `pip install
          ".[onednn]"` and g++), else im2col, saying why once; lax on GPU/TPU
          (`resolve_conv_impl`): the interleaved bench (benchmarks/bench.py) measured onednn
          faster than im2col and the torch loop on the MNIST and CIFAR CNNs (README)
A `Conv` uses its own `impl` if set, else the one of the enclosing `conv_impl(...)` scope;
`models.get(..., conv_impl=...)` opens that scope around every init/apply, so model classes
need not pass the choice down and the engine never sees it.
"""
import contextlib
import contextvars
import sys
from typing import Any, Optional

import jax
import jax.numpy as jnp
from flax import linen as nn

from fedjax_drift.models import onednn

CONV_IMPLS = ('auto', 'im2col', 'lax', 'onednn')
_CONV_IMPL = contextvars.ContextVar('conv_impl', default='im2col')
_said = set()  # fallback notes already printed by this process


def _say_once(line):
  """One line on stderr, once per process (a run resolves its convolution several times)."""
  if line not in _said:
    _said.add(line)
    print(line, file=sys.stderr, flush=True)


def resolve_conv_impl(impl='auto', backend=None, convolves=True):
  """The implementation to use for `impl` on `backend` (default jax.default_backend()).

  'auto' -> 'onednn' on CPU where its extension is available (built on first use), else
  'im2col', saying why in one line; 'lax' on GPU/TPU. 'onednn' where its extension cannot run
  -> the CPU's or the accelerator's pure-JAX choice, with one line on stderr saying why.
  convolves=False (a model without convolutions): 'auto' -> the pure-JAX choice without
  building or loading the extension (nothing would use it).
  """
  if impl not in CONV_IMPLS:
    raise ValueError(f'conv_impl must be one of {", ".join(CONV_IMPLS)}, got {impl!r}')
  backend = backend or jax.default_backend()
  fallback = 'im2col' if backend == 'cpu' else 'lax'
  if impl in ('im2col', 'lax'):
    return impl
  if impl == 'auto' and (backend != 'cpu' or not convolves):
    return fallback
  if backend != 'cpu':
    reason = f'oneDNN convolutions run on the CPU backend only, not {backend}'
  else:  # onednn.build says why not on other CPUs (x86-64 Linux only) or without oneDNN/g++
    reason = '' if onednn.available() else onednn.unavailable_reason()
  if not reason:
    return 'onednn'
  if impl == 'auto':  # the documented fallback, not a mistake: a note, not a warning
    _say_once(f'--conv_impl=auto: oneDNN extension unavailable: {reason}; using {fallback}')
  else:
    _say_once(f'--conv_impl={impl}: {reason}; using {fallback}')
  return fallback


@contextlib.contextmanager
def conv_impl(impl):
  """Convolutions built or applied inside this scope use `impl` (resolved; see module doc)."""
  token = _CONV_IMPL.set(resolve_conv_impl(impl))
  try:
    yield
  finally:
    _CONV_IMPL.reset(token)


def current_conv_impl():
  return _CONV_IMPL.get()


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
  """2x2/stride-2 max-pooling (VALID) of [N, H, W, C] as the max of four strided slices.

  The gradient goes to the first maximal element of each window (as lax.reduce_window's and
  torch's do). Autodiff of the maxima would split ties and recompute the maxima, compares and
  divisions in the backward pass; the custom VJP keeps three masks from the forward pass and
  interleaves the gradient back with one stack, no pads or adds (profiled: the autodiff
  backward was the most expensive elementwise op of the MNIST CNN's conv1).
  """
  h, w = x.shape[1] // 2 * 2, x.shape[2] // 2 * 2
  return _max_pool_2x2(x[:, :h, :w, :])


def _window(x):
  return x[:, 0::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 0::2], x[:, 1::2, 1::2]


@jax.custom_vjp
def _max_pool_2x2(x):
  a, b, c, d = _window(x)
  return jnp.maximum(jnp.maximum(a, b), jnp.maximum(c, d))


def _max_pool_fwd(x):
  a, b, c, d = _window(x)
  # Which element is the first maximum, from comparisons among the four (never `a == max`:
  # XLA may recompute a fused producer in another fusion, not always bit for bit).
  first_a = (a >= b) & (a >= c) & (a >= d)
  first_b = ~first_a & (b >= c) & (b >= d)
  first_c = ~(first_a | first_b) & (c >= d)
  m = jnp.where(first_a, a, jnp.where(first_b, b, jnp.where(first_c, c, d)))
  return m, (first_a, first_b, first_c)


def _max_pool_bwd(masks, g):
  first_a, first_b, first_c = masks
  zero = jnp.zeros_like(g)
  ga, gb, gc = (jnp.where(m, g, zero) for m in masks)
  gd = jnp.where(first_a | first_b | first_c, zero, g)
  n, h, w, c = g.shape  # rows (a b / c d) interleaved back to [N, 2h, 2w, C]
  full = jnp.stack([jnp.stack([ga, gb], 3), jnp.stack([gc, gd], 3)], 2)
  return (full.reshape(n, 2 * h, 2 * w, c),)


_max_pool_2x2.defvjp(_max_pool_fwd, _max_pool_bwd)


def conv2d_few_channels(x, kernel, padding='SAME'):
  """conv2d(x, kernel) by im2col for inputs with few channels (the image layer).

  With C_in of 1-3, NHWC patches [B*H*W, k*k*C_in] are assembled a float or three at a time,
  and the weight gradient P^T dY is a GEMM for which XLA:CPU transposes dY, fused with
  whatever produced dY (the pooling backward): profiled as the costliest elementwise op of the
  MNIST CNN. Here the patches are built transposed, P^T [k*k*C_in, B*H*W], each row a whole
  shifted image plane (contiguous copies); the forward GEMM contracts their leading axis and
  still writes NHWC, and the weight gradient P^T dY is a plain GEMM on dY as it comes.
  """
  k, _, c, f = kernel.shape
  xt = jnp.transpose(x, (3, 0, 1, 2))  # [C, B, H, W]: a reshape when C = 1
  if padding == 'SAME':
    lo = (k - 1) // 2
    xt = jnp.pad(xt, ((0, 0), (0, 0), (lo, k - 1 - lo), (lo, k - 1 - lo)))
  elif padding != 'VALID':
    raise ValueError(f'padding must be SAME or VALID, got {padding}')
  n, h, w = xt.shape[1], xt.shape[2] - k + 1, xt.shape[3] - k + 1
  rows = jnp.stack([xt[ch, :, i:i + h, j:j + w]  # ordered (kh, kw, c) like an HWIO kernel
                    for i in range(k) for j in range(k) for ch in range(c)])
  y = jax.lax.dot_general(rows.reshape(k * k * c, n * h * w), kernel.reshape(k * k * c, f),
                          (((0,), (0,)), ((), ())))
  return y.reshape(n, h, w, f)


SMALL_C_IN = 3  # up to this many input channels, im2col builds its patches transposed


def conv2d(x, kernel, padding='SAME', impl='im2col'):
  """Stride-1 convolution of NHWC `x` with an HWIO `kernel` (square, odd or even size)."""
  if impl == 'lax':
    return jax.lax.conv_general_dilated(x, kernel, (1, 1), padding,
                                        dimension_numbers=('NHWC', 'HWIO', 'NHWC'))
  if impl == 'onednn':
    return onednn.conv(x, kernel, (1, 1), padding)
  if impl != 'im2col':
    raise ValueError(f'conv2d: impl must be im2col, lax or onednn, got {impl!r}')
  k, _, c, f = kernel.shape
  if c <= SMALL_C_IN:
    return conv2d_few_channels(x, kernel, padding)
  return im2col(x, k, padding) @ kernel.reshape(k * k * c, f)


class Conv(nn.Module):
  """Stride-1 2-D convolution (NHWC, HWIO kernel): im2col + GEMM, lax.conv or oneDNN (`impl`)."""
  features: int
  kernel_size: int = 3
  padding: str = 'SAME'
  use_bias: bool = True
  kernel_init: Any = nn.initializers.lecun_normal()
  impl: Optional[str] = None  # None: the enclosing conv_impl(...) scope's (default im2col)

  @nn.compact
  def __call__(self, x):
    k, c = self.kernel_size, x.shape[-1]
    kernel = self.param('kernel', self.kernel_init, (k, k, c, self.features))
    impl = resolve_conv_impl(self.impl) if self.impl else current_conv_impl()
    y = conv2d(x, kernel, self.padding, impl)
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

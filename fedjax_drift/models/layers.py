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
          faster than im2col and the torch loop on the MNIST and CIFAR CNNs (docs/speed.md)
A `Conv` uses its own `impl` if set, else the one of the enclosing `conv_impl(...)` scope;
`models.get(..., conv_impl=...)` opens that scope around every init/apply, so model classes
need not pass the choice down and the engine never sees it.

The parameter initialisation (--init, registry kind 'init') is a scope of the same kind:
`init_scheme('torch')` makes `Conv`, `StridedConv`, `ConvReluPool` and `dense` draw their
parameters as PyTorch's nn.Conv2d / nn.Linear do; the default scope ('flax') keeps flax's
lecun-normal kernels and zero biases.

The strided convolution and pooling in PyTorch's conventions (FedBN's AlexNet, ResNet-50's
strided 3x3) are at the end.
"""
import contextlib
import contextvars
import math
import sys
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

from fedjax_drift import registry
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


# --- Parameter initialisation (--init) ----------------------------------------------------------

_INIT_SCHEME = contextvars.ContextVar('init_scheme', default='flax')


@contextlib.contextmanager
def init_scheme(scheme):
  """Layers built inside this scope draw their parameters as `scheme` ('flax' or 'torch') does."""
  if scheme not in ('flax', 'torch'):
    raise ValueError(f'init_scheme must be flax or torch, got {scheme!r}')
  token = _INIT_SCHEME.set(scheme)
  try:
    yield
  finally:
    _INIT_SCHEME.reset(token)


def current_init_scheme():
  """'flax' (the default) or 'torch': the enclosing init_scheme(...) scope's."""
  return _INIT_SCHEME.get()


def torch_uniform(fan_in):
  """Initializer U(-1/sqrt(fan_in), 1/sqrt(fan_in)) whatever the shape asked for.

  PyTorch's nn.Linear / nn.Conv2d `reset_parameters`: the weight's kaiming_uniform_(a=sqrt(5))
  has gain sqrt(2 / (1 + 5)) and bound gain * sqrt(3 / fan_in) = 1/sqrt(fan_in); the bias is
  U(+-1/sqrt(fan_in)) with the weight's fan_in (in_features, or in_channels * kh * kw).
  """
  bound = 1.0 / math.sqrt(fan_in)

  def init(key, shape, dtype=jnp.float32):
    return jax.random.uniform(key, shape, dtype, -bound, bound)
  return init


def conv_inits(kernel_init, fan_in):
  """(kernel initializer, bias initializer) of a convolution with `fan_in` = in_ch * kh * kw:
  its own kernel_init if given (a paper's code sets it), else the scope's: torch_uniform in a
  'torch' scope, flax's lecun-normal otherwise; biases torch_uniform or zeros likewise."""
  torch = current_init_scheme() == 'torch'
  if kernel_init is None:
    kernel_init = torch_uniform(fan_in) if torch else nn.initializers.lecun_normal()
  return kernel_init, torch_uniform(fan_in) if torch else nn.initializers.zeros


def dense(x, features, name, torch_kernel_init=None):
  """nn.Dense(features, name=name)(x), initialised as the scope says: flax's defaults, or
  PyTorch's nn.Linear (`torch_uniform` of in_features for kernel and bias), with the kernel
  from `torch_kernel_init` instead where a paper's torch code sets its own."""
  if current_init_scheme() == 'torch':
    bias_init = torch_uniform(x.shape[-1])
    return nn.Dense(features, kernel_init=torch_kernel_init or bias_init, bias_init=bias_init,
                    name=name)(x)
  return nn.Dense(features, name=name)(x)


def embed(num_embeddings, features, flax_init, name):
  """nn.Embed with `flax_init` (the model's own), or N(0, 1) as PyTorch's nn.Embedding in a
  'torch' scope."""
  init = (nn.initializers.normal(1.0) if current_init_scheme() == 'torch' else flax_init)
  return nn.Embed(num_embeddings, features, embedding_init=init, name=name)


def _zeros_after(params):
  return jax.tree.map(jnp.zeros_like, params)


# info: (the scope's scheme, a function applied to the initial params or None).
registry.register('init', 'default', 'flax\'s defaults: lecun-normal kernels, zero biases (and '
                  'the convolutions a paper\'s code initialises its own way)', info=('flax', None))
registry.register('init', 'zeros', 'every parameter 0', info=('flax', _zeros_after))
registry.register('init', 'torch', 'each layer as PyTorch builds it (nn.Linear/nn.Conv2d: '
                  'U(+-1/sqrt(fan_in)); nn.Embedding N(0,1)), the papers\' ResNets as their code',
                  info=('torch', None))


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
  kernel_init: Any = None  # None: the init scope's (`conv_inits`)
  impl: Optional[str] = None  # None: the enclosing conv_impl(...) scope's (default im2col)

  @nn.compact
  def __call__(self, x):
    k, c = self.kernel_size, x.shape[-1]
    kernel_init, bias_init = conv_inits(self.kernel_init, k * k * c)
    kernel = self.param('kernel', kernel_init, (k, k, c, self.features))
    impl = resolve_conv_impl(self.impl) if self.impl else current_conv_impl()
    y = conv2d(x, kernel, self.padding, impl)
    if self.use_bias:
      y = y + self.param('bias', bias_init, (self.features,))
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
    _, bias_init = conv_inits(None, self.kernel_size ** 2 * x.shape[-1])  # the conv's bias
    bias = self.param('bias', bias_init, (self.features,))
    return nn.relu(max_pool_2x2(y) + bias)


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

  Computed as `Conv` is: im2col + GEMM, lax.conv or oneDNN, as the enclosing --conv_impl scope
  says; initialised as `Conv` is (`conv_inits`).
  """
  features: int
  kernel_size: int
  stride: int
  padding: int
  use_bias: bool = True
  kernel_init: Any = None  # None: the init scope's (`conv_inits`)

  @nn.compact
  def __call__(self, x):
    k = self.kernel_size
    kernel_init, bias_init = conv_inits(self.kernel_init, k * k * x.shape[-1])
    kernel = self.param('kernel', kernel_init, (k, k, x.shape[-1], self.features))
    y = conv2d_strided(x, kernel, self.stride, self.padding, current_conv_impl())
    if self.use_bias:
      y = y + self.param('bias', bias_init, (self.features,))
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

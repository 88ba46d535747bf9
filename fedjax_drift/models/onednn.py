"""oneDNN's convolution primitives as XLA FFI custom calls (`--conv_impl=onednn`, CPU only).

The torch loop this project is measured against runs its convolutions through oneDNN; XLA:CPU's
own convolution GEMMs reach less of the CPU's peak (benchmarks/, issue 23). This module calls
oneDNN's forward, backward-data and backward-weights convolutions directly:

- `onednn_conv.cc` (beside this file) is compiled on first use with g++ into `cache_dir()`
  ($FEDJAX_DRIFT_ONEDNN_CACHE, else $FEDJAX_DRIFT_CACHE/onednn, by default
  ~/.cache/fedjax_drift/onednn), against the headers and libdnnl.so of the `onednn-cpu-gomp` /
  `onednn-devel-cpu-gomp` wheels (`pip install ".[onednn]"`) and the XLA FFI headers jaxlib
  ships. The library is named by a hash of everything it was built from, so a new jaxlib,
  oneDNN or source builds anew, and one directory can serve any number of processes (the tests
  share one per session): a build holds a lock on the directory, so concurrent processes
  compile once, and it is written under a temporary name and renamed, so no process ever
  loads a partial file. Its sha256 is written beside it (NAME.so.sha256) and checked before
  every load: a library truncated or overwritten later (a full disk, a copy cut short) is
  built again, with one line, and never loaded (a truncated one dies with a bus error); one
  that is whole but does not load is built again once. The core install needs neither a
  compiler nor oneDNN.
- `conv(x, kernel, strides, padding)` is a `jax.custom_vjp` whose forward and both gradients
  are custom calls (and so are their own gradients), so it works under jit, grad, lax.scan and
  vmap. Under vmap the calls get the vmapped axes as leading axes (`vmap_method=
  'expand_dims'`), and the C++ side runs one convolution per leading index, broadcasting
  operands whose axis is 1: vmapped clients each convolve with their own kernel, in one call.
- Concurrency: one convolution runs at a time per process (each uses every core through
  OpenMP; OMP_NUM_THREADS and OMP_WAIT_POLICY apply as for any GNU OpenMP program).
- `available()` says whether the extension could be built and loaded, and `unavailable_reason()`
  why not (no oneDNN wheel, no compiler, not x86-64 Linux, not the CPU backend).

No bias or ReLU is fused: the models' ConvReluPool pools before its bias and ReLU (4x cheaper,
layers.py), which no oneDNN post-op can express, and a bias gradient is a plain sum.
Set ONEDNN_VERBOSE=1 to see which oneDNN kernel runs each convolution.
"""
import ctypes
import functools
import hashlib
import os
import platform
import shutil
import site
import subprocess
import sys
import sysconfig
import tempfile
import threading

import jax
import jax.numpy as jnp
import numpy as np

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'onednn_conv.cc')
TARGETS = {'forward': 'FedjaxDriftOnednnConvForward',
           'backward_data': 'FedjaxDriftOnednnConvBackwardData',
           'backward_weights': 'FedjaxDriftOnednnConvBackwardWeights'}
_LIBDNNL = 'libdnnl.so.3'  # the soname of oneDNN 3.x (the 2023.2 wheel carries 3.2)

_lock = threading.Lock()
_state = {}  # 'lib': the loaded library, or 'reason': why there is none


def cache_dir():
  """Where the extension is built: $FEDJAX_DRIFT_ONEDNN_CACHE if set, else CACHE/onednn with
  CACHE = $FEDJAX_DRIFT_CACHE or ~/.cache/fedjax_drift (as data/sources.py).

  A directory of its own lets processes with separate dataset caches (the tests' hermetic
  ones) share one build.
  """
  if os.environ.get('FEDJAX_DRIFT_ONEDNN_CACHE'):
    return os.environ['FEDJAX_DRIFT_ONEDNN_CACHE']
  root = os.environ.get('FEDJAX_DRIFT_CACHE',
                        os.path.join(os.path.expanduser('~'), '.cache', 'fedjax_drift'))
  return os.path.join(root, 'onednn')


def find_onednn():
  """(include dir, lib dir) of an installed oneDNN 3.x, or None.

  Looks where pip puts the wheels' data files (the environment's prefix, or the user base for
  `pip install --user`), then $DNNLROOT (oneDNN's own convention for a source install).
  """
  roots = [sysconfig.get_paths()['data'], sys.prefix, sys.base_prefix, site.getuserbase(),
           os.environ.get('DNNLROOT', '')]
  for root in dict.fromkeys(r for r in roots if r):
    include = os.path.join(root, 'include')
    if not os.path.exists(os.path.join(include, 'oneapi', 'dnnl', 'dnnl.hpp')):
      continue
    for lib in ('lib', 'lib64'):
      if os.path.exists(os.path.join(root, lib, _LIBDNNL)):
        return include, os.path.join(root, lib)
  return None


def _compiler():
  return os.environ.get('CXX') or shutil.which('g++') or shutil.which('c++')


def build_command(compiler, include, libdir, out):
  """The g++ line that builds onednn_conv.cc into the shared library `out`."""
  return [compiler, '-O3', '-std=c++17', '-shared', '-fPIC', '-w', '-I', jax.ffi.include_dir(),
          '-I', include, SOURCE, '-o', out, '-L', libdir, f'-l:{_LIBDNNL}',
          f'-Wl,-rpath,{libdir}']


def _library_path(compiler, include, libdir):
  """cache_dir()/onednn_conv-HASH.so, HASH over the source and what it is built against."""
  h = hashlib.sha256()
  with open(SOURCE, 'rb') as f:
    h.update(f.read())
  for part in (compiler, include, libdir, jax.ffi.include_dir(), jax.__version__,
               str(os.path.getmtime(os.path.join(libdir, _LIBDNNL)))):
    h.update(part.encode())
  return os.path.join(cache_dir(), f'onednn_conv-{h.hexdigest()[:16]}.so')


def build(again=''):
  """Builds the extension if needed (absent, or not intact(): rebuilt with one line on
  stderr); returns its path. again: why the cached library must be built again although it
  is intact (it did not load). Raises RuntimeError saying why there is none."""
  if platform.system() != 'Linux' or platform.machine().lower() not in ('x86_64', 'amd64'):
    raise RuntimeError(f'the oneDNN extension is built for x86-64 Linux only, not '
                       f'{platform.system()} {platform.machine()}')
  if not hasattr(jax, 'ffi'):  # jax.ffi (headers, ffi_call) arrived in jax 0.4.38
    raise RuntimeError(f'the oneDNN extension needs jax >= 0.4.38 (jax.ffi), not {jax.__version__}')
  found = find_onednn()
  if found is None:
    raise RuntimeError('oneDNN is not installed (pip install "fedjax-drift[onednn]")')
  compiler = _compiler()
  if compiler is None:
    raise RuntimeError('no C++ compiler (g++) to build the oneDNN extension with')
  path = _library_path(compiler, *found)
  if not again and intact(path):
    return path
  os.makedirs(os.path.dirname(path), exist_ok=True)
  import fcntl  # pylint: disable=g-import-not-at-top  (POSIX only; this is Linux, see above)
  # One builder at a time per directory (the others wait, then find the library built), so
  # concurrent processes do not each spend the compile on a 2-core machine.
  with open(os.path.join(os.path.dirname(path), '.build.lock'), 'w') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
    if again or not intact(path):
      if os.path.exists(path):  # truncated, overwritten, or from before the checksums
        sys.stderr.write(f'note: the oneDNN extension {path} is damaged ('
                         f'{again or "it does not match its checksum"}); building it again\n')
      _compile(compiler, found, path)
  return path


def _sha256(path):
  h = hashlib.sha256()
  with open(path, 'rb') as f:
    for chunk in iter(lambda: f.read(1 << 20), b''):
      h.update(chunk)
  return h.hexdigest()


def intact(path) -> bool:
  """Whether the library at `path` is there and whole: its sha256 equals the one _compile
  wrote beside it (PATH.sha256). A truncated library would die with a bus error when loaded
  (exit 135, no message) and a garbage one would not load: neither is ever loaded."""
  try:
    with open(path + '.sha256', encoding='ascii') as f:
      return _sha256(path) == f.read().strip()
  except (OSError, UnicodeDecodeError):
    return False


def _compile(compiler, found, path):
  """Compiles the extension to `path`; raises RuntimeError with the compiler's last lines."""
  # Build under a temporary name, then rename: concurrent processes never load a partial file.
  fd, tmp = tempfile.mkstemp(suffix='.so', dir=os.path.dirname(path))
  os.close(fd)
  try:
    done = subprocess.run(build_command(compiler, *found, tmp), capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:  # the compiler's last lines, on one line (the fallback note)
      tail = (' | '.join(done.stderr.strip().splitlines()[-3:])[-300:] or
              f'{compiler} exited with status {done.returncode}')
      raise RuntimeError(f'building the oneDNN extension failed: {tail}')
    digest = tmp + '.sha256'
    with open(digest, 'w', encoding='ascii') as f:
      f.write(_sha256(tmp) + '\n')
    # The checksum first: a process that reads it before the library is in place sees a
    # mismatch and waits for the build lock, which this build holds.
    os.replace(digest, path + '.sha256')
    os.replace(tmp, path)
  finally:
    for leftover in (tmp, tmp + '.sha256'):
      if os.path.exists(leftover):
        os.remove(leftover)


def _load():
  """Builds, loads and registers the FFI targets once per process; sets _state."""
  with _lock:
    if _state:
      return
    try:
      if jax.default_backend() != 'cpu':
        raise RuntimeError(f'oneDNN convolutions run on the CPU backend only, not '
                           f'{jax.default_backend()}')
      path = build()
      try:
        lib = ctypes.CDLL(path)
      except OSError as e:  # intact yet unloadable (written whole by something else): once
        lib = ctypes.CDLL(build(again=f'it does not load: {str(e).splitlines()[0][-200:]}'))
      for symbol in TARGETS.values():
        jax.ffi.register_ffi_target(symbol, jax.ffi.pycapsule(getattr(lib, symbol)),
                                    platform='cpu')
      _state['lib'] = lib
    except (RuntimeError, OSError) as e:
      _state['reason'] = str(e)


def available():
  """Whether the oneDNN convolutions can run here (builds the extension on first call)."""
  _load()
  return 'lib' in _state


def unavailable_reason():
  """Why `available()` is False ('' when it is True)."""
  _load()
  return _state.get('reason', '')


def version():
  """The oneDNN version the extension was built against, e.g. '3.2.0' (None if unavailable)."""
  if not available():
    return None
  v = _state['lib'].FedjaxDriftOnednnVersion()
  return f'{v // 10000}.{v // 100 % 100}.{v % 100}'


def _pads(padding, spatial, kernel_hw, strides):
  """((top, bottom), (left, right)) from 'SAME', 'VALID' or explicit pairs, as lax does."""
  if isinstance(padding, str):
    return tuple(jax.lax.padtype_to_pads(spatial, kernel_hw, strides, padding))
  return tuple((int(lo), int(hi)) for lo, hi in padding)


def _out_size(size, k, stride, lo, hi):
  return (size + lo + hi - k) // stride + 1


def _attrs(strides, pads):
  (pt, pb), (pl, pr) = pads
  return dict(stride_h=np.int64(strides[0]), stride_w=np.int64(strides[1]), pad_top=np.int64(pt),
              pad_bottom=np.int64(pb), pad_left=np.int64(pl), pad_right=np.int64(pr))


def _call(target, shape, a, b, strides, pads):
  return jax.ffi.ffi_call(TARGETS[target], jax.ShapeDtypeStruct(shape, jnp.float32),
                          vmap_method='expand_dims')(a, b, **_attrs(strides, pads))


# The three convolutions are each other's transposes, so each one's VJP is made of the other
# two, and gradients of gradients (jax.hessian, grad of a gradient penalty) are custom calls too:
#   y  = forward(x, k)           ->  dx = backward_data(dy, k),   dk = backward_weights(x, dy)
#   dx = backward_data(dy, k)    ->  d(dy) = forward(g, k),       dk = backward_weights(g, dy)
#   dk = backward_weights(x, dy) ->  dx = backward_data(dy, g),   d(dy) = forward(x, g)
# (g is the cotangent of each function's output). Shapes and geometry are static arguments.

@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _forward(x, kernel, strides, pads):
  (pt, pb), (pl, pr) = pads
  k_h, k_w, _, f = kernel.shape
  n, h, w, _ = x.shape
  shape = (n, _out_size(h, k_h, strides[0], pt, pb), _out_size(w, k_w, strides[1], pl, pr), f)
  return _call('forward', shape, x, kernel, strides, pads)


def _forward_fwd(x, kernel, strides, pads):
  return _forward(x, kernel, strides, pads), (x, kernel)


def _forward_bwd(strides, pads, residuals, g):
  x, kernel = residuals
  return (_backward_data(g, kernel, x.shape, strides, pads),
          _backward_weights(x, g, kernel.shape, strides, pads))


_forward.defvjp(_forward_fwd, _forward_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def _backward_data(dy, kernel, x_shape, strides, pads):
  return _call('backward_data', x_shape, dy, kernel, strides, pads)


def _backward_data_fwd(dy, kernel, x_shape, strides, pads):
  return _backward_data(dy, kernel, x_shape, strides, pads), (dy, kernel)


def _backward_data_bwd(x_shape, strides, pads, residuals, g):
  del x_shape
  dy, kernel = residuals
  return (_forward(g, kernel, strides, pads),
          _backward_weights(g, dy, kernel.shape, strides, pads))


_backward_data.defvjp(_backward_data_fwd, _backward_data_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def _backward_weights(x, dy, kernel_shape, strides, pads):
  return _call('backward_weights', kernel_shape, x, dy, strides, pads)


def _backward_weights_fwd(x, dy, kernel_shape, strides, pads):
  return _backward_weights(x, dy, kernel_shape, strides, pads), (x, dy)


def _backward_weights_bwd(kernel_shape, strides, pads, residuals, g):
  del kernel_shape
  x, dy = residuals
  return (_backward_data(dy, g, x.shape, strides, pads), _forward(x, g, strides, pads))


_backward_weights.defvjp(_backward_weights_fwd, _backward_weights_bwd)


def conv(x, kernel, strides=(1, 1), padding='SAME'):
  """lax.conv_general_dilated(x, kernel, strides, padding) for NHWC `x`, HWIO `kernel`, by oneDNN.

  padding: 'SAME', 'VALID' (lax's meaning, also for strides > 1) or ((top, bottom), (left,
  right)). float32 only (the extension's kernels); raises RuntimeError if `available()` is not.
  """
  if not available():
    raise RuntimeError(f'oneDNN convolutions are unavailable: {unavailable_reason()}')
  if x.dtype != jnp.float32 or kernel.dtype != jnp.float32:
    raise TypeError(f'oneDNN convolutions take float32, got {x.dtype} and {kernel.dtype}')
  strides = tuple(int(s) for s in strides)
  pads = _pads(padding, x.shape[1:3], kernel.shape[:2], strides)
  return _forward(x, kernel, strides, pads)


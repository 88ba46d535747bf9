"""XLA's persistent compilation cache for this tool's runs (`--compile_cache`).

A preset or a sweep compiles many programs that are the same XLA program (every method's
initialisation and evaluation on the same model and shapes), and a rerun or a resume compiles
all of them again. JAX can keep compiled executables on disk, keyed by the program, its
compile options, the jaxlib version and the devices, so a hit returns what compiling would
have produced (results are bit-identical either way, tested).

`auto` keeps them in CACHE/xla (CACHE = $FEDJAX_DRIFT_CACHE or ~/.cache/fedjax_drift, as the
datasets and the oneDNN build), `off` compiles everything, a path uses that directory. A
cache the user set up for JAX itself ($JAX_COMPILATION_CACHE_DIR) is left as it is under
`auto`. The directory is the user's own: JAX trusts what it reads there (do not point it at a
folder others can write).
"""
import os
import shutil
import tempfile

import jax

try:  # public (jax.experimental); guarded: an experimental module may move in a later jax
  from jax.experimental.compilation_cache import compilation_cache as _jax_cache
except ImportError:  # pragma: no cover - then the directory is set through jax.config alone
  _jax_cache = None

from fedjax_drift.data import common

# Entries are evicted least-recently-used above this size. Setting a size also makes JAX
# lock the directory around reads and writes, so processes sharing it (presets --jobs, a
# sweep's resume beside a run) never read an entry another is writing.
MAX_BYTES = 2 << 30
# Compiles quicker than this are not written: eager one-op programs would fill the cache.
MIN_COMPILE_S = 0.1
# Below this much free space the cache is not used: JAX would print a raw warning for every
# entry it fails to write.
MIN_FREE_BYTES = 256 << 20


def unusable(path) -> str:
  """Why the cache cannot be kept in `path` ('' when it can): a folder that cannot be created
  or written (a read-only disk, no permission; tried, not guessed from the mode bits), or a
  disk with less than MIN_FREE_BYTES free."""
  try:
    os.makedirs(path, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path, prefix='.probe-'):
      pass
    free = shutil.disk_usage(path).free
  except OSError as e:
    return e.strerror or str(e)
  if free < MIN_FREE_BYTES:
    return f'only {free >> 20} MB free'
  return ''


def directory(setting):
  """The cache directory `setting` ('auto', 'off' or a path) names, or None for off."""
  if setting == 'off':
    return None
  if setting != 'auto':
    return os.path.abspath(os.path.expanduser(setting))
  return os.path.join(common.cache_dir(), 'xla')


def use(setting, log=print):
  """Points this process's compilation cache at `setting`'s directory (or turns it off);
  returns the directory in use (None: off). JAX opens its cache once per process, so a
  change of directory resets it first. A directory that is unusable() is not used: one
  warning line through `log`, and the run compiles without it."""
  if setting == 'auto' and os.environ.get('JAX_COMPILATION_CACHE_DIR'):
    return os.environ['JAX_COMPILATION_CACHE_DIR']  # the user's own JAX set-up
  path = directory(setting)
  why = unusable(path) if path is not None else ''
  if why:
    log(f'warning: --compile_cache={setting}: {path} is not usable ({why}); compiling without '
        'the cache')
    path = None
  if path is None:
    jax.config.update('jax_enable_compilation_cache', False)
    return None
  if jax.config.jax_compilation_cache_dir != path or not jax.config.jax_enable_compilation_cache:
    _reset_jax_cache()
    jax.config.update('jax_enable_compilation_cache', True)
    jax.config.update('jax_compilation_cache_max_size', MAX_BYTES)
    jax.config.update('jax_persistent_cache_min_compile_time_secs', MIN_COMPILE_S)
    jax.config.update('jax_persistent_cache_min_entry_size_bytes', -1)  # any size
    jax.config.update('jax_compilation_cache_dir', path)  # what set_cache_dir does
  return path


def _reset_jax_cache():
  """Closes the cache JAX opened, so that the next compilation opens the new directory
  (jax.experimental.compilation_cache's reset_cache; without it, a jax that lacks it keeps
  the first directory it opened for the process: one directory per process, the usual case)."""
  reset = getattr(_jax_cache, 'reset_cache', None)
  if reset is not None:
    reset()

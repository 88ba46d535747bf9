"""Shared fixtures, and a map of where things live in tests/.

- Numpy references of the update rules (FedAvg, the papers' equations on tiny problems):
  tests/reference.py, used by test_algorithms.py, test_fedavg.py, test_baselines.py and the
  family tests (test_fedgen.py, test_feddistill.py, ...); docs/new_method.md shows the pattern.
- Dataset files in their publishers' exact layouts: tests/layouts.py (one writer per format,
  returning what a reader must give back) and tests/fixtures.py (synthetic downloads for
  `fedjax-drift-data import`); the tiny learnable npz problem is make_npz below.
- Experiments on the tiny problem and batch replay: tests/helpers.py.
- The registry's declarations against what each entry's build reads: test_registry.py.
- One file per core module: test_config.py, test_study.py (the runs a config stands for),
  test_simulation.py (the run's flags and record), test_evaluation.py (--eval_protocol),
  test_tables.py (a results table's numbers), test_results.py (one selection rule),
  test_report.py (figures), test_engine.py, test_registry.py. Behaviours that cross modules
  are named for the behaviour: test_sweep.py (seeds x grid end to end), test_reliability.py
  (resume, divergence), test_cli.py and test_usability.py (the command line).
- Compiled programs: one XLA compilation cache for the whole session (session_compile_cache
  below), so tests that share shapes (the tiny npz, make_npz's defaults, helpers.tiny_config)
  compile each program once; reuse those shapes in a new test to keep the suite fast.
"""
import json
import os
import sys

import jax
from jax.experimental.compilation_cache import compilation_cache
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def make_npz(path, n_train=60, n_test=30, dim=6, classes=3, seed=0, uint8=False):
  """A small learnable problem: class-dependent means plus noise."""
  rng = np.random.default_rng(seed)
  centers = rng.normal(size=(classes, dim)) * 2
  def split(n):
    y = rng.integers(0, classes, n)
    x = centers[y] + rng.normal(size=(n, dim))
    return x.astype(np.float32), y.astype(np.int64)
  x_train, y_train = split(n_train)
  x_test, y_test = split(n_test)
  if uint8:
    x_train = np.clip(x_train * 20 + 128, 0, 255).astype(np.uint8)
    x_test = np.clip(x_test * 20 + 128, 0, 255).astype(np.uint8)
  np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
  return path


@pytest.fixture(scope='session')
def tiny_npz(tmp_path_factory):
  return str(make_npz(tmp_path_factory.mktemp('data') / 'tiny.npz'))


@pytest.fixture(scope='session')
def unequal_partition(tmp_path_factory):
  """Four clients of sizes 5, 9, 14 and 20 over the 60 tiny training examples."""
  rng = np.random.default_rng(1)
  perm = rng.permutation(60)
  parts = [perm[:5], perm[5:14], perm[14:28], perm[28:48]]
  path = tmp_path_factory.mktemp('parts') / 'parts.json'
  path.write_text(json.dumps([sorted(int(i) for i in p) for p in parts]))
  return str(path)


@pytest.fixture(scope='session', autouse=True)
def onednn_build_cache(tmp_path_factory):
  """One directory for the oneDNN extension (models/onednn.py) for the whole session, outside
  the user's ~/.cache: every test has its own dataset cache, and a build per test (and per CLI
  subprocess) would cost 10 s of g++ each. Sharing is safe: the library is named by a hash of
  what it was built from, and a build is locked and renamed into place. Session scope, so it
  is set before any module fixture builds the extension."""
  path = tmp_path_factory.mktemp('onednn_build')
  with pytest.MonkeyPatch.context() as patch:
    patch.setenv('FEDJAX_DRIFT_ONEDNN_CACHE', str(path))
    yield path


# Compiles quicker than this are not stored in the session's compilation cache: eager one-op
# programs compile in milliseconds, and every write scans the whole directory (JAX's size
# accounting reads each entry's access time: about 50 us an entry), so thousands of tiny
# entries would cost the suite minutes; the programs worth keeping (rounds, evaluations,
# initialisations) take longer than this.
_MIN_COMPILE_S = 0.2
# A size limit makes JAX lock the directory around reads and writes (compile_cache.py does the
# same), so concurrent subprocesses never read a half-written entry.
_MAX_BYTES = 4 << 30


def _point_jax_at(path):
  """Turns this process's persistent compilation cache on at `path`, with the session's
  thresholds (a test may have turned it off or moved it, as `--compile_cache` does)."""
  if (jax.config.jax_compilation_cache_dir == path and jax.config.jax_enable_compilation_cache
      and jax.config.jax_persistent_cache_min_compile_time_secs == _MIN_COMPILE_S):
    return
  compilation_cache.reset_cache()
  jax.config.update('jax_enable_compilation_cache', True)
  jax.config.update('jax_compilation_cache_max_size', _MAX_BYTES)
  jax.config.update('jax_persistent_cache_min_compile_time_secs', _MIN_COMPILE_S)
  jax.config.update('jax_persistent_cache_min_entry_size_bytes', -1)
  compilation_cache.set_cache_dir(path)


@pytest.fixture(scope='session', autouse=True)
def session_compile_cache(tmp_path_factory):
  """One XLA compilation cache for the whole session, shared by every test and by the CLI
  runs they start: most tests compile the same few programs (the tiny problem's model, round
  and evaluation), and compiling each anew per test and per subprocess was most of the
  suite's time. Sharing stays hermetic: JAX keys an entry by the program, its compile
  options, the jaxlib version and the devices, so a hit returns what compiling would (tested
  in test_compile_cache.py); under pytest-xdist the workers share one. Runs with
  `--compile_cache=auto` use it because JAX's own $JAX_COMPILATION_CACHE_DIR wins there; the
  dataset cache and HOME stay per test.

  $FEDJAX_DRIFT_TEST_XLA_CACHE names a directory to use instead, so that several sessions
  share one: .ci/run's two commands do (the slow tests compile many of the everyday tests'
  programs again; a sample of 31 slow tests ran in 286 s with the everyday session's cache
  against 317 s cold). A directory kept from run to run grows (JAX evicts above _MAX_BYTES,
  and every write scans it), so CI's lives for one run."""
  if os.environ.get('FEDJAX_DRIFT_TEST_XLA_CACHE'):
    path = os.path.abspath(os.environ['FEDJAX_DRIFT_TEST_XLA_CACHE'])
    os.makedirs(path, exist_ok=True)
  elif os.environ.get('PYTEST_XDIST_WORKER'):
    # pytest-xdist: the workers' base directories share a parent, and so does their cache
    # (JAX locks its cache directory while it writes, so concurrent workers are safe).
    path = str(tmp_path_factory.getbasetemp().parent / 'xla_cache')
    os.makedirs(path, exist_ok=True)
  else:
    path = str(tmp_path_factory.mktemp('xla_cache'))
  with pytest.MonkeyPatch.context() as patch:
    # Subprocesses read these when they import JAX.
    patch.setenv('JAX_COMPILATION_CACHE_DIR', path)
    patch.setenv('JAX_ENABLE_COMPILATION_CACHE', 'true')
    patch.setenv('JAX_COMPILATION_CACHE_MAX_SIZE', str(_MAX_BYTES))
    patch.setenv('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', str(_MIN_COMPILE_S))
    patch.setenv('JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES', '-1')
    _point_jax_at(path)
    yield path


@pytest.fixture(autouse=True)
def _session_compile_cache_in_use(session_compile_cache):
  """Points this process back at the session's cache before each test (a test that ran
  with `--compile_cache=off` or a directory of its own leaves JAX set that way)."""
  _point_jax_at(session_compile_cache)


@pytest.fixture(autouse=True)
def hermetic_environment(tmp_path_factory, monkeypatch):
  """Every test gets its own empty dataset cache, TFDS data dir and home, so nothing a user
  has imported (or a populated ~/.cache) leaks into a test, and no test writes there.
  Subprocesses inherit the environment, so the CLI runs the tests start are covered too."""
  root = tmp_path_factory.mktemp('hermetic')
  home = root / 'home'
  home.mkdir()
  monkeypatch.setenv('FEDJAX_DRIFT_CACHE', str(root / 'cache'))
  monkeypatch.setenv('TFDS_DATA_DIR', str(root / 'tensorflow_datasets'))
  monkeypatch.setenv('HF_DATASETS_CACHE', str(root / 'hf_datasets'))
  monkeypatch.setenv('HF_HOME', str(root / 'hf_home'))
  monkeypatch.setenv('HF_DATASETS_OFFLINE', '1')
  monkeypatch.setenv('HF_HUB_OFFLINE', '1')
  # matplotlib and JAX read their own config from HOME; keep their caches out of the user's.
  monkeypatch.setenv('MPLCONFIGDIR', str(root / 'mpl'))
  monkeypatch.setenv('HOME', str(home))
  yield root


def pytest_configure(config):
  """pytest-xdist hands out groups largest first unless told not to (--loadscope-reorder, on
  by default), which started the longest test, a group of one, last: keep the order that
  pytest_collection_modifyitems below sets."""
  if hasattr(config.option, 'loadscopereorder'):
    config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
  """How pytest-xdist's `--dist loadgroup` (the README's test command) spreads the suite: each
  test file is one group, run by one worker, so its module fixtures are built once; a test
  marked `spread` is a group of its own (the README's commands: one file holding half the
  suite's time kept one worker busy long after the other had finished), and a test marked
  `first` is handed out before the rest (the longest, so it does not start last)."""
  del config
  for item in items:
    if item.get_closest_marker('spread') is None:
      item.add_marker(pytest.mark.xdist_group(os.path.basename(str(item.path))))
  items.sort(key=lambda item: item.get_closest_marker('first') is None)

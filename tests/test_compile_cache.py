"""--compile_cache: XLA's persistent compilation cache gives the same results, and reruns
read what the first run compiled."""
import csv
import os

import jax

import fedjax_drift
from fedjax_drift import compile_cache
from helpers import tiny_config


def _entries(path):
  """The compiled programs JAX stored (its `*-cache` files; not its lock or access times)."""
  return sorted(f for f in os.listdir(path) if f.endswith('-cache')) if os.path.isdir(
      path) else []


def _metrics(run_dir):
  """metrics.csv without its timing columns (seconds)."""
  with open(os.path.join(run_dir, 'metrics.csv')) as f:
    rows = list(csv.DictReader(f))
  assert rows
  return [{k: v for k, v in r.items() if not k.endswith('_s')} for r in rows]


def test_directory_rules(monkeypatch, tmp_path):
  monkeypatch.setenv('FEDJAX_DRIFT_CACHE', str(tmp_path))
  assert compile_cache.directory('auto') == os.path.join(str(tmp_path), 'xla')
  assert compile_cache.directory('off') is None
  assert compile_cache.directory(str(tmp_path / 'x')) == str(tmp_path / 'x')
  monkeypatch.setenv('JAX_COMPILATION_CACHE_DIR', str(tmp_path / 'users'))
  assert compile_cache.use('auto') == str(tmp_path / 'users')  # the user's JAX set-up wins


def test_a_rerun_reads_the_cache_and_gets_identical_results(tiny_npz, unequal_partition,
                                                            tmp_path, monkeypatch):
  # Every program is stored, however fast it compiled: with the product's threshold, one that
  # compiled in just under it on the first run and just over it on the second (a loaded CI
  # machine) was written anew, and the rerun looked as if it had missed the cache.
  monkeypatch.setattr(compile_cache, 'MIN_COMPILE_S', 0)
  cache = str(tmp_path / 'xla')
  run = lambda out, **kw: fedjax_drift.run(tiny_config(
      tiny_npz, unequal_partition, **{'compile_cache': cache, 'rounds': 2,
                                      'out': str(tmp_path / out), **kw}),
      log=lambda *a, **k: None)
  run('a')
  first = _entries(cache)
  assert first, 'the first run wrote no cache entry'
  run('b')
  assert _entries(cache) == first  # every program of the rerun was found, none written anew
  assert _metrics(tmp_path / 'a') == _metrics(tmp_path / 'b')
  run('c', compile_cache='off')
  assert not jax.config.jax_enable_compilation_cache
  assert _metrics(tmp_path / 'c') == _metrics(tmp_path / 'a')

"""A damaged library in the oneDNN build cache is built again with one line, never loaded
(issue 34 item 3: a truncated one died with a bus error, a garbage one fell back for ever)."""
import os
import shutil
import subprocess
import sys

import pytest

from fedjax_drift.models import onednn

PROBE = ('import sys; from fedjax_drift.models import onednn; '
         'print(onednn.available(), onednn.unavailable_reason())')


@pytest.fixture(name='built')
def _built():
  """The session's library (conftest's build cache), or a skip saying why there is none."""
  if not onednn.available():
    pytest.skip(f'oneDNN extension unavailable: {onednn.unavailable_reason()}')
  return onednn.build()


def test_the_build_writes_a_checksum_that_matches(built):
  assert onednn.intact(built)


def test_a_changed_byte_or_a_missing_checksum_is_not_intact(built, tmp_path):
  copy = str(tmp_path / os.path.basename(built))
  shutil.copy(built, copy)
  assert not onednn.intact(copy)  # no checksum beside it (a cache from before them)
  shutil.copy(built + '.sha256', copy + '.sha256')
  assert onednn.intact(copy)
  with open(copy, 'r+b') as f:
    f.seek(4096)
    f.write(b'\0garbage')
  assert not onednn.intact(copy)


@pytest.mark.slow
@pytest.mark.parametrize('damage', ['truncated', 'garbage'])
def test_a_damaged_cache_entry_is_rebuilt_once_with_one_line(built, tmp_path, damage):
  cache = tmp_path / 'onednn'
  cache.mkdir()
  path = cache / os.path.basename(built)
  shutil.copy(built, path)
  shutil.copy(built + '.sha256', str(path) + '.sha256')
  data = path.read_bytes()
  path.write_bytes(data[:len(data) // 3] if damage == 'truncated' else os.urandom(len(data)))
  env = dict(os.environ, FEDJAX_DRIFT_ONEDNN_CACHE=str(cache), JAX_PLATFORMS='cpu')
  first = subprocess.run([sys.executable, '-c', PROBE], capture_output=True, text=True,
                         env=env, timeout=600)
  assert first.returncode == 0 and first.stdout.startswith('True'), first
  lines = first.stderr.strip().splitlines()
  assert len(lines) == 1 and 'damaged' in lines[0] and str(path) in lines[0], first.stderr
  assert onednn.intact(str(path))
  again = subprocess.run([sys.executable, '-c', PROBE], capture_output=True, text=True,
                         env=env, timeout=600)
  assert again.stdout.startswith('True') and again.stderr == '', again  # once, not each run

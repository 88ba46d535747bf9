"""An unusable compilation cache (read-only, a full disk) is one warning line and the run
compiles without it, instead of JAX's raw warnings (issue 34 item 5)."""
import collections

import jax

from fedjax_drift import compile_cache


def test_a_folder_that_cannot_be_written_is_one_warning_and_off(tmp_path, monkeypatch):
  blocker = tmp_path / 'a_file'
  blocker.write_text('x')  # a folder cannot be made below a file: as a read-only disk
  lines = []
  assert compile_cache.use(str(blocker / 'xla'), log=lines.append) is None
  assert len(lines) == 1 and lines[0].startswith(f'warning: --compile_cache={blocker}/xla: ')
  assert 'compiling without the cache' in lines[0]
  assert not jax.config.jax_enable_compilation_cache


def test_a_nearly_full_disk_is_one_warning_and_off(tmp_path, monkeypatch):
  usage = collections.namedtuple('usage', 'total used free')
  monkeypatch.setattr(compile_cache.shutil, 'disk_usage', lambda p: usage(1 << 30, 0, 1 << 20))
  assert compile_cache.unusable(str(tmp_path)) == 'only 1 MB free'
  lines = []
  assert compile_cache.use(str(tmp_path / 'xla'), log=lines.append) is None
  assert len(lines) == 1 and 'only 1 MB free' in lines[0]


def test_a_writable_folder_is_used_quietly(tmp_path):
  lines = []
  assert compile_cache.use(str(tmp_path / 'xla'), log=lines.append) == str(tmp_path / 'xla')
  assert lines == [] and compile_cache.unusable(str(tmp_path / 'xla')) == ''

"""Who may write: exclusive flocks on a run directory and on an output written beside it.

A run holds `claimed(run_dir, save_params)` from loading to its end: a Lock on the directory
itself (no lock file: the kernel drops the flock when the holder dies, so a killed run never
blocks `--resume`) and, for --save_params outside it, a flock on a lock file beside that
output. A second process asking for either gets a UserError at once, naming the flag.
"""
import contextlib
import errno
import fcntl
import hashlib
import os

from fedjax_drift import report
from fedjax_drift.errors import UserError


class Lock:
  """An exclusive flock on the run directory itself, held until release().

  A second process (or a second Lock in this one) gets a UserError at once. The kernel
  drops the lock when the holder exits, however it dies.
  """

  def __init__(self, run_dir):
    self.run_dir = run_dir
    self._fd = os.open(run_dir, os.O_RDONLY | getattr(os, 'O_DIRECTORY', 0))
    try:
      fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
      os.close(self._fd)
      self._fd = None
      if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
        raise UserError(f'--out={run_dir} is in use by another fedjax-drift process; wait '
                        'for it to finish or pick another --out') from None
      raise

  def release(self):
    if self._fd is not None:
      os.close(self._fd)  # closing the descriptor drops the flock
      self._fd = None

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.release()


def output_lock_path(path) -> str:
  """The lock file beside an output written outside the run directory (--save_params), there
  only while a run holds it: `.fedjax-drift-<16 hex of the name's sha256>.lock` in the same
  folder (fixed length: a 255-character output name is legal, a longer lock name not)."""
  folder, name = os.path.split(os.path.abspath(path))
  tag = hashlib.sha256(name.encode('utf-8', 'surrogateescape')).hexdigest()[:16]
  return os.path.join(folder, f'.fedjax-drift-{tag}.lock')


@contextlib.contextmanager
def output_claimed(path, flag):
  """Holds an exclusive flock on output_lock_path(path) over the block, so that two runs
  started at once with the same output file do not both write it (the later one silently
  replacing the earlier's, both records claiming it): the second gets a UserError naming
  `flag` at once. The lock file is removed after the block; one left by a killed run holds
  nothing (the kernel dropped its flock) and is reused."""
  if not path:
    yield
    return
  lock = output_lock_path(path)
  try:
    fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o600)
  except OSError as e:
    raise UserError(f'{flag}: cannot create {lock} ({os.strerror(e.errno)})') from None
  try:
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
      if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
        raise UserError(f'{flag} is being written by another fedjax-drift run; wait for it to '
                        'finish or pick another file') from None
      raise
    try:
      yield
    finally:
      with contextlib.suppress(OSError):
        os.unlink(lock)  # before the flock drops: a waiting run then makes its own
  finally:
    os.close(fd)


@contextlib.contextmanager
def claimed(run_dir, save_params=''):
  """Creates run_dir if needed and holds its Lock (and output_claimed(save_params)). If the
  block fails and this call created the directory, the directory is removed again when still
  empty (a refused run leaves no trace)."""
  created = not os.path.exists(run_dir)
  try:
    os.makedirs(run_dir, exist_ok=True)
  except OSError as e:
    raise UserError(f'--out={run_dir}: cannot create it ({os.strerror(e.errno)})') from None
  try:
    with Lock(run_dir) as lock, output_claimed(save_params, f'--save_params={save_params}'):
      yield lock
  except BaseException:
    if created and os.path.isdir(run_dir) and not os.listdir(run_dir):
      os.rmdir(run_dir)
    raise
  finally:
    report.stop_recording(run_dir)  # the run's record, if it started one, ends with the lock

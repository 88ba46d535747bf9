"""Ctrl-C at any moment: one line, exit 130, nothing half-written.

`deferred()` holds SIGINT back while a block that must not be cut runs (XLA compilation,
where an interrupt can crash the process; writing a checkpoint or the result files) and
raises KeyboardInterrupt as soon as the block ends. `Interrupted` carries the one line the
CLI prints; `message` mentions --resume only when there is a checkpoint to resume from.
"""
import contextlib
import signal
import threading


class Interrupted(KeyboardInterrupt):
  """A KeyboardInterrupt whose str() is the line to print."""


def message(run_dir, has_checkpoint) -> str:
  """The one line for an interrupted run."""
  if run_dir and has_checkpoint:
    return f'interrupted; continue with --resume --out={run_dir}'
  return 'interrupted before the first checkpoint; nothing to resume'


@contextlib.contextmanager
def deferred():
  """Runs the block with SIGINT held back; raises KeyboardInterrupt after it if one came.

  Outside the main thread (where Python cannot set handlers) the block runs unprotected.
  """
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  caught = []
  previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
  try:
    yield
  finally:
    signal.signal(signal.SIGINT, previous)
  if caught:
    raise KeyboardInterrupt


def ignore():
  """From now on SIGINT does nothing (while the process reports and exits)."""
  if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGINT, signal.SIG_IGN)

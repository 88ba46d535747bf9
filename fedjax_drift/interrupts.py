"""Ctrl-C, SIGTERM and SIGHUP at any moment: one line, exit 128 + the signal, nothing
half-written.

Python runs a signal handler at the next bytecode its main thread executes, and that may be
inside a callback whose exceptions Python prints and drops: jax's `_xla_gc_callback` (run at
every garbage collection, so often the first Python code after a long C++ call such as an XLA
compilation), a `__del__`, a weakref callback. The KeyboardInterrupt is then lost ("Exception
ignored in: <function _xla_gc_callback ...>") and the run trains on as if nothing happened.
So while `guard()` is active (simulation.run and the CLIs hold it):

- SIGINT, SIGTERM and SIGHUP share one handler. The first signal raises `Interrupted` (a
  KeyboardInterrupt that knows its signal: the CLI exits 130, 143 or 129); later ones are only
  counted, so that a second Ctrl-C cannot cut the clean-up of the first.
- An `Interrupted` that Python drops reaches sys.unraisablehook: the guard takes it there
  (no "Exception ignored" text) and delivers the signal again, until it lands in code that
  lets it propagate. `check()` raises a recorded signal that was swallowed some other way.
- `deferred()` holds the raise back over blocks that must not be cut (XLA compilation,
  writing a checkpoint or the metric files) and raises when the block ends.
- Before the guard (while a program imports jax and flax, parses its flags, loads its data)
  and after it, `early()` handles them: installed from the package's first statement
  (fedjax_drift/_start.py, fedjax_drift/__init__.py) when the process is one of the
  package's programs (the console scripts, python -m fedjax_drift.<module>, experiments/*.py),
  before anything but the standard library is imported, it replaces whatever handler the
  process inherited, SIG_IGN included (a run started with `cmd &` from a script, where the
  shell ignores SIGINT: a SIGINT sent to it still ends it). Nothing is open or half-written
  then, so the signal ends the process at once: one line, exit 128 + the signal. Once the
  program's main has returned (its status chosen, its line written) it is ignored, and so it
  is through the interpreter's teardown, where CPython would otherwise let it kill the
  process by the default action with no line (exit -2).
- After `hard_exit_after(seconds)` (the CLIs), a process still alive that long after the
  first signal (C++ code that does not return to Python, or a clean-up that hangs) prints the
  one line and ends with os._exit(128 + signal). It waits for a `deferred(writing=True)` block
  in progress, up to WRITE_GRACE times as long again.
"""
import contextlib
import gc
import os
import signal
import sys
import threading
import time
import _thread

from fedjax_drift import _start

SIGNALS = tuple(getattr(signal, name) for name in ('SIGINT', 'SIGTERM', 'SIGHUP')
                if hasattr(signal, name))
WRITE_GRACE = 5  # a write block in progress may delay the hard exit by this many periods


class Interrupted(KeyboardInterrupt):
  """A KeyboardInterrupt whose str() is the line to print; `signum` is the signal that
  caused it (the CLI exits with 128 + signum)."""

  def __init__(self, line='', signum=signal.SIGINT):
    super().__init__(line)
    self.signum = int(signum)


def exit_code(error) -> int:
  """128 + the signal behind a KeyboardInterrupt (a plain one counts as SIGINT): 130, 143, 129."""
  return 128 + int(getattr(error, 'signum', signal.SIGINT))


def what(signum) -> str:
  """'interrupted' for Ctrl-C, 'stopped by SIGTERM' (SIGHUP, ...) for the others."""
  if signum == signal.SIGINT:
    return 'interrupted'
  try:
    return f'stopped by {signal.Signals(signum).name}'
  except ValueError:
    return f'stopped by signal {signum}'


def message(run_dir, has_checkpoint, signum=signal.SIGINT) -> str:
  """The one line for an interrupted run; inside resume_at(top) it names `top`, which a
  --resume always continues (its config.json is written before any of its runs starts)."""
  if _state.resume_dir:
    return f'{what(signum)}; continue with --resume --out={_state.resume_dir}'
  if run_dir and has_checkpoint:
    return f'{what(signum)}; continue with --resume --out={run_dir}'
  return f'{what(signum)} before the first checkpoint; nothing to resume'


class _State:
  """What the guard knows; signals are per process, so there is one."""

  def __init__(self):
    self.depth = 0            # nesting of guard()
    self.previous = {}        # signal -> handler before the outermost guard
    self.previous_hook = None
    self.signum = None        # the first signal received under the guard
    self.first_at = 0.0
    self.raised = False       # an Interrupted for it is on its way up (not known swallowed)
    self.deferring = 0        # nesting of deferred()
    self.writing = 0          # nesting of deferred(writing=True)
    self.describe = what      # signum -> the line the hard exit prints
    self.hard_exit_s = None
    self.prefix = 'error: '
    self.watchdog = None
    self.reported = False     # the program printed the line itself (ignore())
    self.resume_dir = ''      # the directory message() names instead (resume_at)


_state = _State()


def _in_main_thread():
  return threading.current_thread() is threading.main_thread()


def _raise(signum):
  _state.raised = True
  raise Interrupted(what(signum), signum)


def _handler(signum, frame):
  if _state.signum is None:
    _state.signum, _state.first_at = signum, time.monotonic()
    _start_watchdog()
  if _state.raised or _state.deferring:
    return  # one raise per run; a deferred block raises when it ends
  if _drops_exceptions(frame):
    _deliver_again()  # raising here would only print 'Exception ignored in ...'
    return
  _raise(_state.signum)


def _drops_exceptions(frame):
  """Whether `frame` runs inside code whose exceptions Python prints and drops: a gc callback
  (jax's _xla_gc_callback runs at every collection) or the unraisable hook."""
  codes = {getattr(cb, '__code__', None) for cb in gc.callbacks} | {_unraisable.__code__}
  while frame is not None:
    if frame.f_code in codes:
      return True
    frame = frame.f_back
  return False


def _deliver_again():
  """The signal again in a moment, from a helper thread: _handler then runs at the main
  thread's next bytecode, which is most likely no longer in the callback."""
  signum = _state.signum
  timer = threading.Timer(0.01, _thread.interrupt_main, (signum,))
  timer.daemon = True
  timer.start()


def _unraisable(report):
  """A dropped Interrupted (a __del__, a weakref callback) is delivered again, silently."""
  if isinstance(report.exc_value, KeyboardInterrupt) and _state.signum is not None:
    _state.raised = False
    _deliver_again()
    return
  (_state.previous_hook or sys.__unraisablehook__)(report)


@contextlib.contextmanager
def guard():
  """Installs the handler for SIGINT, SIGTERM and SIGHUP over the block (re-entrant; outside
  the main thread, where Python cannot set handlers, it does nothing). The handlers and the
  unraisable hook before it are restored after it; a signal received under it is forgotten."""
  if not _in_main_thread():
    yield
    return
  if _state.depth == 0:
    _state.previous = {s: signal.signal(s, _handler) for s in SIGNALS}
    _state.previous_hook, sys.unraisablehook = sys.unraisablehook, _unraisable
  _state.depth += 1
  try:
    yield
  finally:
    _state.depth -= 1
    if _state.depth == 0 and not _state.reported:  # else the program is exiting: ignore them
      for s, previous in _state.previous.items():
        signal.signal(s, previous if previous is not None else signal.SIG_DFL)
      if sys.unraisablehook is _unraisable:
        sys.unraisablehook = _state.previous_hook
      if _state.watchdog is None:  # else the hard exit still needs them
        _state.signum, _state.raised, _state.describe = None, False, what


def received():
  """The first signal received under the guard, or None."""
  return _state.signum


def check():
  """Raises Interrupted if a signal came and its raise was swallowed (call it where the run
  may stop: between stages, once per host-loop call)."""
  if _state.signum is not None and not _state.deferring:
    _raise(_state.signum)


@contextlib.contextmanager
def deferred(writing=False):
  """Runs the block with the signals held back; raises Interrupted after it if one came.
  writing: the block writes files (the hard exit waits for it, within limits)."""
  with guard():
    if not _in_main_thread():
      yield
      return
    _state.deferring += 1
    _state.writing += bool(writing)
    try:
      yield
    finally:
      _state.deferring -= 1
      _state.writing -= bool(writing)
    if _state.signum is not None and not _state.deferring and not _state.raised:
      _raise(_state.signum)


@contextlib.contextmanager
def resume_at(run_dir):
  """Within it, message() names `run_dir`: a --grid='algo:...' run is resumed from its top
  directory, never from the sub-directory of the method a signal stopped."""
  before, _state.resume_dir = _state.resume_dir, run_dir
  try:
    yield
  finally:
    _state.resume_dir = before


def describe(line_for_signal):
  """Sets `signum -> line` that the hard exit prints (the run names its --resume)."""
  _state.describe = line_for_signal


def hard_exit_after(seconds, prefix='error: '):
  """From the first signal on, the process ends within `seconds` (longer only while a write
  block finishes), printing `prefix` + the line. For programs, not for notebooks."""
  _state.hard_exit_s, _state.prefix = seconds, prefix


def _start_watchdog():
  if _state.hard_exit_s is None or _state.watchdog is not None:
    return
  _state.watchdog = threading.Thread(target=_watch, name='fedjax-drift-interrupt',
                                     daemon=True)
  _state.watchdog.start()


def _watch():
  period = _state.hard_exit_s
  while True:
    waited = time.monotonic() - _state.first_at
    if waited >= period and not (_state.writing and waited < period * (1 + WRITE_GRACE)):
      break
    time.sleep(0.05)
  signum = _state.signum or signal.SIGINT
  _exit_for(signum, say=not _state.reported)


def _exit_for(signum, say=True):
  """Ends the process at once with 128 + signum, first writing the one line (describe(), or
  what(signum) should that fail) unless say is False."""
  if say:
    try:
      line = _state.describe(signum)
    except Exception:  # pylint: disable=broad-except
      line = what(signum)
    os.write(2, f'{_state.prefix}{line}\n'.encode())
  os._exit(128 + signum)  # pylint: disable=protected-access


def ignore():
  """From now on the signals do nothing (the program has printed its line and exits; a hard
  exit still due prints nothing more)."""
  _state.reported = True
  if _in_main_thread():
    for s in SIGNALS:
      signal.signal(s, signal.SIG_IGN)


def early():
  """Installs the early handler for SIGINT, SIGTERM and SIGHUP, whatever the process
  inherited (SIG_IGN included): until a guard() takes over, and again after it, a signal
  ends the process at once with `error: <line>` (describe(), by default `interrupted` or
  `stopped by SIGTERM`) and exit 128 + the signal; once the program's main has returned, and
  through the interpreter's teardown, it is ignored (fedjax_drift/_start.py). Replaces
  _start.stop, the handler of the program's first statement; a no-op outside the main
  thread."""
  _start.install(_early_handler)


def _early_handler(signum, frame):
  if _state.signum is not None or _state.reported:
    return  # the program is already stopping for a signal and prints its own line
  if _start.main_returned(frame):
    return  # the program has chosen its exit status and written its line
  _exit_for(signum)


# The programs that install the early handler from their first statement (_start.py).
CONSOLE_SCRIPTS, is_program = _start.CONSOLE_SCRIPTS, _start.is_program


def early_if_program():
  """early() when is_program() (fedjax_drift/__init__.py, right after _start's handler): a
  library user's handlers are left alone."""
  if is_program():
    early()

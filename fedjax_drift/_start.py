"""The first code the package's programs run: from their first statement a signal is one line.

The package's first statement (fedjax_drift/__init__.py) holds SIGINT, SIGTERM and SIGHUP
(blocks them: one that comes stays pending) and calls `install_if_program`: in one of the
package's programs (the console scripts, `python -m fedjax_drift...`, experiments/*.py) it
installs `stop` for them, replacing whatever the process inherited (SIG_IGN included), and
releases them, so a signal that came meanwhile reaches `stop`; anywhere else it gives the
mask back and leaves the handlers alone. experiments/*.py hold them the same way as their own
first statement, before they find the package. Holding takes one call into C on a module
Python has already loaded (_signal), so no Python code runs before it: a signal handled
before it is Python's own (its start-up, site, the wrapper pip writes for a console script,
finding the package) and prints Python's KeyboardInterrupt traceback. This module imports
only modules loaded before a program's first statement (os, sys, atexit, _signal; not
`signal`, whose enums take a moment to build). interrupts.early() later replaces `stop` with
its own handler, which names the run's --resume line.

Interpreter teardown: after the last atexit callback CPython resets every handler set from
Python to the default action (SIG_DFL: a SIGINT then ends the process with no line, exit -2)
and spends up to about a second, with jax loaded, destroying modules. `install` registers
`_ignore_from_now` as the first atexit callback, so that it runs last: from then on the
signals are ignored (CPython keeps SIG_IGN) and the program ends with the status it already
chose. A signal while Python runs its earlier exit steps (joining threads, the other atexit
callbacks: the program's main has returned) is ignored likewise.
"""
import atexit
import os
import sys

import _signal  # the C half of `signal`, already loaded: see the module docstring

SIGNALS = tuple(getattr(_signal, name) for name in ('SIGINT', 'SIGTERM', 'SIGHUP')
                if hasattr(_signal, name))
NAMES = {2: 'SIGINT', 15: 'SIGTERM', 1: 'SIGHUP'}
# pyproject.toml's [project.scripts] (tests/test_signals_at_start.py holds them equal).
CONSOLE_SCRIPTS = ('fedjax-drift', 'fedjax-drift-data', 'fedjax-drift-compare')
EXPERIMENTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           'experiments')
_ATEXIT = []  # _ignore_from_now once registered (once only: it must stay the first)


def what(signum) -> str:
  """'interrupted' for Ctrl-C, 'stopped by SIGTERM' (SIGHUP, ...) for the others."""
  if signum == _signal.SIGINT:
    return 'interrupted'
  return f'stopped by {NAMES.get(signum, f"signal {signum}")}'


def main_returned(frame) -> bool:
  """Whether the program's main module has finished, from the frame a handler runs in: the
  outermost frame is no longer __main__'s module code (or runpy's, which imports and runs it
  for `python -m`) but one of Python's exit steps (joining threads, an atexit callback, a
  finalizer), or there is none."""
  outermost = None
  while frame is not None:
    outermost, frame = frame, frame.f_back
  if outermost is None:
    return True
  name = outermost.f_globals.get('__name__')
  return not (name == 'runpy' or (name == '__main__' and outermost.f_code.co_name == '<module>'))


def stop(signum, frame):
  """The handler until interrupts.early() replaces it: nothing is open or half-written yet,
  so `error: interrupted` (or `stopped by SIGTERM`) and exit 128 + the signal, at once."""
  if main_returned(frame):
    return  # the program has chosen its exit status and written its line
  try:
    os.write(2, f'error: {what(signum)}\n'.encode())
  except OSError:  # stderr closed: the exit status still says it
    pass
  os._exit(128 + signum)  # pylint: disable=protected-access


def release():
  """Unblocks the three signals; one that came while they were held is delivered now."""
  if hasattr(_signal, 'pthread_sigmask'):
    _signal.pthread_sigmask(_signal.SIG_UNBLOCK, SIGNALS)


def install(handler=stop):
  """Installs `handler` for the three signals, releases them if held, and ignores them once
  the program's last atexit step has run. Outside the main thread (where Python cannot set
  handlers) it does nothing."""
  try:
    for signum in SIGNALS:
      _signal.signal(signum, handler)
  except ValueError:  # not the main thread
    return
  if not _ATEXIT:
    atexit.register(_ignore_from_now)  # registered before any other, so it runs last
    _ATEXIT.append(_ignore_from_now)
  release()


def _ignore_from_now():
  for signum in SIGNALS:
    _signal.signal(signum, _signal.SIG_IGN)


def install_if_program(held=None):
  """install() when is_program(). Otherwise a library user's handlers are left alone and
  `held`, the signal mask before the package's first statement held the three signals, is
  given back."""
  if is_program():
    install()
  elif held is not None:
    _signal.pthread_sigmask(_signal.SIG_SETMASK, held)


def is_program() -> bool:
  """Whether this process runs one of the package's programs as __main__: a console script
  (CONSOLE_SCRIPTS, by sys.argv[0]), `python -m fedjax_drift...`, or a script in the
  experiments/ folder beside the package. Not a worker a program spawned (its __main__ is
  `__mp_main__`), not an interpreter or a notebook that imports the package."""
  main = sys.modules.get('__main__')
  if main is None or getattr(main, '__name__', '') != '__main__':
    return False
  argv0 = sys.argv[0] if sys.argv else ''
  name = argv0.replace('\\', '/').rsplit('/', 1)[-1]  # a Windows launcher's path too
  for suffix in ('-script.pyw', '-script.py', '.exe'):
    name = name[:-len(suffix)] if name.endswith(suffix) else name
  if name in CONSOLE_SCRIPTS:
    return True
  spec = getattr(main, '__spec__', None)
  if spec is not None and (spec.name or '').startswith('fedjax_drift.'):
    return True
  orig = list(getattr(sys, 'orig_argv', ()))
  if argv0 == '-m' and '-m' in orig[:-1]:  # `python -m fedjax_drift.cli` while it imports us
    return orig[orig.index('-m') + 1].startswith('fedjax_drift.')
  path = getattr(main, '__file__', None)
  if not path:
    return False
  return os.path.dirname(os.path.realpath(path)) == os.path.realpath(EXPERIMENTS)

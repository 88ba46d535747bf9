"""fedjax-drift command line: `python experiments/run.py --algo=fedavg --rounds=50 ...`.

The command line is fedjax_drift/cli.py (installed as `fedjax-drift`); build_parser,
check_flag_names, main and main_exit_code are its functions, here as attributes of this file.
"""
import _signal  # first of all (already loaded: no Python code runs before the hold)
if __name__ == '__main__' and hasattr(_signal, 'pthread_sigmask'):  # POSIX
  # Hold SIGINT, SIGTERM and SIGHUP until the package's first statement installs their
  # one-line handler and releases them (fedjax_drift/_start.py): one line and 128 + the
  # signal from here on, never Python's KeyboardInterrupt traceback.
  _signal.pthread_sigmask(_signal.SIG_BLOCK, (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP))
import pathlib  # noqa: E402
import sys  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this clone's fedjax_drift, installed or not

# The package's first statement installs the one-line signal handlers and releases them.
from fedjax_drift import _start, cli  # noqa: E402  pylint: disable=wrong-import-position

_start.release()  # (done already, unless the package was imported before this script)

HARD_EXIT_S, main, main_exit_code = cli.HARD_EXIT_S, cli.main, cli.main_exit_code
build_parser, check_flag_names = cli.build_parser, cli.check_flag_names

if __name__ == '__main__':
  sys.exit(main_exit_code())

"""Compare run directories: `python experiments/compare.py RUN_DIR... [--out=DIR]`.

One table (markdown + csv: per run directory and grid point, final and best test accuracy,
mean +- std over seeds, number of seeds) and one accuracy plot with the seeds' spread; see
fedjax_drift/compare.py (also installed as `fedjax-drift-compare`).
"""
import _signal  # first of all (already loaded: no Python code runs before the hold)
if __name__ == '__main__' and hasattr(_signal, 'pthread_sigmask'):  # POSIX
  # Hold SIGINT, SIGTERM and SIGHUP until the package's first statement installs their
  # one-line handler and releases them (fedjax_drift/_start.py): one line and 128 + the
  # signal from here on, never Python's KeyboardInterrupt traceback.
  _signal.pthread_sigmask(_signal.SIG_BLOCK, (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP))
import pathlib  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from fedjax_drift import _start, compare  # noqa: E402  pylint: disable=g-import-not-at-top

_start.release()  # (done already by the package's first statement, unless imported before)

if __name__ == '__main__':
  sys.exit(compare.main())

"""fedjax-drift command line: `python experiments/run.py --algo=fedavg --rounds=50 ...`.

The command line is fedjax_drift/cli.py (installed as `fedjax-drift`); build_parser,
check_flag_names, main and main_exit_code are its functions, here as attributes of this file.
"""
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this clone's fedjax_drift, installed or not

# The package's first statement installs the one-line signal handlers (interrupts.early),
# before it imports jax: a Ctrl-C from here on is one line and exit 130.
from fedjax_drift import cli  # noqa: E402  pylint: disable=wrong-import-position

HARD_EXIT_S, main, main_exit_code = cli.HARD_EXIT_S, cli.main, cli.main_exit_code
build_parser, check_flag_names = cli.build_parser, cli.check_flag_names

if __name__ == '__main__':
  sys.exit(main_exit_code())

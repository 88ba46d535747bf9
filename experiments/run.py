"""fedjax-drift command line: `python experiments/run.py --algo=fedavg --rounds=50 ...`.

The command line is fedjax_drift/cli.py (installed as `fedjax-drift`); build_parser,
check_flag_names, main and main_exit_code are its functions, here as attributes of this file.
"""
import importlib.util
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this clone's fedjax_drift, installed or not

# Loaded by its path, not `from fedjax_drift import cli`: that would import the package (jax)
# here, before main_exit_code's signal handlers, and a signal while importing would be a
# traceback instead of one line.
_SPEC = importlib.util.spec_from_file_location('fedjax_drift_cli',
                                               ROOT / 'fedjax_drift' / 'cli.py')
cli = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(cli)
HARD_EXIT_S, main, main_exit_code = cli.HARD_EXIT_S, cli.main, cli.main_exit_code
build_parser, check_flag_names = cli.build_parser, cli.check_flag_names

if __name__ == '__main__':
  sys.exit(main_exit_code())

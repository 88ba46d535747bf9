"""The five papers' experiments at the papers' own settings: `python experiments/presets.py NAME`.

    python experiments/presets.py --list                      # every experiment and its preset
    python experiments/presets.py fedadc_table --show         # the settings table, no run
    python experiments/presets.py fedadc_table --mode=full    # the paper's set-up (GPU-sized)
    python experiments/presets.py fedadc_table                # short: same set-up, cut
    python experiments/presets.py fedadc_table --mode=cpu     # cpu: minutes on a laptop CPU
    python experiments/presets.py all --write_doc             # rewrite experiments/PRESETS.md

The settings are data: one TOML table per paper in experiments/presets/ (fedadc.toml,
fedadc_conf.toml, fedfor.toml, fedgkd.toml, igfl.toml). Every value there carries its source
(`{v = VALUE, src = "paper section/table, quoted"}`, or "not stated: our choice, why"); this
script and its library experiments/presetlib/ only read them, resolve each (scenario, method)
into a fedjax_drift.Config and run it.

`--mode=full` is the paper's set-up. `--mode=short` keeps model, data, partition, clients,
local work and fixed hyperparameters, and cuts only what the preset's `short` entry lists
(rounds, seeds, one grid point, some scenarios); `--rounds`/`--seeds` override the cut.
`--mode=cpu` keeps the paper's methods, partition, clients per round, local work and full
grids, and moves every preset by one rule (cpu_values, CPU_WHY) to the embedded Fashion-MNIST
subset with a small model, at most CPU_ROUNDS rounds and CPU_SEEDS seeds; presets on text or
multi-domain data are left out of it in one line (CPU_LEFT_OUT).

A setting that this build lacks (a flag not in Config, a dataset not in sources.datasets(), a
model not in models.zoo.models(), an algorithm not in algorithms.names()) leaves that run
*pending*: it is listed with what it needs and refused in one line, and becomes live by itself
when the piece lands. A pipeline flag set to the value the code behaves as without it (for
example --augment=none) is not a missing piece (TODAY below).

Each method runs its grid x seeds through `fedjax_drift.run`. `--select_on=validation` (the
default) holds SELECTION's validation split out of the clients' training data (a preset may
set its own val_fraction/val_source) and picks the grid point with the best mean of the
paper's metric on it; `--select_on=test` is the papers' protocol (no split, the point with the
best mean test metric). Either way the table reports the test accuracy of the chosen point:
mean and 95% t-interval over the seeds, and each method's paired difference to FedAvg and to
the paper's own method (fedjax_drift/tables.py). Outputs go to --out (default
runs/presets/<preset>-<mode>/ under the current directory): table.md, results.json and one
accuracy plot per scenario. An --out that already holds results is refused without
--overwrite (start again) or --resume (keep its runs, write the tables again).

Each method sweep runs in its own run directory, OUT/runs/<scenario>-<method>: the same
command run again into the same --out (after Ctrl-C, a kill, a crash) keeps the finished
sweeps and resumes the others from their checkpoints, to the tables of an uninterrupted run.
Sweeps with the same resolved settings and data (the cpu tier maps several datasets to one)
run once per command: the others' run directories link to its (presetlib/sharing.py, the
tables the same cell for cell; --no_share runs each on its own). A method's scenarios that
differ only in scenario axes (alpha, shards, clients per round, local epochs or steps) run as
one sweep over those axes, OUT/runs/<method>-<scenario>+<scenario>...: one program where
there were several, the same tables (presetlib/grouping.py; --no_group runs each apart).
Any other --flag=value is a run flag (fedjax-drift --help) set over every run of the preset.
--executor=slurm submits the sweeps as SLURM jobs through submitit (presetlib/cluster.py).
"""
import _signal  # first of all (already loaded: no Python code runs before the hold)
if __name__ == '__main__' and hasattr(_signal, 'pthread_sigmask'):  # POSIX
  # Hold SIGINT, SIGTERM and SIGHUP until the package's first statement installs their
  # one-line handler and releases them (fedjax_drift/_start.py): one line and 128 + the
  # signal from here on, never Python's KeyboardInterrupt traceback.
  _signal.pthread_sigmask(_signal.SIG_BLOCK, (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP))
import os  # noqa: E402
import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import fedjax_drift  # noqa: E402
from fedjax_drift import _start, cli, interrupts, report, tables  # noqa: E402,F401
_start.release()  # (done already by the package's first statement, unless imported before)
from fedjax_drift.errors import did_you_mean  # noqa: E402
from fedjax_drift.config import grid_points, parse_grid  # noqa: E402,F401
# The library's names, re-exported: tests and experiments/collect_results.py use them as
# `presets.NAME` after `import presets`.
from presetlib.documents import (  # noqa: E402,F401
    DOC, command, cuts, document, experiment_table, list_text, results_table, selection_text,
    settings_table, work_line)
from presetlib.estimates import (  # noqa: E402,F401
    CPU_GFLOPS, CPU_MFLOP, XLA_COST, cost_key, estimate, sample_gradients)
from presetlib.cluster import (  # noqa: E402,F401
    EXECUTORS, ClusterRunner, read_job_files, run_job)
from presetlib.cluster import executor as cluster_executor  # noqa: E402
from presetlib.jobs import (  # noqa: E402,F401
    Runner, accuracy_column, check_data, read_runs, run_method, run_metrics, summarise)
from presetlib.loading import (  # noqa: E402,F401
    EXPERIMENTS, NS, PAPERS, PRESETS, TABLES, _normalise, load)
from presetlib.plans import (  # noqa: E402,F401
    PIPELINE, TODAY, configs, missing, pending, pending_line, plan, to_config)
from presetlib.provenance import jax_backend, write_provenance  # noqa: E402,F401
from presetlib.running import (  # noqa: E402,F401
    COMMITTED, OVERWRITE, check_out, default_out, run_preset, selection_overrides, start_preset)
from presetlib.sharing import Sharing, sweep_key  # noqa: E402,F401
from presetlib.tiers import (  # noqa: E402,F401
    CPU_CLIENTS, CPU_DATA, CPU_DROP, CPU_GENERATOR, CPU_LEFT_OUT, CPU_PROJECTION_HIDDEN,
    CPU_ROUNDS, CPU_SEEDS, CPU_WHY, NO_SPLIT, SELECTION, TRAIN_SIZE, cpu_clients, cpu_left_out,
    cpu_values, method_grid, resolve, scaled_shift_count, scenario_names)


HARD_EXIT_S = 20  # after a signal the command ends within this (workers get STOP_GRACE_S)
RESUME_HINT = ('rerun the same command to continue: finished methods are kept, interrupted '
               'ones resume from their checkpoints')


def _refuse(message):
  """argparse's error: one line (main prints it), no usage dump."""
  raise fedjax_drift.UserError(message)


def build_parser():
  """The command line's argparse.ArgumentParser (its own flags; any other --flag=value is a
  run flag, set over every run of the preset: run_flags)."""
  parser = argparse.ArgumentParser(
      description=__doc__.splitlines()[0], allow_abbrev=False,
      epilog='Any run flag (fedjax-drift --help), e.g. --image_size=32, --seed=100 (a seed '
      'offset), --num_clients=50, --run_chunk=4, is set over every run of the preset.')
  parser.error = _refuse
  parser.add_argument('preset', nargs='?', help='a preset (--list), or all')
  parser.add_argument('--mode', choices=('cpu', 'short', 'full'), default='short',
                      help='cpu: the paper\'s methods and grids on the embedded data with an '
                      'MLP (minutes here); short and full: the paper\'s data and models, for '
                      'accelerators')
  parser.add_argument('--out', default='', help='results directory (default '
                      'runs/presets/<preset>-<mode> under the current directory); a rerun '
                      'into it keeps the finished methods\' runs and resumes the others')
  parser.add_argument('--overwrite', action='store_true',
                      help='replace the results and runs already in --out')
  parser.add_argument('--resume', action='store_true',
                      help='--out holds a finished preset: keep its runs (finishing any not '
                      'finished) and write its tables again')
  parser.add_argument('--only', default='', help='comma list of method labels to run')
  parser.add_argument('--dataset', default='', help='override the preset\'s dataset')
  parser.add_argument('--data_dir', default='', help='directory of the dataset\'s files')
  parser.add_argument('--rounds', type=int, default=0, help='override the rounds')
  parser.add_argument('--seeds', type=int, default=0, help='override the number of seeds')
  parser.add_argument('--select_on', choices=('validation', 'test'), default='validation',
                      help='pick each method\'s grid point by a validation split held out of '
                      'the clients\' training data (default), or by test accuracy as the papers '
                      'did (then no split is held out)')
  parser.add_argument('--val_fraction', type=float, default=None,
                      help=f'validation share (default {SELECTION["val_fraction"]:g}, or the '
                      'preset\'s own; 0 with --select_on=test)')
  parser.add_argument('--jobs', type=int, default=1,
                      help='methods run at a time, each in its own process (results are the '
                      'same; 2 on a 2-core CPU overlaps compilation and plotting)')
  parser.add_argument('--executor', choices=EXECUTORS, default='local',
                      help='local: --jobs processes here; slurm: one SLURM job per (scenario, '
                      'method) sweep through submitit (pip install ".[slurm]"), each resuming '
                      'its own run directory, a rerun submitting only what is not finished; '
                      'submitit_local: the same path through submitit\'s local executor')
  parser.add_argument('--slurm_partition', default='', help='--executor=slurm: the partition')
  parser.add_argument('--slurm_time', type=int, default=240,
                      help='--executor=slurm: each job\'s time limit in minutes (a job cut by '
                      'it resumes from its checkpoint when the command is run again)')
  parser.add_argument('--gpus_per_job', type=int, default=1,
                      help='--executor=slurm: GPUs per job')
  parser.add_argument('--slurm_array', type=int, default=0,
                      help='--executor=slurm: jobs of the array running at once (0 = all)')
  parser.add_argument('--no_share', action='store_true',
                      help='run every method sweep in its own run directory, even one whose '
                      'settings and data another sweep of the command already has (by '
                      'default that one runs once and the others link to its runs: same '
                      'tables)')
  parser.add_argument('--no_group', action='store_true',
                      help="run each scenario's method sweep as its own program (by default a "
                      "method's scenarios that differ only in scenario axes, alpha, shards, "
                      "clients per round, local epochs or steps, run as one sweep over those "
                      'axes: same tables, fewer programs)')
  parser.add_argument('--show', action='store_true', help='print the settings table only')
  parser.add_argument('--list', action='store_true',
                      help='list the experiments, their presets and the modes each runs in')
  parser.add_argument('--write_doc', action='store_true', help=f'rewrite {DOC}')
  return parser


def parse_args(argv):
  """(presets.py's flags, {Config field: value} of the run flags given) from argv; one-line
  UserError for a mistake (an unknown flag or preset names the closest)."""
  args, rest = build_parser().parse_known_args(argv)
  run_parser = cli.build_parser(fedjax_drift.Config, suppress_defaults=True)
  run_parser.error = _refuse
  stray = [t for t in rest if not t.startswith('--')]
  if stray:
    raise fedjax_drift.UserError(f'unexpected argument {stray[0]!r}; run flags are written '
                                 '--flag=value')
  cli.check_flag_names(run_parser, rest)
  flags = vars(run_parser.parse_args(rest))
  if args.preset and args.preset != 'all' and args.preset not in PRESETS:
    raise fedjax_drift.UserError(f'unknown preset {args.preset!r}'
                                 f'{did_you_mean(args.preset, PRESETS)}; --list names them')
  return args, flags


def _start(args, names, only, runner, flags):
  """Prints the settings tables (--show), or starts every preset of `names`: [(out, finish)];
  sweeps with the same settings run once across them (Sharing, unless --no_share)."""
  finishing, sharing = [], Sharing(runner, not args.no_share)
  for name in names:
    if only and not set(only) <= set(PRESETS[name]['methods']):
      raise fedjax_drift.UserError(f'--only: {name} has no method '
                                   f'{sorted(set(only) - set(PRESETS[name]["methods"]))[0]}')
    if args.show:
      print(settings_table(name, args.mode, args.rounds or None, args.seeds or None,
                           resolved=True))
      continue
    if len(names) > 1 and not configs(name, args.mode):  # `all`: say why, go on
      print(f'{name}: skipped, {pending_line(name, args.mode)}')
      continue
    out = args.out if len(names) == 1 else os.path.join(args.out, f'{name}-{args.mode}')
    out = out if args.out else default_out(name, args.mode)
    finishing.append((out, start_preset(
        name, args.mode, args.data_dir, args.dataset, args.rounds or None,
        args.seeds or None, out, only, args.overwrite, print, args.select_on,
        args.val_fraction, runner, args.resume, flags, sharing, not args.no_group)))
  if sharing.shared:
    print(f'{sharing.ran + sharing.shared} method sweep(s): {sharing.ran} run, '
          f'{sharing.shared} read the runs of a sweep with the same settings')
  return finishing


def _finish(args, names, finishing, started, load_start):
  """Waits for every started preset, writes their provenance; the exit status."""
  finished, failed = [], []
  for out, finish in finishing:
    try:
      finish()
    except fedjax_drift.UserError as e:
      if len(names) == 1:
        raise
      failed.append(out)  # `all`: one preset's error does not lose the others' results
      sys.stderr.write(f'error: {os.path.basename(out)}: {e}\n')
      continue
    finished.append((out, time.time() - started))
  for out, after in finished:  # the whole command's time is known only now
    write_provenance(out, started, after, load_start, len(finished), args.jobs)
  if failed:
    sys.stderr.write(f'error: {len(failed)} preset(s) failed: '
                     f'{", ".join(os.path.basename(f) for f in failed)}\n')
    return 2
  return 0


def _runner(args, names):
  """The executor of --executor: a Runner (--jobs here) or a ClusterRunner (submitit)."""
  if args.executor == 'local':
    return Runner(args.jobs)
  root = args.out or (default_out(names[0], args.mode) if len(names) == 1 else
                      os.path.join('runs', 'presets'))
  gpus = args.gpus_per_job if args.executor == 'slurm' else 0
  return ClusterRunner(cluster_executor(args.executor, os.path.join(root, 'submitit'),
                                        args.slurm_partition, args.slurm_time, gpus,
                                        args.slurm_array))


def main(argv=None):
  """The command line (argv, default sys.argv[1:]) -> exit status: 0; 2 after a one-line
  error; 128 + the signal after SIGINT, SIGTERM or SIGHUP (one line, workers stopped)."""
  sys.stdout.reconfigure(line_buffering=True)  # a log file follows the run line by line
  interrupts.hard_exit_after(HARD_EXIT_S)
  runner = None
  with interrupts.guard():
    try:
      args, flags = parse_args(sys.argv[1:] if argv is None else list(argv))
      if args.list or not args.preset:
        print(list_text())
        return 0
      if args.write_doc:
        report.atomic_write(DOC, document().encode())
        return 0
      names = list(PRESETS) if args.preset == 'all' else [args.preset]
      only = tuple(x.strip() for x in args.only.split(',') if x.strip()) or None
      started, load_start = time.time(), os.getloadavg()[0]
      runner = Runner(1) if args.show else _runner(args, names)  # --show starts nothing
      code = _finish(args, names, _start(args, names, only, runner, flags), started,
                     load_start)
      runner.close()
      return code
    except fedjax_drift.UserError as e:
      sys.stderr.write(f'error: {e}\n')
      return 2
    except KeyboardInterrupt as e:
      interrupts.ignore()  # a second Ctrl-C adds nothing
      signum = interrupts.received() or getattr(e, 'signum', signal.SIGINT)
      if runner is not None:
        runner.abort()
      sys.stderr.write(f'error: {interrupts.what(signum)}; {RESUME_HINT}\n')
      return 128 + signum
    finally:
      if runner is not None:
        runner.abort()  # after an error: workers still running are stopped (no-op if closed)


def main_exit_code():
  """main()'s exit code; an interrupted command ends at once after its line (interpreter
  teardown with XLA's threads cut mid-work can crash)."""
  try:
    code = main()
  except BrokenPipeError:  # `presets.py --list | head`: the reader has what it wanted
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
  if code > 128:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # pylint: disable=protected-access
  return code


if __name__ == '__main__':
  sys.exit(main_exit_code())

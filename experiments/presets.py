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

A setting that this build lacks (a flag not in Config, a dataset not in sources.DATASETS, a
model not in models.zoo.MODELS, an algorithm not in algorithms.NAMES) leaves that run
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
--overwrite.
"""
import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import fedjax_drift  # noqa: E402
from fedjax_drift import report, tables  # noqa: E402,F401
from fedjax_drift.config import grid_points, parse_grid  # noqa: E402,F401
# The library's names, re-exported: tests and experiments/collect_results.py use them as
# `presets.NAME` after `import presets`.
from presetlib.documents import (  # noqa: E402,F401
    DOC, command, cuts, document, experiment_table, list_text, results_table, selection_text,
    settings_table, work_line)
from presetlib.estimates import (  # noqa: E402,F401
    CPU_GFLOPS, CPU_MFLOP, MFLOP_PER_SAMPLE, estimate, sample_gradients)
from presetlib.jobs import (  # noqa: E402,F401
    Runner, accuracy_column, check_data, read_runs, run_method, run_metrics, summarise)
from presetlib.loading import (  # noqa: E402,F401
    EXPERIMENTS, NS, PAPERS, PRESETS, TABLES, _normalise, load)
from presetlib.plans import (  # noqa: E402,F401
    PIPELINE, TODAY, configs, missing, pending, pending_line, plan, to_config)
from presetlib.provenance import jax_backend, write_provenance  # noqa: E402,F401
from presetlib.running import (  # noqa: E402,F401
    COMMITTED, OVERWRITE, check_out, default_out, run_preset, selection_overrides, start_preset)
from presetlib.tiers import (  # noqa: E402,F401
    CPU_CLIENTS, CPU_DATA, CPU_DROP, CPU_GENERATOR, CPU_LEFT_OUT, CPU_PROJECTION_HIDDEN,
    CPU_ROUNDS, CPU_SEEDS, CPU_WHY, NO_SPLIT, SELECTION, TRAIN_SIZE, cpu_clients, cpu_left_out,
    cpu_values, method_grid, resolve, scaled_shift_count, scenario_names)


def build_parser():
  """The command line's argparse.ArgumentParser."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('preset', nargs='?', choices=sorted(PRESETS) + ['all'])
  parser.add_argument('--mode', choices=('cpu', 'short', 'full'), default='short',
                      help='cpu: the paper\'s methods and grids on the embedded data with an '
                      'MLP (minutes here); short and full: the paper\'s data and models, for '
                      'accelerators')
  parser.add_argument('--out', default='', help='results directory (default '
                      'runs/presets/<preset>-<mode> under the current directory)')
  parser.add_argument('--overwrite', action='store_true',
                      help='replace the results already in --out')
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
  parser.add_argument('--show', action='store_true', help='print the settings table only')
  parser.add_argument('--list', action='store_true', help='list the experiments and presets')
  parser.add_argument('--write_doc', action='store_true', help=f'rewrite {DOC}')
  return parser


def _start(args, names, only, runner):
  """Prints the settings tables (--show), or starts every preset of `names`: [(out, finish)]."""
  finishing = []
  for name in names:
    if only and not set(only) <= set(PRESETS[name]['methods']):
      raise fedjax_drift.UserError(f'--only: {name} has no method '
                                   f'{sorted(set(only) - set(PRESETS[name]["methods"]))[0]}')
    if args.show:
      print(settings_table(name, args.mode, args.rounds or None, args.seeds or None))
      continue
    if len(names) > 1 and not configs(name, args.mode):  # `all`: say why, go on
      print(f'{name}: skipped, {pending_line(name, args.mode)}')
      continue
    out = args.out if len(names) == 1 else os.path.join(args.out, f'{name}-{args.mode}')
    out = out if args.out else default_out(name, args.mode)
    finishing.append((out, start_preset(
        name, args.mode, args.data_dir, args.dataset, args.rounds or None,
        args.seeds or None, out, only, args.overwrite, print, args.select_on,
        args.val_fraction, runner)))
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


def main():
  """The command line (sys.argv) -> exit status: 0, or 2 after a one-line error."""
  args = build_parser().parse_args()
  if args.list or not args.preset:
    print(list_text())
    return 0
  if args.write_doc:
    report.atomic_write(DOC, document().encode())
    return 0
  names = list(PRESETS) if args.preset == 'all' else [args.preset]
  only = tuple(x.strip() for x in args.only.split(',') if x.strip()) or None
  runner, started, load_start = None, time.time(), os.getloadavg()[0]
  try:
    runner = Runner(args.jobs)
    return _finish(args, names, _start(args, names, only, runner), started, load_start)
  except fedjax_drift.UserError as e:
    sys.stderr.write(f'error: {e}\n')
    return 2
  finally:
    if runner is not None:
      runner.close()


if __name__ == '__main__':
  sys.exit(main())

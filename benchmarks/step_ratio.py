"""Heterogeneous clients: the local steps a round computes against the steps its clients own.

    python benchmarks/step_ratio.py                  # Dir(0.1), 100 clients, cohorts of 10
    python benchmarks/step_ratio.py --alpha=0.5 --runs=5 --quick

A client owns H_i = E * ceil(n_i / B) steps (engine.client_steps). Its local loop is a
`fori_loop` whose trip count is the client's own, so a client run alone computes exactly H_i.
Batched, the loop becomes a while loop that runs until every lane is done, every lane
computing each step (finished lanes are masked, not skipped). So a round computes
- sequential clients, one run: sum_i H_i (ratio 1);
- clients vmapped in chunks of c: sum over chunks of c * max H in the chunk;
- R runs vmapped (seeds or grid points on the run axis), clients sequential: at each cohort
  position, R * max over the runs of that position's H;
and the ratio is computed / owned. With --epochs_grid (a --grid over local_epochs, issue 46
item 2) the runs are every E's seeds in the study's run order (each E's seeds together, a
seed's cohorts shared by its E values, as the study draws them), and the rows add the run
chunk: every run vmapped together (each computes the largest E's steps), --run_chunk=<seeds>
(one E per chunk: each chunk's loop stops at its own longest client) and --run_chunk=1. The same partition, cohorts drawn as the engine draws them
(uniform without replacement), with the cohort in sampling order ('as drawn') and sorted by
H, largest first ('largest first', sampling.largest_first), which puts like with like in a
chunk and across runs. Counts, not times: the figure holds on any machine. Writes
benchmarks/results/step-ratio-<date>.json (or --out) and prints a table.
"""
import argparse
import datetime
import json
import os

import numpy as np

from fedjax_drift import engine
from fedjax_drift.data import partitions


def cohort_ids(num_clients, rounds, cohort, runs, seed):
  """[rounds, runs, cohort] client ids, drawn uniformly without replacement per run and round."""
  rng = np.random.default_rng(seed)
  return np.stack([np.stack([rng.choice(num_clients, cohort, replace=False)
                             for _ in range(runs)]) for _ in range(rounds)])


def owned(sizes, epochs, batch_size):
  """H_i = E * ceil(n_i / B) of every client (engine.client_steps)."""
  return engine.client_steps(np.asarray(sizes),
                             engine.Schedule(batch_size=batch_size, local_epochs=epochs))


def cohort_steps(sizes, rounds, cohort, runs, seed, epochs, batch_size):
  """[rounds, runs, cohort] local steps of the sampled clients, each run its own cohorts."""
  return owned(sizes, epochs, batch_size)[cohort_ids(len(sizes), rounds, cohort, runs, seed)]


def grid_steps(sizes, rounds, cohort, seeds, seed, epochs_grid, batch_size):
  """[rounds, runs, cohort] of a --grid over local_epochs x seeds: runs in the study's order
  (E-major, its seeds together), the runs of one seed sharing its cohorts."""
  ids = cohort_ids(len(sizes), rounds, cohort, seeds, seed)
  return np.concatenate([owned(sizes, e, batch_size)[ids] for e in epochs_grid], axis=1)


def computed(steps, chunk, largest_first, run_chunk=0):
  """Steps computed for [rounds, runs, cohort] owned steps: runs vmapped together in groups
  of `run_chunk` (0: all) run one after another, clients in vmapped chunks of `chunk`
  (1: sequential) run one after another within each."""
  if largest_first:
    steps = -np.sort(-steps, axis=-1)
  rounds, runs, cohort = steps.shape
  total, run_chunk = 0, run_chunk or runs
  for first_run in range(0, runs, run_chunk):
    group = steps[:, first_run:first_run + run_chunk]
    for start in range(0, cohort, chunk):
      block = group[:, :, start:start + chunk]
      total += (block.shape[1] * block.shape[-1] * block.max(axis=(1, 2))).sum()
  return int(total)


def grid_table(sizes, args):
  """One row per (run chunk, client chunk) of the --epochs_grid sweep."""
  grid = [int(e) for e in args.epochs_grid.split(',')]
  steps = grid_steps(sizes, args.rounds, args.cohort, args.runs, args.seed, grid,
                     args.batch_size)
  total = int(steps.sum())
  rows = []
  for run_chunk in (0, args.runs, 1):
    for chunk in sorted({1, args.chunk, args.cohort}):
      rows.append({'run_chunk': run_chunk or steps.shape[1], 'chunk': chunk,
                   'owned_steps': total,
                   **{name: computed(steps, chunk, first, run_chunk) / total
                      for name, first in (('as_drawn', False), ('largest_first', True))}})
  return rows


def table(sizes, args):
  """One row per (runs, chunk) case: owned and computed steps, both orders."""
  rows = []
  for runs in sorted({1, args.runs}):
    steps = cohort_steps(sizes, args.rounds, args.cohort, runs, args.seed, args.epochs,
                         args.batch_size)
    owned = int(steps.sum())
    for chunk in sorted({1, args.chunk, args.cohort}):
      row = {'runs': runs, 'chunk': chunk, 'owned_steps': owned}
      for name, first in (('as_drawn', False), ('largest_first', True)):
        row[name] = computed(steps, chunk, first) / owned
      rows.append(row)
  return rows


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--alpha', type=float, default=0.1)
  parser.add_argument('--examples', type=int, default=50000)
  parser.add_argument('--classes', type=int, default=10)
  parser.add_argument('--clients', type=int, default=100)
  parser.add_argument('--cohort', type=int, default=10)
  parser.add_argument('--chunk', type=int, default=5, help='a vmapped chunk width to show')
  parser.add_argument('--runs', type=int, default=3, help='runs on the run axis (seeds)')
  parser.add_argument('--rounds', type=int, default=200)
  parser.add_argument('--epochs', type=int, default=1)
  parser.add_argument('--batch_size', type=int, default=50)
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--epochs_grid', default='', help="a --grid over local_epochs, e.g. "
                      "'1,2,4,8,16': its runs are --runs seeds per E (overrides --epochs)")
  parser.add_argument('--quick', action='store_true', help='a small case (tests)')
  parser.add_argument('--out', default='', help='the JSON file to write (default: '
                      'benchmarks/results/step-ratio-<date>.json)')
  args = parser.parse_args(argv)
  if args.quick:
    args.examples, args.clients, args.rounds = 2000, 20, 20
  labels = np.arange(args.examples) % args.classes
  parts = partitions.dirichlet(labels, args.clients, np.random.default_rng(args.seed),
                               args.alpha)
  sizes = [len(p) for p in parts]
  rows = grid_table(sizes, args) if args.epochs_grid else table(sizes, args)
  result = {'args': vars(args), 'client_sizes': {'min': min(sizes), 'max': max(sizes)},
            'rows': rows}
  print(f'Dir({args.alpha}) over {args.clients} clients: sizes {min(sizes)}..{max(sizes)}'
        + (f'; E in {args.epochs_grid} x {args.runs} seeds' if args.epochs_grid else ''))
  first = 'run_chunk' if args.epochs_grid else 'runs'
  print(f'{first} chunk  computed/owned: as drawn  largest first')
  for r in rows:
    print(f'{r[first]:{len(first)}d} {r["chunk"]:5d}  {r["as_drawn"]:22.2f}  '
          f'{r["largest_first"]:13.2f}')
  path = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), 'results',
                                  f'step-ratio-{datetime.date.today()}.json')
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, 'w') as f:
    json.dump(result, f, indent=1)
  print(f'wrote {path}')
  return result


if __name__ == '__main__':
  main()

"""The default run, timed end to end, interleaved against variants (A B A B ..., a process each).

    python benchmarks/default_run.py --reps=2 --rounds=50 [--baseline_repo=../old-checkout]

Variants:
  new          this checkout, the progress bar woken about every second (the default)
  new-per-eval this checkout, the host woken only at evaluations (SECONDS_PER_CALL = 1e9):
               the cost of steady feedback is new / new-per-eval
  baseline     experiments/run.py of another checkout (--baseline_repo), e.g. the commit
               before a change, for "no slower" checks
Reports, per variant, the median and range of the process wall time and of the training
loop time (summary.json: train_time_s, or wall_time_s in checkouts that predate it).
"""
import argparse
import json
import os
import sys
import tempfile

import interleave

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PER_EVAL = ('import sys, runpy; sys.path.insert(0, {root!r}); '
            'import fedjax_drift.simulation as s; s.SECONDS_PER_CALL = 1e9; '
            'sys.argv = ["run.py"] + sys.argv[1:]; '
            'runpy.run_path({run!r}, run_name="__main__")')


def command(variant, baseline_repo):
  run = os.path.join(ROOT, 'experiments', 'run.py')
  if variant == 'new':
    return [sys.executable, run]
  if variant == 'new-per-eval':
    return [sys.executable, '-c', PER_EVAL.format(root=ROOT, run=run)]
  return [sys.executable, os.path.join(baseline_repo, 'experiments', 'run.py')]


def one(variant, args, out):
  """One process of `variant` (interleave.timed_run)."""
  cold = [] if variant == 'baseline' else ['--compile_cache=off']  # every rep compiles
  return interleave.timed_run(command(variant, args.baseline_repo) + cold, variant, out,
                              args.rounds)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--reps', type=int, default=2)
  parser.add_argument('--rounds', type=int, default=50)
  parser.add_argument('--baseline_repo', default='')
  parser.add_argument('--variants', default='')
  args = parser.parse_args()
  variants = (args.variants.split(',') if args.variants else
              ['new', 'new-per-eval'] + (['baseline'] if args.baseline_repo else []))
  with tempfile.TemporaryDirectory() as tmp:
    results = interleave.repeat(
        variants, args.reps, lambda v, rep: one(v, args, os.path.join(tmp, f'{v}-{rep}')),
        lambda v, rep, r: print(v, rep, r, flush=True))
  interleave.print_medians(results, ('process_s', 'loop_s'))
  print(json.dumps(results))


if __name__ == '__main__':
  main()

"""A cpu-tier preset at one round, timed: what each of its programs costs besides training
(tracing and compiling, the run directory's files and figures), against this checkout or
another one, interleaved.

    python benchmarks/program_costs.py --reps=3
    python benchmarks/program_costs.py --reps=3 --compare=/path/to/an/older/checkout

Each repetition runs `experiments/presets.py PRESET --mode=cpu --rounds=1 --seeds=1 --jobs=1`
in a fresh process per checkout (A B A B ..., so the machine's drift falls on both alike),
each with an empty tool cache (a first run of the tier compiles everything), and
writes benchmarks/results/program-costs-<date>.json with each checkout's per-repetition
seconds, median and spread: the command's wall time, and the sums over its runs'
summary.json of compilation (tracing, lowering and XLA: `compile_s`) and training
(`train_time_s`). At one round the rest of the wall time is the programs' fixed costs.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

import interleave


def one(root, preset):
  """{'wall_s', 'compile_s', 'train_s', 'programs'} of one cold one-round run of `preset`
  with the checkout at `root` (its package first on the path)."""
  with tempfile.TemporaryDirectory() as tmp:
    # A fresh tool cache: the user's default --compile_cache=auto, empty (a user's own
    # $JAX_COMPILATION_CACHE_DIR would keep JAX's 1 s threshold, under which nothing this
    # small is written).
    env = {k: v for k, v in os.environ.items() if not k.startswith('JAX_COMPILATION_CACHE')}
    env.update(PYTHONPATH=root, FEDJAX_DRIFT_CACHE=os.path.join(tmp, 'cache'))
    start = time.perf_counter()
    subprocess.run([sys.executable, os.path.join(root, 'experiments', 'presets.py'), preset,
                    '--mode=cpu', '--rounds=1', '--seeds=1', '--jobs=1',
                    f'--out={os.path.join(tmp, "out")}'],
                   env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    summaries = []
    for path in glob.glob(os.path.join(tmp, 'out', 'runs', '**', 'summary.json'),
                          recursive=True):
      with open(path) as f:
        summaries.append(json.load(f))
  return {'wall_s': wall, 'compile_s': sum(s['compile_s'] for s in summaries),
          'train_s': sum(s['train_time_s'] for s in summaries), 'programs': len(summaries)}


def summarize(reps):
  """Per measure: the repetitions' values sorted, their median and spread."""
  return {'programs': reps[0]['programs'],
          **{key: interleave.spread(r[key] for r in reps)
             for key in ('wall_s', 'compile_s', 'train_s')}}


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--preset', default='fedgkd_dirichlet', help='a preset with a cpu tier')
  interleave.add_flags(parser, reps=3, result='program-costs')
  args = parser.parse_args()
  result = {'preset': args.preset,
            **interleave.run(args, lambda root: one(root, args.preset), summarize)}
  out = interleave.write(args, 'program-costs', result)
  for name in result['commits']:
    r = result[name]
    print(f'{name}: {r["programs"]} programs; ' + ', '.join(
        f'{key} median {r[key]["median"]:.1f} ({r[key]["spread"][0]:.1f}-'
        f'{r[key]["spread"][1]:.1f})' for key in ('wall_s', 'compile_s', 'train_s')))
  print(f'wrote {out}')


if __name__ == '__main__':
  main()

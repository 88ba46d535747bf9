"""A cpu-tier preset at one round, timed: what each of its programs costs besides training
(tracing and compiling, the run directory's files and figures), against this checkout or
another one, interleaved.

    python benchmarks/program_costs.py --reps=3
    python benchmarks/program_costs.py --reps=3 --compare=/path/to/an/older/checkout

Each repetition runs `experiments/presets.py PRESET --mode=cpu --rounds=1 --seeds=1 --jobs=1`
in a fresh process per checkout (A B A B ..., so the machine's drift falls on both alike),
each with an empty XLA compilation cache (a first run of the tier compiles everything), and
writes benchmarks/results/program-costs-<date>.json with each checkout's per-repetition
seconds, median and spread: the command's wall time, and the sums over its runs'
summary.json of compilation (tracing, lowering and XLA: `compile_s`) and training
(`train_time_s`). At one round the rest of the wall time is the programs' fixed costs.
"""
import argparse
import datetime
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, 'benchmarks', 'results')


def one(root, preset):
  """{'wall_s', 'compile_s', 'train_s', 'programs'} of one cold one-round run of `preset`
  with the checkout at `root` (its package first on the path)."""
  with tempfile.TemporaryDirectory() as tmp:
    env = dict(os.environ, PYTHONPATH=root, JAX_COMPILATION_CACHE_DIR=os.path.join(tmp, 'xla'))
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


def commit(root):
  """The checkout's commit ('' where it is not a git checkout)."""
  out = subprocess.run(['git', '-C', root, 'rev-parse', 'HEAD'], capture_output=True, text=True,
                       check=False)
  return out.stdout.strip()


def summarize(reps):
  """Per measure: the repetitions' values sorted, their median and spread."""
  out = {'programs': reps[0]['programs']}
  for key in ('wall_s', 'compile_s', 'train_s'):
    values = sorted(r[key] for r in reps)
    out[key] = {'seconds': values, 'median': statistics.median(values),
                'spread': [values[0], values[-1]]}
  return out


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--preset', default='fedgkd_dirichlet', help='a preset with a cpu tier')
  parser.add_argument('--reps', type=int, default=3)
  parser.add_argument('--compare', default='', help='another checkout to time beside this one')
  parser.add_argument('--out', default='', help='result file (default benchmarks/results/'
                      'program-costs-<date>.json)')
  args = parser.parse_args()
  roots = {'this': ROOT, **({'compare': os.path.abspath(args.compare)} if args.compare else {})}
  reps = {name: [] for name in roots}
  for _ in range(args.reps):
    for name, root in roots.items():
      reps[name].append(one(root, args.preset))
  result = {'date': datetime.datetime.now().isoformat(timespec='seconds'),
            'preset': args.preset, 'load_at_start': os.getloadavg()[0],
            'commits': {name: commit(root) for name, root in roots.items()},
            **{name: summarize(r) for name, r in reps.items()}}
  out = args.out or os.path.join(RESULTS, f'program-costs-{datetime.date.today()}.json')
  with open(out, 'w') as f:
    json.dump(result, f, indent=1)
  for name in roots:
    r = result[name]
    print(f'{name}: {r["programs"]} programs; ' + ', '.join(
        f'{key} median {r[key]["median"]:.1f} ({r[key]["spread"][0]:.1f}-'
        f'{r[key]["spread"][1]:.1f})' for key in ('wall_s', 'compile_s', 'train_s')))
  print(f'wrote {out}')


if __name__ == '__main__':
  main()

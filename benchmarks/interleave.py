"""Timing this checkout beside another one, interleaved (A B A B ..., so the machine's drift
falls on both alike): the pieces that plots.py and program_costs.py share."""
import argparse
import datetime
import json
import os
import statistics
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def add_flags(parser: argparse.ArgumentParser, reps: int, result: str):
  """--reps (default `reps`), --compare and --out (default benchmarks/results/<result>-<date>
  .json) on `parser`."""
  parser.add_argument('--reps', type=int, default=reps)
  parser.add_argument('--compare', default='', help='another checkout to time beside this one')
  parser.add_argument('--out', default='', help=f'result file (default benchmarks/results/'
                      f'{result}-<date>.json)')


def run(args, one, summarize) -> dict:
  """one(root) for this checkout ('this') and --compare's ('compare'), --reps times each,
  interleaved. Returns {'date', 'load_at_start', 'commits': {name: commit}, name:
  summarize([one's results in repetition order])}."""
  roots = {'this': ROOT, **({'compare': os.path.abspath(args.compare)} if args.compare else {})}
  result = {'date': datetime.datetime.now().isoformat(timespec='seconds'),
            'load_at_start': os.getloadavg()[0],
            'commits': {name: commit(root) for name, root in roots.items()}}
  reps = {name: [] for name in roots}
  for _ in range(args.reps):
    for name, root in roots.items():
      reps[name].append(one(root))
  return {**result, **{name: summarize(r) for name, r in reps.items()}}


def write(args, result_name: str, result: dict) -> str:
  """Writes `result` as JSON to --out, or benchmarks/results/<result_name>-<today>.json;
  returns the path."""
  out = args.out or os.path.join(ROOT, 'benchmarks', 'results',
                                 f'{result_name}-{datetime.date.today()}.json')
  with open(out, 'w') as f:
    json.dump(result, f, indent=1)
  return out


def commit(root) -> str:
  """The checkout's commit ('' where it is not a git checkout)."""
  out = subprocess.run(['git', '-C', root, 'rev-parse', 'HEAD'], capture_output=True, text=True,
                       check=False)
  return out.stdout.strip()


def spread(values) -> dict:
  """{'seconds': the values sorted, 'median', 'spread': [least, most]}."""
  values = sorted(values)
  return {'seconds': values, 'median': statistics.median(values),
          'spread': [values[0], values[-1]]}

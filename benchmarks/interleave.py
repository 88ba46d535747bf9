"""Timing this checkout beside another one, interleaved (A B A B ..., so the machine's drift
falls on both alike): the pieces that plots.py, program_costs.py, default_run.py and
diag_cost.py share (the repetition loop, one timed run of experiments/run.py, the summary)."""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import time

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
  reps = repeat(list(roots), args.reps, lambda name, _: one(roots[name]))
  return {**result, **{name: summarize(r) for name, r in reps.items()}}


def repeat(variants, reps, one, log=None) -> dict:
  """{variant: [one(variant, rep) for rep in range(reps)]}, run interleaved: every variant once
  per repetition, in the order given. log(variant, rep, result), if given, after each."""
  results = {v: [] for v in variants}
  for rep in range(reps):
    for v in variants:
      results[v].append(one(v, rep))
      if log is not None:
        log(v, rep, results[v][-1])
  return results


def timed_run(command, name, out, rounds, env=None) -> dict:
  """One process of `command` (an experiments/run.py command line) at --rounds and --out,
  without the progress bar: {'process_s': its wall time, 'loop_s': the training loop's
  (summary.json train_time_s, or wall_time_s where a checkout predates it),
  'final_accuracy'}. SystemExit naming `name` with its stderr's tail when it fails."""
  t = time.perf_counter()
  proc = subprocess.run(command + [f'--rounds={rounds}', f'--out={out}', '--progress=false'],
                        capture_output=True, text=True, env=env)
  wall = time.perf_counter() - t
  if proc.returncode:
    raise SystemExit(f'{name} failed: {proc.stderr[-2000:]}')
  with open(os.path.join(out, 'summary.json')) as f:
    summary = json.load(f)
  return {'process_s': wall, 'loop_s': summary.get('train_time_s', summary['wall_time_s']),
          'final_accuracy': summary['final_accuracy']}


def print_medians(results, keys, digits=1, width=13):
  """One line per variant and key: the median and range of results[variant][i][key]."""
  for v, rows in results.items():
    for key in keys:
      values = [r[key] for r in rows]
      print(f'{v:>{width}} {key}: median {statistics.median(values):.{digits}f}s '
            f'(range {min(values):.{digits}f}-{max(values):.{digits}f}) over {len(values)}')


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

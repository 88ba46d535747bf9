"""What the diagnostics (issue 21) cost the default run when off: interleaved A B A B timing.

    python benchmarks/diag_cost.py --baseline_repo=../before-diagnostics --reps=4 [--rounds=50]
        [--with_on]

A git worktree of the commit before the diagnostics makes the baseline, e.g.
    git worktree add ../before-diagnostics 7e8c4d5

Variants, each a fresh process running experiments/run.py with the default flags, in the
order before, after[, on] within every repetition so that machine drift hits all alike:
  before  the baseline checkout (--baseline_repo), which has no diagnostics
  after   this checkout, every diagnostic off (the default)
  on      this checkout with --diag_client_acc --diag_features_rounds=1,<rounds> (--with_on):
          what they cost when asked for
Prints, per variant, the median and range of the training loop time (summary.json
train_time_s) and the process time, and the paired ratios after/before (and on/before)
within each repetition, whose spread says how much of a difference is noise. Expect
after/before about 1: with the flags off, the compiled round program is identical
(tests/test_diagnostics.py::test_off_the_round_program_is_unchanged), and the host does a
few Python checks per call.

--lowered times nothing: it prints the sha256 of the default run's lowered segment (its
StableHLO text) in both checkouts, for the default flags and any --flags given (e.g.
--flags=--algo=igfl --flags=--seeds=2), and says whether they are the same program.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import interleave

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def command(variant, args):
  repo = args.baseline_repo if variant == 'before' else ROOT
  cmd = [sys.executable, os.path.join(repo, 'experiments', 'run.py')]
  if variant == 'on':
    cmd += ['--diag_client_acc', f'--diag_features_rounds=1,{args.rounds}']
  return cmd


def one(variant, args, out):
  """One process of `variant`: {'process_s', 'loop_s', 'final_accuracy'}."""
  env = dict(os.environ)
  if variant == 'before':  # its own package, not this checkout's editable install
    env['PYTHONPATH'] = args.baseline_repo + os.pathsep + env.get('PYTHONPATH', '')
  return interleave.timed_run(command(variant, args), variant, out, args.rounds, env)


LOWER = '''
import hashlib, sys
import jax.numpy as jnp
import fedjax_drift
from fedjax_drift import engine, study
from fedjax_drift.config import from_dict
flags = dict(a[2:].split('=', 1) for a in sys.argv[1:])
cfg = fedjax_drift.Config(progress=False)
def value(default, text):
  if isinstance(default, bool):
    return text.lower() in ('1', 'true', 'yes')
  return type(default)(text)
cfg = from_dict({k: value(getattr(cfg, k), v) for k, v in flags.items()}, cfg)
st = study.build(cfg)
text = engine.make_segment(st.step, cfg.eval_every).lower(
    st.state, st.data, st.inputs, jnp.int32(1)).as_text()
print(hashlib.sha256(text.encode()).hexdigest())
'''


def lowered_hash(repo, flags):
  """sha256 of the default run's lowered segment in checkout `repo`, with `flags`."""
  env = dict(os.environ, PYTHONPATH=repo + os.pathsep + os.environ.get('PYTHONPATH', ''))
  proc = subprocess.run([sys.executable, '-c', LOWER] + flags, capture_output=True,
                        text=True, env=env, cwd=repo)
  if proc.returncode:
    raise SystemExit(f'lowering in {repo} failed: {proc.stderr[-2000:]}')
  return proc.stdout.split()[-1]


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--baseline_repo', required=True,
                      help='a checkout from before the diagnostics')
  parser.add_argument('--reps', type=int, default=4)
  parser.add_argument('--rounds', type=int, default=50)
  parser.add_argument('--with_on', action='store_true',
                      help='also time the run with two diagnostics on')
  parser.add_argument('--lowered', action='store_true',
                      help='compare the lowered programs instead of timing')
  parser.add_argument('--flags', action='append', default=[],
                      help='with --lowered: a run flag, e.g. --flags=--algo=igfl')
  args = parser.parse_args()
  args.baseline_repo = os.path.abspath(args.baseline_repo)
  if args.lowered:
    before, after = (lowered_hash(r, args.flags) for r in (args.baseline_repo, ROOT))
    print(f'before {before}\nafter  {after}\nsame program: {before == after}')
    return
  variants = ['before', 'after'] + (['on'] if args.with_on else [])
  with tempfile.TemporaryDirectory() as tmp:
    results = interleave.repeat(
        variants, args.reps, lambda v, rep: one(v, args, os.path.join(tmp, f'{v}-{rep}')),
        lambda v, rep, r: print(v, rep, r, flush=True))
  interleave.print_medians(results, ('loop_s', 'process_s'), digits=2, width=6)
  for v in variants[1:]:
    ratios = [a['loop_s'] / b['loop_s'] for a, b in zip(results[v], results['before'])]
    print(f'{v}/before loop time, paired by repetition: median {statistics.median(ratios):.3f} '
          f'[{min(ratios):.3f}-{max(ratios):.3f}]')
  same = {r['final_accuracy'] for v in ('before', 'after') for r in results[v]}
  print('final accuracy before = after:', len(same) == 1, sorted(same))
  print(json.dumps(results))


if __name__ == '__main__':
  main()

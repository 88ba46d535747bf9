"""A run directory's figures, timed: partition.png, accuracy.png and drift.png as a run writes
them (fedjax_drift/report.py), against this checkout or another one, interleaved.

    python benchmarks/plots.py --reps=5
    python benchmarks/plots.py --reps=5 --compare=/path/to/an/older/checkout

Each repetition draws the three figures of a 100-client, 10-label, 50-round run in a fresh
process per checkout (A B A B ..., so the machine's drift falls on both alike) and writes
benchmarks/results/plots-<date>.json with each checkout's per-repetition seconds, median and
spread.
"""
import argparse
import subprocess
import sys

import interleave
# One repetition in a child process of the checkout at sys.argv[1]: matplotlib imported first
# (a run imports it once), then the three figures timed together.
CHILD = '''
import os, sys, tempfile, time
import numpy as np
sys.path.insert(0, sys.argv[1])
import matplotlib
from fedjax_drift import report
rng = np.random.default_rng(0)
rows = [{'round': r, 'train_loss': 2 / r, 'client_update_norm_mean': 1 + rng.random(),
         'mean_update_norm': rng.random(), 'update_cosine': rng.random(),
         'client_loss_std': rng.random()} for r in range(1, 51)]
acc = list(np.linspace(0.1, 0.7, 50))
with tempfile.TemporaryDirectory() as out:
  report.plot_partition(os.path.join(out, 'warm.png'), [[1, 2]], 'warm-up')
  start = time.perf_counter()
  report.plot_partition(os.path.join(out, 'partition.png'), rng.integers(0, 60, (100, 10)),
                        'fedavg on mnist (dirichlet)')
  report.plot_accuracy(os.path.join(out, 'accuracy.png'), list(range(1, 51)), acc, acc,
                       'fedavg on mnist (dirichlet)')
  report.plot_drift(os.path.join(out, 'drift.png'), rows)
  print(time.perf_counter() - start)
'''


def one(root):
  """Seconds to draw and write the three figures with the checkout at `root`."""
  out = subprocess.run([sys.executable, '-c', CHILD, root], capture_output=True, text=True,
                       check=True)
  return float(out.stdout.strip().splitlines()[-1])


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  interleave.add_flags(parser, reps=5, result='plots')
  args = parser.parse_args()
  result = interleave.run(args, one, interleave.spread)
  out = interleave.write(args, 'plots', result)
  for name in result['commits']:
    print(f'{name}: median {result[name]["median"]:.3f} s, '
          f'spread {result[name]["spread"][0]:.3f}-{result[name]["spread"][1]:.3f} s')
  print(f'wrote {out}')


if __name__ == '__main__':
  main()

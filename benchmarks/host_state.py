"""Cost per round of the per-client state table in host memory (--client_state=host) against
the table on the device (issue 33 item 4).

    python benchmarks/host_state.py [--algo=scaffold --model=resnet8 --num_clients=1000
                                     --clients_per_round=10 --rounds=5 --reps=2]
    python benchmarks/host_state.py --quick   # tiny sizes, for the tests

Each (mode, repetition) is one run of experiments/run.py in its own process, interleaved
(device host device host ...), on synthetic uint8 CIFAR-sized data (50,000 32x32x3 images,
10 classes, IID over --num_clients; --quick: 240 8x8x3 images), one local epoch of batch 32
(--quick: 2 steps of batch 4), evaluating only after the last round. Per process: the run's
training seconds per round (summary.json's train_time_s / rounds, compilation excluded),
its peak RSS (the child's own rusage), and the bytes per round the host mode copies (its header line). The
summary gives, per mode, the median and range of seconds per round and host/device, the
cost of the copies. Writes benchmarks/results/host-state-DATE-TIME.json (or --out) with the
host, the git commit, the load average when each process started and the raw numbers. Time
it on a quiet machine.
"""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, 'experiments', 'run.py')
MODES = ('device', 'host')


def synthetic_npz(path, n, side, seed=0):
  """Uint8 images [n, side, side, 3] with 10 random labels (and a tenth as many to test)."""
  rng = np.random.default_rng(seed)
  def split(m):
    return (rng.integers(0, 256, (m, side, side, 3), dtype=np.uint8),
            rng.integers(0, 10, m).astype(np.int64))
  (x, y), (xt, yt) = split(n), split(max(n // 10, 10))
  np.savez(path, x_train=x, y_train=y, x_test=xt, y_test=yt)
  return path


def one_run(args, mode, data, out):
  """One run in a fresh process: seconds per round, peak RSS, bytes copied per round."""
  flags = [f'--dataset=npz:{data}', f'--algo={args.algo}', f'--model={args.model}',
           f'--num_clients={args.num_clients}', f'--clients_per_round={args.clients_per_round}',
           '--partition=iid', f'--rounds={args.rounds}', f'--eval_every={args.rounds}',
           f'--client_state={mode}', '--progress=false', f'--out={out}', '--overwrite=yes']
  flags += (['--local_steps=2', '--local_epochs=0', '--batch_size=4'] if args.quick
            else ['--local_epochs=1', '--batch_size=32'])
  load, started = os.getloadavg()[0], time.time()
  with tempfile.TemporaryFile('w+') as stdout, tempfile.TemporaryFile('w+') as stderr:
    child = subprocess.Popen([sys.executable, RUN, *flags], stdout=stdout, stderr=stderr,
                             text=True)
    _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage: its peak RSS
    child.returncode = os.waitstatus_to_exitcode(status)
    stdout.seek(0), stderr.seek(0)
    text, errors = stdout.read(), stderr.read()
  result = dict(mode=mode, returncode=child.returncode, load_1min_at_start=load,
                wall_s=time.time() - started, peak_rss_gb=usage.ru_maxrss / 1e6)
  if child.returncode != 0:
    result['error'] = (errors.strip().splitlines() or ['?'])[-1][:300]
    return result
  with open(os.path.join(out, 'summary.json')) as f:
    summary = json.load(f)
  copied = re.search(r'([\d,]+) bytes per round', text)
  result.update(s_per_round=summary['train_time_s'] / args.rounds,
                compile_s=summary.get('compile_s'),
                bytes_per_round=int(copied[1].replace(',', '')) if copied else 0)
  return result


def summarize(results):
  """Per mode: median [min, max] seconds per round; host over device (medians)."""
  out = {}
  for mode in MODES:
    times = [r['s_per_round'] for r in results if r['mode'] == mode and 's_per_round' in r]
    if times:
      out[mode] = dict(median_s_per_round=statistics.median(times), min=min(times),
                       max=max(times), runs=len(times))
  if len(out) == 2:
    out['host_over_device'] = (out['host']['median_s_per_round'] /
                               out['device']['median_s_per_round'])
    out['bytes_per_round'] = max(r.get('bytes_per_round', 0) for r in results)
  return out


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--algo', default='scaffold')
  parser.add_argument('--model', default='resnet8')
  parser.add_argument('--num_clients', type=int, default=1000)
  parser.add_argument('--clients_per_round', type=int, default=10)
  parser.add_argument('--rounds', type=int, default=5)
  parser.add_argument('--reps', type=int, default=2)
  parser.add_argument('--quick', action='store_true', help='tiny sizes, for the tests')
  parser.add_argument('--out', default='')
  args = parser.parse_args()
  if args.quick:
    args.model, args.num_clients, args.clients_per_round, args.rounds, args.reps = (
        'logreg', 20, 4, 2, 1)
  with tempfile.TemporaryDirectory() as tmp:
    data = synthetic_npz(os.path.join(tmp, 'data.npz'), 240 if args.quick else 50_000,
                         8 if args.quick else 32)
    results = [one_run(args, mode, data, os.path.join(tmp, f'{mode}-{rep}'))
               for rep in range(args.reps) for mode in MODES]
  commit = subprocess.run(['git', 'rev-parse', 'HEAD'], capture_output=True, text=True,
                          cwd=ROOT, check=False).stdout.strip()
  report = dict(date=datetime.datetime.now().isoformat(timespec='seconds'), argv=sys.argv,
                cpu_count=os.cpu_count(), git_commit=commit, flags=vars(args),
                results=results, summary=summarize(results))
  path = args.out or os.path.join(ROOT, 'benchmarks', 'results', 'host-state-{}.json'.format(
      datetime.datetime.now().strftime('%Y-%m-%d-%H%M%S')))
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, 'w') as f:
    json.dump(report, f, indent=1)
  print(json.dumps(report['summary']))
  print(f'wrote {path}')
  return 0 if all(r['returncode'] == 0 for r in results) else 1


if __name__ == '__main__':
  sys.exit(main())

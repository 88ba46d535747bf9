"""FedFOR's readings of eqs. 6-7 against the paper's own claims (issue 44), scaled down.

The paper's prior-shift set-up (Imbalanced CIFAR-10, §4.2 and App. D): each round 10 fresh
clients, each a 10% sample of the training set trimmed to a long tail (ratio 0.01), batch 128,
lr 0.01, no momentum; E in {1, 2, 4, 8, 16} with 200/200/100/100/50 rounds (Table 2) and
alpha = 5 the best of a sweep at E = 8 (App. C, Fig. 3). Here: the embedded Fashion-MNIST
subset (6,000 training images) with the 2x200 MLP with BatchNorm (the cpu tier's stand-in for
ResNet-20); batch 16, so that a client's ~150 long-tail examples make ~10 steps an epoch, as
the paper's ~1,240 examples do at batch 128 (H sets how large each reading's jumps are); the
budgets divided by --budget_divisor. Every reading runs the alpha sweep at E = 8 and alpha = 5 at
every E, with the same 3 seeds as FedAvg (same clients, batches and initial model): paired.

  python benchmarks/fedfor_readings.py --out=/tmp/fedfor-readings            # every reading
  python benchmarks/fedfor_readings.py --readings=per_step/coordinate --budget_divisor=50

Writes OUT/readings.json (every run's final, best and best-by-half accuracy, and whether it
diverged) and prints which claims each reading reproduces (claims()) and the tables behind it
(tables()); --write=experiments/results/studies/fedfor-readings also writes study.md, which
experiments/collect_results.py puts in RESULTS.md.
"""
import argparse
import csv
import json
import os
import subprocess
import sys

import numpy as np
from scipy import stats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUDGETS = {1: 200, 2: 200, 4: 100, 8: 100, 16: 50}  # Table 2's "Global Iter." per E
ALPHAS = (0.5, 1.0, 2.0, 5.0, 10.0)
READINGS = tuple(f'{s}/{g}' for g in ('coordinate', 'vector')
                 for s in ('paper', 'per_step', 'round', 'epoch'))
COMMON = ['--scenario=longtail_stateless', '--client_fraction=0.1', '--imbalance_ratio=0.01',
          '--model=mlp_bn', '--batch_size=16', '--lr=0.01', '--local_momentum=0',
          '--weight_decay=0', '--num_clients=100', '--clients_per_round=10', '--eval_every=1',
          '--val_fraction=0']


def run(out, name, flags):
  """One CLI program (its runs' seeds on the run axis); returns its run directory."""
  run_dir = os.path.join(out, name)
  if not os.path.exists(os.path.join(run_dir, 'summary.json')):
    cmd = [sys.executable, os.path.join(ROOT, 'experiments', 'run.py'), *COMMON, *flags,
           f'--out={run_dir}', '--overwrite']
    print(' '.join(cmd[1:]), flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode not in (0, 3):  # 3: every run diverged, still recorded
      raise SystemExit(f'{name} failed:\n{done.stderr[-2000:]}')
  return run_dir


def read(run_dir, half):
  """[{'seed', 'for_alpha', 'final', 'best', 'half', 'diverged'}] of a run directory."""
  rows = list(csv.DictReader(open(os.path.join(run_dir, 'runs.csv'))))
  curves = {}
  for m in csv.DictReader(open(os.path.join(run_dir, 'metrics.csv'))):
    if 0 < int(m['round']) <= half:
      acc = float(m['test_accuracy'])
      curves[m['run']] = max(curves.get(m['run'], 0.0), acc if np.isfinite(acc) else 0.0)
  return [{'seed': int(r['seed']), 'for_alpha': float(r.get('for_alpha') or 0.0),
           'final': float(r['final_accuracy'] or 'nan'), 'best': float(r['best_accuracy'] or 'nan'),
           'half': curves.get(r['run'], float('nan')), 'diverged': r['status'] == 'diverged'}
          for r in rows]


def measure(out, readings, divisor, seeds):
  results = {'divisor': divisor, 'seeds': seeds, 'fedavg': {}, 'readings': {}}
  rounds = {e: max(1, b // divisor) for e, b in BUDGETS.items()}
  for e, r in rounds.items():
    d = run(out, f'fedavg-E{e}', ['--algo=fedavg', f'--local_epochs={e}', f'--rounds={r}',
                                  f'--seeds={seeds}'])
    results['fedavg'][e] = read(d, max(1, r // 2))
  for reading in readings:
    scale, gate = reading.split('/')
    own = ['--algo=fedfor', f'--for_scale={scale}', f'--for_gate={gate}', f'--seeds={seeds}']
    name = reading.replace('/', '-')
    sweep = run(out, f'{name}-alpha', own + ['--local_epochs=8', f'--rounds={rounds[8]}',
                                             '--grid=for_alpha:' + ','.join(map(str, ALPHAS))])
    entry = {'alpha': read(sweep, max(1, rounds[8] // 2)), 'epochs': {}}
    for e, r in rounds.items():
      if e == 8:  # alpha = 5 of the sweep is this run (a sweep's run = the single run)
        entry['epochs'][e] = [x for x in entry['alpha'] if x['for_alpha'] == 5.0]
        continue
      d = run(out, f'{name}-E{e}', own + [f'--local_epochs={e}', f'--rounds={r}',
                                          '--for_alpha=5'])
      entry['epochs'][e] = read(d, max(1, r // 2))
    results['readings'][reading] = entry
    with open(os.path.join(out, 'readings.json'), 'w') as f:
      json.dump(results, f, indent=1)
  return results


def interval(values):
  """'mean [lo, hi]' (95% t-interval) of finite values; diverged runs count as failures."""
  v = np.asarray([x for x in values if np.isfinite(x)])
  if len(v) == 0:
    return 'diverged'
  if len(v) == 1:
    return f'{v[0]:+.3f} (1 seed)'
  half = stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v))
  return f'{v.mean():+.3f} [{v.mean() - half:+.3f}, {v.mean() + half:+.3f}]'


def _score(rows, key):
  return {r['seed']: (float('nan') if r['diverged'] else r[key]) for r in rows}


def gain_table(results, key):
  """Markdown: per reading, FedFOR - FedAvg (paired by seed) at every E, on `key` ('half':
  the best accuracy in the first half of the budget, 'best': in the whole budget)."""
  budget = 'half budget' if key == 'half' else 'full budget'
  lines = ['| reading | ' + ' | '.join(f'E={e}: best ({budget}) − FedAvg'
                                        for e in BUDGETS) + ' | diverged runs |',
           '|---|' + '---|' * (len(BUDGETS) + 1)]
  for reading, entry in results['readings'].items():
    cells, diverged = [], 0
    for e in BUDGETS:
      rows = entry['epochs'][str(e)] if str(e) in entry['epochs'] else entry['epochs'][e]
      avg = results['fedavg'].get(str(e), results['fedavg'].get(e))
      mine, base = _score(rows, key), _score(avg, key)
      cells.append(interval([mine[s] - base[s] for s in mine]))
      diverged += sum(r['diverged'] for r in rows)
    lines.append(f'| {reading} | ' + ' | '.join(cells) + f' | {diverged} |')
  return lines


def tables(results):
  """Markdown: the gains at half and full budget (gain_table) and the alpha sweep."""
  lines = gain_table(results, 'half') + [''] + gain_table(results, 'best')
  lines += ['', '| reading | ' + ' | '.join(f'α={a:g}: best' for a in ALPHAS) + ' | best α |',
            '|---|' + '---|' * (len(ALPHAS) + 1)]
  for reading, entry in results['readings'].items():
    means = []
    for a in ALPHAS:
      rows = [r for r in entry['alpha'] if r['for_alpha'] == a]
      best = [float('nan') if r['diverged'] else r['best'] for r in rows]
      means.append(np.nanmean(best) if np.isfinite(best).any() else float('nan'))
    cells = [f'{m:.3f}' if np.isfinite(m) else 'diverged' for m in means]
    top = ALPHAS[int(np.nanargmax(means))] if np.isfinite(means).any() else None
    best = 'none' if top is None else f'{top:g}'
    lines.append(f'| {reading} | ' + ' | '.join(cells) + f' | {best} |')
  return '\n'.join(lines)


def _mean(rows, key):
  values = [float('nan') if r['diverged'] else r[key] for r in rows]
  return np.nanmean(values) if np.isfinite(values).any() else float('nan')


def claims(results):
  """Markdown: which of the paper's claims each reading reproduces here (App. C: alpha = 5 is
  the best of the sweep; Table 2: FedFOR >= FedAvg at every E, most at E = 8; and no run
  diverged), each claim computed from readings.json alone."""
  lines = ['| reading | α=5 within 0.01 of the sweep\'s best | FedFOR ≥ FedAvg at every E '
           '(half / full budget; E where the interval excludes 0) | largest gain at E=8 '
           '(half / full) | runs diverged |', '|---|---|---|---|---|']
  for reading, entry in results['readings'].items():
    sweep = {a: _mean([r for r in entry['alpha'] if r['for_alpha'] == a], 'best') for a in ALPHAS}
    top = np.nanmax(list(sweep.values())) if np.isfinite(list(sweep.values())).any() else np.nan
    near = 'yes' if np.isfinite(sweep[5.0]) and sweep[5.0] >= top - 0.01 else 'no'
    ahead, largest = [], []
    for key in ('half', 'best'):
      gains, sure = {}, []
      for e in BUDGETS:
        rows = entry['epochs'].get(str(e), entry['epochs'].get(e))
        avg = results['fedavg'].get(str(e), results['fedavg'].get(e))
        mine, base = _score(rows, key), _score(avg, key)
        diffs = np.asarray([mine[s] - base[s] for s in mine])
        gains[e] = diffs.mean() if np.isfinite(diffs).all() else float('nan')
        text = interval(diffs)
        if np.isfinite(diffs).all() and '[' in text and float(text.split('[')[1].split(',')[0]) > 0:
          sure.append(f'E={e}')
      ok = all(np.isfinite(g) and g >= 0 for g in gains.values())
      ahead.append(('yes' if ok else 'no') + (f' ({", ".join(sure)})' if sure else ''))
      finite = {e: g for e, g in gains.items() if np.isfinite(g)}
      largest.append('yes' if finite and max(finite, key=finite.get) == 8 and
                     len(finite) == len(gains) else
                     f'no (E={max(finite, key=finite.get)})' if finite else 'no')
    runs = list(entry['alpha']) + [r for e, rows in entry['epochs'].items() if int(e) != 8
                                   for r in rows]
    diverged = sum(r['diverged'] for r in runs)
    lines.append(f'| {reading} | {near} | {" / ".join(ahead)} | {" / ".join(largest)} | '
                 f'{diverged} of {len(runs)} |')
  return '\n'.join(lines)


def study(results, command, commit):
  """study.md for experiments/results/studies/ (collect_results.py puts it in RESULTS.md)."""
  fedavg = ', '.join(f'E={e}: {_mean(results["fedavg"].get(str(e), []), "half"):.3f} / '
                     f'{_mean(results["fedavg"].get(str(e), []), "best"):.3f}' for e in BUDGETS)
  return '\n'.join([
      "## FedFOR's readings of eqs. 6-7 against the paper's claims (issue 44)", '',
      f'Run on commit `{commit}` with `{command}` ({results["seeds"]} seeds; Table 2\'s budgets '
      f'divided by {results["divisor"]}). ' + __doc__.split('\n\n')[1].replace('\n', ' '), '',
      f'FedAvg, best accuracy by half / full budget: {fedavg}.', '',
      "Which of the paper's claims each reading reproduces:", '', claims(results), '',
      'The tables behind it (FedFOR − FedAvg, paired by seed: mean [95% t-interval]; '
      '"diverged": every seed diverged):', '', tables(results), ''])


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--out', required=True,
                      help='folder of the run directories and readings.json')
  parser.add_argument('--readings', default=','.join(READINGS),
                      help='comma-separated SCALE/GATE readings (default: all eight)')
  parser.add_argument('--budget_divisor', type=int, default=10,
                      help="Table 2's budgets divided by this (default 10: 20/20/10/10/5 rounds)")
  parser.add_argument('--seeds', type=int, default=3)
  parser.add_argument('--write', default='',
                      help='also write readings.json and study.md into this folder '
                           '(experiments/results/studies/fedfor-readings)')
  parser.add_argument('--commit', default='',
                      help='the commit the runs already in --out were made on (default: HEAD)')
  args = parser.parse_args(argv)
  os.makedirs(args.out, exist_ok=True)
  results = measure(args.out, args.readings.split(','), args.budget_divisor, args.seeds)
  results = json.loads(json.dumps(results))  # the keys as the file holds them
  print(claims(results) + '\n\n' + tables(results))
  if args.write:
    os.makedirs(args.write, exist_ok=True)
    with open(os.path.join(args.write, 'readings.json'), 'w') as f:
      json.dump(results, f, indent=1)
    commit = args.commit or subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=ROOT,
                                           capture_output=True, text=True).stdout.strip()
    command = 'python benchmarks/fedfor_readings.py ' + ' '.join(
        a for a in (argv if argv is not None else sys.argv[1:])
        if not a.startswith(('--write', '--commit')))
    with open(os.path.join(args.write, 'study.md'), 'w') as f:
      f.write(study(results, command.strip(), commit))


if __name__ == '__main__':
  main()

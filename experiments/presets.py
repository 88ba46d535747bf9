"""The papers' headline comparisons, scaled to this CPU: `python experiments/presets.py NAME`.

    python experiments/presets.py fedadc_shards --mode=short    # minutes, embedded data, MLP
    python experiments/presets.py fedadc_shards --mode=full --dataset=cifar10 \
        --data_dir=../shared/data/cifar10                        # the paper's CNN, hours

Every method gets the same seeds and the same learning-rate grid (plus its own beta grid
where it has one), run as one vmapped sweep; the grid point with the best mean last-10%
accuracy is chosen, recorded, and reported as mean +- std over the seeds. Outputs go to
experiments/results/<preset>-<mode>/: table.md, results.json, and one accuracy plot per
scenario. Tuning and reporting use the same seeds and the test split, as the papers tune.
"""
import argparse
import csv
import dataclasses
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import fedjax_drift  # noqa: E402
from fedjax_drift import report  # noqa: E402

SHORT = dict(dataset='embedded', model='mlp', num_clients=50, clients_per_round=10, rounds=40,
             eval_every=4, batch_size=32, seeds=2, target_accuracy=0.7)
LR_SHORT = (0.02, 0.05, 0.1)

PRESETS = {
    'fedadc_shards': dict(
        title='FedADC vs SlowMo vs FedAvg on sort-and-partition (FedADC paper, Fig. 1)',
        base=dict(partition='shards', local_steps=8, local_epochs=0, weight_decay=4e-4),
        full=dict(model='cnn_cifar', num_clients=100, clients_per_round=10, rounds=500,
                  batch_size=64, seeds=4, eval_every=10, target_accuracy=0.8),
        scenarios={f's={s}': dict(classes_per_client=s) for s in (2, 3, 4)},
        methods={'fedavg': {}, 'slowmo': {}, 'fedadc': {},
                 'fedadc (nesterov)': dict(algo='fedadc', fedadc_variant='nesterov')},
        beta_grid={'slowmo': (0.7, 0.9), 'fedadc': (0.7, 0.9), 'fedadc (nesterov)': (0.7, 0.9)}),
    'fedadc_table': dict(
        title='FedADC+ against drift-control baselines, s=2 (FedADC paper, Table I)',
        base=dict(partition='shards', classes_per_client=2, local_epochs=2, local_steps=0),
        full=dict(model='cnn_cifar', num_clients=100, rounds=500, batch_size=50, seeds=4,
                  eval_every=10, target_accuracy=0.6),
        scenarios={'C=0.1': dict(clients_per_round=5), 'C=0.2': dict(clients_per_round=10)},
        methods={'fedavg': {}, 'fedadc': {}, 'fedadc_plus': {}, 'feddyn': {},
                 'fedgkd': dict(algo='fedgkd', local_momentum=0.9), 'fedntd': {},
                 'fedprox': {}, 'moon': {}},
        beta_grid={'fedadc': (0.9,), 'fedadc_plus': (0.9,)}),
    'fedfor_epochs': dict(
        title='FedFOR vs FedAvg / FedProx over local epochs, stateless long-tail clients '
              '(FedFOR paper, prior shift)',
        base=dict(scenario='longtail_stateless', imbalance_ratio=0.01, client_fraction=0.1,
                  local_steps=0),
        full=dict(dataset='cifar10', model='cnn_cifar', clients_per_round=10, rounds=300,
                  seeds=3, eval_every=10, target_accuracy=0.5),
        scenarios={f'E={e}': dict(local_epochs=e) for e in (1, 2, 4, 8, 16)},
        short_scenarios=('E=1', 'E=4', 'E=16'),
        methods={'fedavg': {}, 'fedprox': {}, 'fedfor': {},
                 'fedfor (alpha=0.5)': dict(algo='fedfor', for_alpha=0.5)},
        note='FedCurv is left out: its per-client Fishers need returning clients, which this '
             'scenario has none of.'),
    'fedgkd_dirichlet': dict(
        title='FedGKD vs baselines on Dirichlet label skew (FedGKD paper)',
        base=dict(partition='dirichlet', local_epochs=2, local_steps=0, local_momentum=0.9,
                  weight_decay=1e-5, num_clients=20, clients_per_round=4),
        full=dict(dataset='cifar10', model='resnet8', rounds=100, local_epochs=20,
                  batch_size=64, seeds=3, eval_every=5, target_accuracy=0.6),
        scenarios={f'alpha={a}': dict(dirichlet_alpha=a) for a in (1.0, 0.5, 0.1)},
        methods={'fedavg': {}, 'fedprox': {}, 'fedgkd': {}, 'fedgkd_vote': {}, 'moon': {}},
        no_sweep=('fedgkd_vote',)),
    'igfl': dict(
        title='IGFL cross-silo and cross-device (IGFL paper)',
        base=dict(local_epochs=1, local_steps=0, batch_size=100),
        full=dict(model='cnn_mnist', dataset='mnist', rounds=200, seeds=3, eval_every=5),
        scenarios={'cross-silo (10 clients, C=1, 2 labels)': dict(
            partition='shards', classes_per_client=2, num_clients=10, clients_per_round=10),
                   'cross-device (rho=0.1)': dict(partition='dirichlet_client',
                                                  dirichlet_alpha=0.1, num_clients=100,
                                                  clients_per_round=10)},
        methods={'fedavg': {}, 'igfl_c': {}, 'igfl_s': {},
                 'igfl (time)': dict(algo='igfl', attention='time'), 'igfl': {}}),
}


def _fmt(stat):
  return f'{stat["mean"]:.4f} ± {stat["std"]:.4f}'


def run_preset(name, mode, data_dir='', dataset='', out_root=None, log=print):
  preset = PRESETS[name]
  out_dir = out_root or os.path.join(ROOT, 'experiments', 'results', f'{name}-{mode}')
  os.makedirs(out_dir, exist_ok=True)
  base = dict(SHORT, **preset['base'])
  if mode == 'full':
    base.update(preset['full'])
  if dataset:
    base['dataset'] = dataset
  if data_dir:
    base['data_dir'] = data_dir
  lrs = LR_SHORT if mode == 'short' else (0.01, 0.025, 0.05, 0.1)
  scenarios = preset['scenarios']
  if mode == 'short' and 'short_scenarios' in preset:
    scenarios = {k: v for k, v in scenarios.items() if k in preset['short_scenarios']}
  results = {'preset': name, 'mode': mode, 'title': preset['title'], 'base': base,
             'lr_grid': list(lrs), 'date': time.strftime('%Y-%m-%d'), 'scenarios': {}}
  for scen_name, scen in scenarios.items():
    rows = []
    for method, overrides in preset['methods'].items():
      algo = overrides.get('algo', method)
      grid = f'lr:{",".join(map(str, lrs))}'
      betas = preset.get('beta_grid', {}).get(method)
      if betas:
        grid += f';beta:{",".join(map(str, betas))}'
      values = dict(base, **scen, **overrides)
      values.update(algo=algo, progress=False, overwrite=True,
                    out=os.path.join(out_dir, 'runs', f'{scen_name}-{method}'.replace(' ', '_')))
      seeds = values.pop('seeds')
      if method in preset.get('no_sweep', ()):  # not vmappable yet: one run per lr and seed
        summary = _serial_sweep(values, seeds, lrs)
      else:
        config = fedjax_drift.Config(**{k: v for k, v in values.items()
                                        if k in _FIELDS}, seeds=seeds, grid=grid)
        summary = fedjax_drift.run(config, log=lambda *_: None)
      best = max(summary['grid_points'], key=lambda g: g['last10_mean_accuracy']['mean'])
      rows.append({'method': method, 'chosen': best['grid_point'],
                   'best_accuracy': best['best_accuracy'],
                   'last10_mean_accuracy': best['last10_mean_accuracy'],
                   'final_accuracy': best['final_accuracy'],
                   'rounds_to_target': best['rounds_to_target'],
                   'curve': _curve(summary, best['grid_point'])})
      log(f'[{name}/{scen_name}] {method}: best {_fmt(best["best_accuracy"])}, last-10% '
          f'{_fmt(best["last10_mean_accuracy"])} at {best["grid_point"]}')
    results['scenarios'][scen_name] = rows
    _plot(os.path.join(out_dir, f'{scen_name.split(" ")[0].replace("=", "")}.png'), rows,
          f'{name}: {scen_name}')
  report.write_json(os.path.join(out_dir, 'results.json'), results)
  table = _table(results, preset)
  report.atomic_write(os.path.join(out_dir, 'table.md'), table.encode())
  log(table)
  return results


_FIELDS = {f.name for f in dataclasses.fields(fedjax_drift.Config)}


def _serial_sweep(values, seeds, lrs):
  """Seeds x lr as separate runs, summarised like a sweep (for algorithms sweeps refuse)."""
  points = []
  for lr in lrs:
    per_seed = []
    for s in range(seeds):
      out = f'{values["out"]}-lr{lr}-s{s}'
      cfg = fedjax_drift.Config(**{k: v for k, v in dict(values, lr=lr, seed=s, out=out).items()
                                   if k in _FIELDS})
      summ = fedjax_drift.run(cfg, log=lambda *_: None)
      rows = list(csv.DictReader(open(os.path.join(out, 'metrics.csv'))))
      per_seed.append((summ, [(int(r['round']), float(r['test_accuracy'])) for r in rows]))
    stat = lambda k: {'mean': float(np.mean([p[0][k] for p in per_seed])),
                      'std': float(np.std([p[0][k] for p in per_seed]))}
    reached = [p[0]['rounds_to_target'] for p in per_seed if p[0]['rounds_to_target']]
    points.append({'grid_point': {'lr': lr}, 'final_accuracy': stat('final_accuracy'),
                   'best_accuracy': stat('best_accuracy'),
                   'last10_mean_accuracy': stat('last10_mean_accuracy'),
                   'rounds_to_target': {'reached': f'{len(reached)}/{seeds}',
                                        'mean': float(np.mean(reached)) if reached else None},
                   '_curves': [p[1] for p in per_seed]})
  return {'grid_points': points, 'run_dir': None}


def _curve(summary, point):
  """Mean test-accuracy curve of the chosen grid point over seeds: [(round, mean, std)]."""
  if summary.get('run_dir') is None:
    chosen = next(g for g in summary['grid_points'] if g['grid_point'] == point)
    curves = chosen['_curves']
    rounds = [r for r, _ in curves[0]]
    acc = np.array([[a for _, a in c] for c in curves])
  else:
    rows = [r for r in csv.DictReader(open(os.path.join(summary['run_dir'], 'runs.csv')))
            if all(abs(float(r[k]) - v) < 1e-12 for k, v in point.items())]
    rounds = sorted({int(r['round']) for r in rows})
    acc = np.array([[float(r['test_accuracy']) for r in rows if int(r['round']) == t]
                    for t in rounds]).T
  return [(t, float(m), float(s)) for t, m, s in zip(rounds, acc.mean(0), acc.std(0))]


def _table(results, preset):
  lines = [f'## {results["title"]}', '',
           f'Mode `{results["mode"]}`, {results["date"]}. Command: `python experiments/presets.py '
           f'{results["preset"]} --mode={results["mode"]}`.', '',
           'Setting: ' + ', '.join(f'{k}={v}' for k, v in results['base'].items()
                                   if k not in ('progress', 'overwrite')) + '.',
           f'Learning-rate grid {results["lr_grid"]} for every method (plus beta where listed); '
           'chosen by mean last-10% accuracy over the seeds.', '']
  if preset.get('note'):
    lines += [preset['note'], '']
  target = results['base'].get('target_accuracy')
  for scen, rows in results['scenarios'].items():
    lines += [f'### {scen}', '',
              f'| method | chosen | best acc. | last-10% acc. | final acc. | rounds to '
              f'{target:.0%} (reached) |', '|---|---|---|---|---|---|']
    for r in sorted(rows, key=lambda r: -r['last10_mean_accuracy']['mean']):
      rt = r['rounds_to_target']
      reach = f'{rt["mean"]:.0f} ({rt["reached"]})' if rt['mean'] is not None else \
          f'– ({rt["reached"]})'
      chosen = ', '.join(f'{k}={v:g}' for k, v in r['chosen'].items())
      lines.append(f'| {r["method"]} | {chosen} | {_fmt(r["best_accuracy"])} | '
                   f'{_fmt(r["last10_mean_accuracy"])} | {_fmt(r["final_accuracy"])} | {reach} |')
    lines.append('')
  return '\n'.join(lines) + '\n'


def _plot(path, rows, title):
  report.plot_mean_curves(path, {r['method']: tuple(zip(*r['curve'])) for r in rows}, title)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('preset', choices=sorted(PRESETS) + ['all'])
  parser.add_argument('--mode', choices=('short', 'full'), default='short')
  parser.add_argument('--dataset', default='')
  parser.add_argument('--data_dir', default='')
  args = parser.parse_args()
  names = sorted(PRESETS) if args.preset == 'all' else [args.preset]
  try:
    for name in names:
      run_preset(name, args.mode, args.data_dir, args.dataset)
  except fedjax_drift.UserError as e:
    sys.stderr.write(f'error: {e}\n')
    return 2
  return 0


if __name__ == '__main__':
  sys.exit(main())

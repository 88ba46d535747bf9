"""The five papers' experiments at the papers' own settings: `python experiments/presets.py NAME`.

    python experiments/presets.py --list                      # every experiment and its preset
    python experiments/presets.py fedadc_table --show         # the settings table, no run
    python experiments/presets.py fedadc_table --mode=full    # the paper's set-up (GPU-sized)
    python experiments/presets.py fedadc_table                # short: same set-up, cut
    python experiments/presets.py fedadc_table --mode=cpu     # cpu: minutes on a laptop CPU
    python experiments/presets.py all --write_doc             # rewrite experiments/PRESETS.md

The settings are data: one TOML table per paper in experiments/presets/ (fedadc.toml,
fedadc_conf.toml, fedfor.toml, fedgkd.toml, igfl.toml). Every value there carries its source
(`{v = VALUE, src = "paper section/table, quoted"}`, or "not stated: our choice, why"); this
file only reads them, resolves each (scenario, method) into a fedjax_drift.Config and runs it.

`--mode=full` is the paper's set-up. `--mode=short` keeps model, data, partition, clients,
local work and fixed hyperparameters, and cuts only what the preset's `short` entry lists
(rounds, seeds, one grid point, some scenarios); `--rounds`/`--seeds` override the cut.
`--mode=cpu` keeps the paper's methods, partition, clients per round, local work and full
grids, and moves every preset by one rule (cpu_values, CPU_WHY) to the embedded Fashion-MNIST
subset with a small model, at most CPU_ROUNDS rounds and CPU_SEEDS seeds; presets on text or
multi-domain data are left out of it in one line (CPU_LEFT_OUT).

A setting that this build lacks (a flag not in Config, a dataset not in sources.DATASETS, a
model not in models.zoo.MODELS, an algorithm not in algorithms.NAMES) leaves that run
*pending*: it is listed with what it needs and refused in one line, and becomes live by itself
when the piece lands. A pipeline flag set to the value the code behaves as without it (for
example --augment=none) is not a missing piece (TODAY below).

Each method runs its grid x seeds through `fedjax_drift.run`. `--select_on=validation` (the
default) holds SELECTION's validation split out of the clients' training data (a preset may
set its own val_fraction/val_source) and picks the grid point with the best mean of the
paper's metric on it; `--select_on=test` is the papers' protocol (no split, the point with the
best mean test metric). Either way the table reports the test accuracy of the chosen point:
mean and 95% t-interval over the seeds, and each method's paired difference to FedAvg and to
the paper's own method (fedjax_drift/tables.py). Outputs go to --out (default
runs/presets/<preset>-<mode>/ under the current directory): table.md, results.json and one
accuracy plot per scenario. An --out that already holds results is refused without
--overwrite.
"""
import argparse
import copy
import dataclasses
import math
import os
import platform
import shlex
import subprocess
import sys
import time
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import fedjax_drift  # noqa: E402
from fedjax_drift import algorithms, report, stats, tables  # noqa: E402
from fedjax_drift.config import PARTITIONS, grid_points, parse_grid  # noqa: E402

DOC = os.path.join(ROOT, 'experiments', 'PRESETS.md')
TABLES = os.path.join(ROOT, 'experiments', 'presets')
PAPERS = ('fedadc', 'fedadc_conf', 'fedfor', 'fedgkd', 'igfl')  # one table each, doc order
COMMITTED = os.path.join(ROOT, 'experiments', 'results')
OVERWRITE = 'yes'  # Config.overwrite: replace only what fedjax-drift wrote
NS = 'not stated'
# What the code does when a pipeline flag does not exist yet: a preset that sets the flag to
# this value runs the same with or without the flag, so it is not pending on it.
TODAY = {'augment': 'none', 'normalize': 'none', 'clip_grad_norm': 0.0, 'kd_tau2': False,
         'gkd_loss': 'kl', 'local_optimizer': 'sgd', 'dropout': -1, 'gn_groups': 0,
         'gn_group_size': 0, 'projection_hidden': 256, 'eval_protocol': 'global'}
# Selection on held-out data (issue 22), for every preset unless its table sets these: 10% of
# each client's training examples (not stated in the papers, which select on test). Runs
# that cannot hold a split out (stateless long-tail clients draw from the whole training
# set) fall back to selection on test, and their tables say so.
SELECTION = {'val_fraction': 0.1, 'val_source': 'clients'}
# The cpu tier (--mode=cpu, issue 22): every preset's methods, partition, participation, local
# work and full tuning grids, on data and a model that train in CPU-seconds. One rule for every
# preset; each departure from the paper, with why (the tables print them):
CPU_DATA = {  # the paper's image data -> the embedded Fashion-MNIST subset (always available)
    'cifar10': 'embedded', 'cifar100': 'embedded', 'tiny_imagenet': 'embedded',
    'emnist': 'embedded'}
CPU_SEEDS = 3  # at least 3 seeds, so every table has a 95% interval
# Rounds are cut to at most this, so the whole tier runs in under an hour on 2 cores with
# --jobs=2 (30 took about two). In the earlier 30-round tables FedAvg had 79-100% of its
# round-30 test accuracy by round 15: curves still rise, orderings are early ones.
CPU_ROUNDS = 20
# Populations above this many clients shrink with the data (6,000 / the paper's training-set
# size), so each client keeps its share of examples and N=500 vs 1,000 stays a 2x ratio:
# Dirichlet(0.1) over 250 clients of 5,400 examples left a client empty in every draw.
CPU_CLIENTS = 100
CPU_PROJECTION_HIDDEN = 32  # MOON's and FedGKD+'s projection head on logreg's 784 inputs
# FedGen's generator as the FedGen code sizes it for MNIST (utils/model_config.py GENERATORCONFIGS
# 'mnist': hidden 256, noise 32): the papers' ResNet-sized ones (512/64, Tiny-ImageNet's 2048/2048)
# cost 30-700x logreg per sample and made FedGen ~40% of the tier's time.
CPU_GENERATOR = {'fedgen_hidden': 256, 'fedgen_noise_dim': 32}
CPU_WHY = {
    'dataset': 'the embedded Fashion-MNIST subset (6,000 train / 1,000 test, 28x28, 10 '
               'classes) instead of the paper\'s image data, so the tier runs anywhere in '
               'minutes (CIFAR-100\'s and EMNIST\'s label counts become 10)',
    'model': 'logistic regression (logreg; MOON and FedGKD+ add their projection head on '
             f'its input, as the paper adds one to its CNN, {CPU_PROJECTION_HIDDEN} hidden '
             'units wide: at the input\'s width, 784, the head cost 100x the model and '
             'most of the tier\'s time), or the 2x200 MLP with BatchNorm '
             '(mlp_bn) where the paper\'s model has BatchNorm, instead of the paper\'s CNN/'
             'ResNet: one round of the grid must take seconds on 2 cores',
    'pipeline': 'no augmentation, normalisation, GroupNorm setting or dataset-specific label '
                'option: they belong to the paper\'s colour images and convolutional models',
    'generator': 'FedGen\'s generator at the FedGen code\'s size for MNIST (hidden '
                 f'{CPU_GENERATOR["fedgen_hidden"]}, noise {CPU_GENERATOR["fedgen_noise_dim"]}; '
                 'its GENERATORCONFIGS \'mnist\') instead of the ResNet-sized one (512/64, '
                 '2048/2048 on Tiny-ImageNet): on logreg those cost 30-700x the model per sample',
    'rounds': f'at most {CPU_ROUNDS} rounds, evaluated every 3 (every round where the table '
              'reports the last-10% mean: every 3, its last 10% would hold the final round only)',
    'seeds': f'{CPU_SEEDS} seeds',
    'clients': f'populations over {CPU_CLIENTS} clients scaled by 6,000 / the paper\'s '
               'training-set size, keeping each client\'s share of the examples (clients per '
               'round unchanged)',
    'sizes': 'server-side example counts (vote_val_size) scaled by 6,000 / the paper\'s '
             'training-set size',
}
# Datasets with no CPU stand-in: their presets are not in the cpu tier (one line each).
CPU_LEFT_OUT = {'ag_news': 'text (AG News) has no CPU stand-in in the embedded data',
                'sst5': 'text (SST-5) has no CPU stand-in in the embedded data',
                'domainnet': 'multi-domain data (DomainNet) has no honest stand-in in one '
                             'single-domain subset',
                'digits5': 'multi-domain data (Digits-5) has no honest stand-in in one '
                           'single-domain subset'}
# MFLOP per sample-gradient of the cpu tier's models (forward + backward = 3x the forward
# multiply-adds x 2 on a 28x28 input: logreg 7,840 MACs, the 2x200 MLP 198,800).
CPU_MFLOP = {'logreg': 0.047, 'mlp': 1.2, 'mlp_bn': 1.2}
CPU_DROP = ('augment_pad', 'augment_degrees', 'normalize_mean', 'normalize_std', 'gn_groups',
            'gn_group_size', 'cifar100_labels', 'emnist_split')
NO_SPLIT = 'stateless long-tail clients draw from the whole training set'
PIPELINE = ('augment', 'augment_pad', 'augment_degrees', 'normalize', 'normalize_mean',
            'normalize_std', 'clip_grad_norm', 'kd_tau2', 'gkd_loss', 'local_optimizer',
            'projection_hidden', 'gn_groups', 'gn_group_size', 'dropout', 'eval_protocol')


# ---------------------------------------------------------------------------------------------
# Reading the tables.

def _cited(item, where):
  """{v, src} -> (value, source); lists become tuples (grids)."""
  if not (isinstance(item, dict) and set(item) == {'v', 'src'} and item['src'].strip()):
    raise ValueError(f'{where}: every value is {{v = ..., src = "..."}}, got {item!r}')
  value = item['v']
  return (tuple(value) if isinstance(value, list) else value), item['src']


def _cited_table(table, where):
  return {k: _cited(x, f'{where}.{k}') for k, x in (table or {}).items()}


def _inherit(name, raw, chain=()):
  """A preset with its `base` preset's entries merged in (setting, grid, methods by key)."""
  if name in chain:
    raise ValueError(f'preset {name}: circular base')
  own = raw[name]
  if 'base' not in own:
    return copy.deepcopy(own)
  out = _inherit(own['base'], raw, chain + (name,))
  for key, value in own.items():
    if key in ('setting', 'grid', 'methods') or (key == 'scenarios' and
                                                  own.get('extend_scenarios')):
      out[key] = {**out.get(key, {}), **value}
    elif key not in ('base', 'extend_scenarios'):
      out[key] = copy.deepcopy(value)
  for field in own.get('unset', ()):
    out['setting'].pop(field)
  if 'methods_only' in own:
    out['methods'] = {label: out['methods'][label] for label in own['methods_only']}
  out.setdefault('notes', [])
  return out


def _normalise(name, p):
  """The in-memory preset: values as (value, source) pairs, scenario extras apart."""
  w = f'presets.{name}'
  scenarios, extra = {}, {}
  for s, table in p['scenarios'].items():
    table = dict(table)
    extra[s] = {'methods': {lab: _cited_table(t, f'{w}.scenarios.{s}.methods.{lab}')
                            for lab, t in table.pop('methods', {}).items()},
                'pending': table.pop('pending', ''), 'issue': table.pop('issue', '')}
    scenarios[s] = _cited_table(table, f'{w}.scenarios.{s}')
  methods = {}
  for label, m in p['methods'].items():
    methods[label] = {'algo': m['algo'], 'set': _cited_table(m.get('set'), f'{w}.{label}.set'),
                      'grid': _cited_table(m.get('grid'), f'{w}.{label}.grid'),
                      'pending': m.get('pending', ''), 'issue': m.get('issue', ''),
                      'sweep': m.get('sweep', True)}
  short = dict(p['short'])
  short['scenarios'] = tuple(short.get('scenarios', scenarios))
  return {'name': name, 'title': p['title'], 'paper': p['paper'], 'metric': p['metric'],
          'setting': _cited_table(p['setting'], f'{w}.setting'),
          'seeds': _cited(p['seeds'], f'{w}.seeds'),
          'grid': _cited_table(p.get('grid'), f'{w}.grid'), 'scenarios': scenarios,
          'scenario_extra': extra, 'methods': methods, 'short': short,
          'notes': list(p.get('notes', [])), 'pipeline': p['pipeline'],
          'pending': p.get('pending', ''), 'issue': p.get('issue', ''),
          'report_rounds': tuple(p.get('report_rounds', ()))}


def load(directory=TABLES):
  """Every paper table: ({preset name: preset}, [experiment rows in table order])."""
  raw, rows = {}, []
  for paper in PAPERS:
    with open(os.path.join(directory, f'{paper}.toml'), 'rb') as f:
      table = tomllib.load(f)
    for name, p in table.get('presets', {}).items():
      if name in raw:
        raise ValueError(f'preset {name} is defined twice')
      raw[name] = dict(p, paper=table['paper'])
    rows += [dict(e, id=eid, paper=table['paper'], short_paper=table['short'])
             for eid, e in table.get('experiments', {}).items()]
  presets = {name: _normalise(name, _inherit(name, raw)) for name in raw}
  for row in rows:
    for name in row['presets']:
      if name not in presets:
        raise ValueError(f'experiment {row["id"]} names an unknown preset {name}')
  return presets, rows


PRESETS, EXPERIMENTS = load()


# ---------------------------------------------------------------------------------------------
# Resolving a preset into configurations, and what this build lacks for each.

def method_grid(preset, method):
  """{field: (values, source)}: the shared grid with the method's own entries replacing it."""
  return {**preset['grid'], **method['grid']}


def scenario_names(preset, mode):
  names = list(preset['scenarios'])
  return [n for n in names if n in preset['short']['scenarios']] if mode == 'short' else names


def _short_rounds(preset, scenario):
  rounds = preset['short']['rounds']
  return rounds[scenario] if isinstance(rounds, dict) else rounds


def resolve(name, mode, scenario, label, rounds=None, seeds=None):
  """(Config values, grid {field: values}, seeds) of one method in one scenario and mode.

  Precedence: setting < scenario < method < the scenario's entry for that method."""
  preset = PRESETS[name]
  method = preset['methods'][label]
  values = dict(SELECTION)
  values.update({k: val for k, (val, _) in preset['setting'].items()})
  values.update({k: val for k, (val, _) in preset['scenarios'][scenario].items()})
  values.update({k: val for k, (val, _) in method['set'].items()})
  by_method = preset['scenario_extra'][scenario]['methods'].get(label, {})
  values.update({k: val for k, (val, _) in by_method.items()})
  values['algo'] = method['algo']
  grid = {k: tuple(vals) for k, (vals, _) in method_grid(preset, method).items()}
  n_seeds = preset['seeds'][0]
  full_rounds = values.get('rounds')
  if mode == 'cpu':
    values, n_seeds = cpu_values(values), CPU_SEEDS
    if preset['metric'] == 'last10':  # every 3 rounds, the last 10% of 20 holds round 20 only
      values['eval_every'] = 1
  if mode == 'short':
    short = preset['short']
    values['rounds'] = _short_rounds(preset, scenario)
    n_seeds = short['seeds']
    point = short.get('point', {})
    grid = {k: (point[k],) if k in point and point[k] in vals else vals[:1] if len(vals) > 1
            else vals for k, vals in grid.items()}
    if values.get('eval_every', 1) > 1:
      values['eval_every'] = max(1, min(values['eval_every'], values['rounds'] // 5))
  if rounds:
    values['rounds'] = rounds
    values['eval_every'] = min(values.get('eval_every', 1), rounds)
  if seeds:
    n_seeds = seeds
  if values.get('concept_shift_count') and values['rounds'] != full_rounds:
    values['concept_shift_count'] = scaled_shift_count(
        values['concept_shift_count'], full_rounds, values['rounds'])
  for k in [k for k, vals in grid.items() if len(vals) == 1]:  # one value: a plain setting
    values[k] = grid.pop(k)[0]
  if values.get('scenario') == 'longtail_stateless':  # no split can be held out (NO_SPLIT)
    values['val_fraction'] = 0.0
  return values, grid, n_seeds


def cpu_values(values):
  """The cpu tier's Config values for a run of the paper's `values` (CPU_WHY says why each
  change): methods, partition, clients per round, local work and hyperparameters stay."""
  data, model = values.get('dataset', 'embedded'), values.get('model', 'mlp')
  out = {k: v for k, v in values.items() if k not in CPU_DROP}
  out['dataset'] = CPU_DATA.get(data, data)
  out['model'] = 'mlp_bn' if model.endswith('_bn') else 'logreg'
  out.update(augment='none', normalize='none')
  out['rounds'] = min(values.get('rounds', CPU_ROUNDS), CPU_ROUNDS)
  out['eval_every'] = max(1, min(3, out['rounds']))
  out['num_clients'] = cpu_clients(values, data)
  if 'projection_hidden' in out:  # a method with a projection head (MOON, FedGKD+)
    out['projection_hidden'] = CPU_PROJECTION_HIDDEN
  if 'fedgen_hidden' in out:  # FedGen's generator
    out.update(CPU_GENERATOR)
  if out.get('vote_val_size'):
    out['vote_val_size'] = round(out['vote_val_size'] * TRAIN_SIZE['embedded'] /
                                 TRAIN_SIZE.get(data, 50_000))
  return out


def cpu_clients(values, data):
  """The cpu tier's population: the paper's up to CPU_CLIENTS, above it scaled with the data
  (never below the clients per round)."""
  n = values.get('num_clients', CPU_CLIENTS)
  if n <= CPU_CLIENTS:
    return n
  scaled = round(n * TRAIN_SIZE['embedded'] / TRAIN_SIZE.get(data, 50_000))
  return max(scaled, values.get('clients_per_round', 1))


def cpu_left_out(values):
  """Why a paper run has no cpu-tier counterpart ('' when it has one)."""
  data = values.get('dataset', 'embedded')
  return CPU_LEFT_OUT.get(data, '' if data in CPU_DATA or data == 'embedded' else
                          f'no CPU stand-in for --dataset={data}')


def scaled_shift_count(count, full_rounds, rounds):
  """The paper's concept shifts per round kept when the rounds are cut: count * rounds /
  full_rounds, at least 1 and at most rounds - 1 (shifts fall on distinct rounds 2..rounds)."""
  return max(1, min(rounds - 1, round(count * rounds / full_rounds))) if rounds > 1 else 0


def _dataset_known(name):
  from fedjax_drift.data import sources  # pylint: disable=g-import-not-at-top
  prefix = name.split(':', 1)[0] + ':' if ':' in name else None
  return name in sources.DATASETS or (prefix and any(k.startswith(prefix)
                                                     for k in sources.DATASETS))


def missing(values):
  """What this build lacks to run `values` (empty when it can): one short phrase each."""
  from fedjax_drift.models import zoo  # pylint: disable=g-import-not-at-top
  fields = {f.name: f for f in dataclasses.fields(fedjax_drift.Config)}
  out = []
  for k, val in values.items():
    if k not in fields:
      if k not in TODAY or TODAY[k] != val:
        out.append(f'flag --{k}')
      continue
    choices = fields[k].metadata.get('choices')
    if choices and val not in choices:
      out.append(f'--{k}={val}')
  part = values.get('partition', 'iid')
  if part not in PARTITIONS and not part.startswith('file:'):
    out.append(f'--partition={part}')
  if not _dataset_known(values.get('dataset', 'embedded')):
    out.append(f'dataset {values["dataset"]}')
  if values.get('model', 'mlp') not in zoo.MODELS:
    out.append(f'model {values["model"]}')
  if values['algo'] not in algorithms.NAMES:
    out.append(f'algorithm {values["algo"]}')
  return out


def _static_pending(preset, scenario, label):
  """(pending reasons written in the table, issue references) of one run."""
  extra, method = preset['scenario_extra'][scenario], preset['methods'][label]
  pending = [x for x in (preset['pending'], extra['pending'], method['pending']) if x]
  issues = [x for x in (preset['issue'], extra['issue'], method['issue']) if x]
  return pending, issues


def plan(name, mode, only=None, rounds=None, seeds=None, replace=None):
  """Every (scenario, method label, values, grid, seeds, pending reasons) of a preset.

  replace: Config values set over the preset's (a user's --dataset/--data_dir)."""
  preset, out = PRESETS[name], []
  for scenario in scenario_names(preset, mode):
    for label in preset['methods']:
      if only and label not in only:
        continue
      values, grid, n_seeds = resolve(name, mode, scenario, label, rounds, seeds)
      values.update(replace or {})
      if values.get('val_source') == 'dataset' and values.get('val_fraction'):
        values['val_source'] = SELECTION['val_source']  # --val_fraction asks for a carved split
      static, issues = _static_pending(preset, scenario, label)
      reasons = [f'{r} ({", ".join(issues)})' if issues else r
                 for r in static + missing(values)]
      if mode == 'cpu' and cpu_left_out(values) and not reasons:  # else: pending anyway
        reasons = [f'not in the cpu tier: {cpu_left_out(values)}']
      out.append((scenario, label, values, grid, n_seeds, reasons))
  return out


def to_config(values, grid, seeds):
  """A validated Config; pipeline values equal to TODAY's behaviour drop out if unknown."""
  fields = {f.name for f in dataclasses.fields(fedjax_drift.Config)}
  kept = {k: val for k, val in values.items() if k in fields}
  return fedjax_drift.Config(**kept, seeds=seeds, grid=_grid_text(grid)).validate()


def configs(name, mode, only=None, **overrides):
  """Every live (scenario, method, Config) of a preset, validated (the fast test calls this)."""
  return [(s, label, to_config(v, g, n))
          for s, label, v, g, n, reasons in plan(name, mode, only, **overrides) if not reasons]


def pending(name, mode='full', only=None):
  """{reason: [method @ scenario, ...]} of the runs this build cannot do yet; a reason's
  issue references are merged over its runs."""
  where, issues = {}, {}
  for s, label, *_, reasons in plan(name, mode, only):
    for r in reasons:
      base, _, refs = r.partition(' (issue')
      where.setdefault(base, []).append(f'{label} @ {s}')
      issues.setdefault(base, set()).update(
          f'issue{x}' for x in refs.rstrip(')').split(', issue') if refs)
  return {(f'{b} ({", ".join(sorted(issues[b]))})' if issues[b] else b): w
          for b, w in where.items()}


def _grid_text(grid):
  return ';'.join(f'{k}:{",".join(repr(float(x)) for x in vals)}' for k, vals in grid.items())


# ---------------------------------------------------------------------------------------------
# How much work a mode is: an estimate from FLOPs, not a measurement.

# MFLOP per sample-gradient (forward + backward) from XLA's cost analysis of a training step
# (jax.grad of the loss, batch 8, at the paper's input size: 32x32 CIFAR, 64x64 Tiny-ImageNet,
# 256x256 DomainNet, 28x28 digits and EMNIST, 128 tokens of text); models not listed count as
# 100 (said so).
MFLOP_PER_SAMPLE = {'cnn_cifar': 162, 'resnet20_bn': 305, 'resnet8': 123,
                    'cnn_mcmahan_cifar': 113, 'resnet18': 4405, 'cnn_cifar_moon': 148,
                    'resnet50_gn': 31784, 'resnet50_bn': 31784, 'alexnet_bn': 5415,
                    'digit_cnn_bn': 283, 'cnn_emnist': 74, 'distilbert': 33797}
CPU_GFLOPS = 60  # the README's benchmark: CNN training ran at ~62 GFLOP/s on the 2-core CPU
# Official training-set sizes; FedBN's digit and DomainNet subsets are their own (unknown here).
TRAIN_SIZE = {'cifar10': 50_000, 'cifar100': 50_000, 'tiny_imagenet': 100_000,
              'emnist': 697_932, 'embedded': 6_000, 'ag_news': 120_000, 'sst5': 8_544}


def _client_examples(c):
  n = TRAIN_SIZE.get(c.dataset, 50_000)
  if c.scenario == 'longtail_stateless':
    share = sum(c.imbalance_ratio ** (i / 9) for i in range(10)) / 10
    return n * c.client_fraction * share
  return n * (1 - c.val_fraction) / c.num_clients  # clients train without the split


def sample_gradients(c):
  """Sample-gradients of one config: rounds x cohort x local work x seeds x grid points."""
  if c.local_steps:
    per_client = c.local_steps * c.batch_size
  else:
    per_client = c.local_epochs * math.ceil(_client_examples(c) / c.batch_size) * c.batch_size
  points = len(grid_points(parse_grid(c.grid)))
  return c.rounds * c.clients_per_round * per_client * c.seeds * points


def estimate(name, mode, **overrides):
  """(sample-gradients, CPU hours at CPU_GFLOPS, models of unknown cost) of the live runs."""
  total = flops = 0
  unknown = set()
  for _, _, c in configs(name, mode, **overrides):
    n = sample_gradients(c)
    total += n
    if c.model not in {**MFLOP_PER_SAMPLE, **CPU_MFLOP} or c.dataset not in TRAIN_SIZE:
      unknown.add(c.dataset if c.dataset not in TRAIN_SIZE else c.model)  # CPU_MFLOP: cpu tier
    flops += n * {**MFLOP_PER_SAMPLE, **CPU_MFLOP}.get(c.model, 100) * 1e6
  return total, flops / (CPU_GFLOPS * 1e9) / 3600, sorted(unknown)


# ---------------------------------------------------------------------------------------------
# Running and reading the run directories.

def check_data(dataset, data_dir):
  """Loads the dataset once, so a missing one fails in one line before any work."""
  from fedjax_drift.data import sources  # pylint: disable=g-import-not-at-top
  sources.load(dataset, data_dir or None)


def run_method(config, sweep=True, log=lambda *_: None):
  """Runs config's seeds x grid; returns [tables.Run] (seed, grid point, test and validation
  curves)."""
  if sweep:
    fedjax_drift.run(config, log=log)
    return read_runs(config.out, config)
  runs = []  # an algorithm sweeps refuse: one run per grid point and seed
  for point in grid_points(parse_grid(config.grid)):
    for s in range(config.seeds):
      tag = '-'.join(f'{k}{val:g}' for k, val in point.items())
      single = dataclasses.replace(config, **point, seed=config.seed + s, seeds=1, grid='',
                                   out=f'{config.out}-{tag}-s{s}')
      fedjax_drift.run(single, log=log)
      runs += [r._replace(seed=config.seed + s, point=point)
               for r in read_runs(single.out, single)]
  return runs


def _run_method_job(config, sweep):
  """run_method in a worker process: ('ok', runs) or ('diverged', message); a UserError
  comes back as ('error', message), so nothing but plain values crosses processes."""
  try:
    return 'ok', run_method(config, sweep)
  except fedjax_drift.errors.DivergenceError as e:
    return 'diverged', str(e)
  except fedjax_drift.UserError as e:
    return 'error', str(e)


class _Later:
  """A job run in this process when its result is first asked for."""

  def __init__(self, config, sweep):
    self.args, self.value = (config, sweep), None

  def result(self):
    if self.value is None:
      self.value = _run_method_job(*self.args)
    return self.value


class Runner:
  """Runs a preset's methods one after another (jobs=1), or `jobs` at a time in worker
  processes: small models on a few cores spend most of a run in single-threaded work
  (tracing, XLA compilation, plotting), which two processes overlap. Each method's runs
  are the same programs on the same seeds either way, so the results are identical."""

  def __init__(self, jobs=1):
    if jobs < 1:
      raise fedjax_drift.UserError(f'--jobs={jobs} must be at least 1')
    self.jobs, self._pool = jobs, None

  def submit(self, config, sweep):
    """A future of _run_method_job(config, sweep): with jobs=1 it runs when its result is
    asked for, else in the next free worker (jobs are taken in the order submitted)."""
    if self.jobs == 1:
      return _Later(config, sweep)
    if self._pool is None:
      import concurrent.futures  # pylint: disable=g-import-not-at-top
      import multiprocessing  # pylint: disable=g-import-not-at-top
      # spawn: a forked JAX process is not safe to use.
      self._pool = concurrent.futures.ProcessPoolExecutor(
          self.jobs, mp_context=multiprocessing.get_context('spawn'))
    return self._pool.submit(_run_method_job, config, sweep)

  def close(self):
    if self._pool is not None:
      self._pool.shutdown(cancel_futures=True)
      self._pool = None


def accuracy_column(config):
  """The metrics.csv column a run is reported by: a run that calibrates its clients at every
  evaluation, by their personalised accuracy; any other, by the global model's."""
  return 'personalized_accuracy' if config.personalize_every_eval else 'test_accuracy'


def read_runs(run_dir, config):
  """[tables.Run] of a run directory written with `config` (tables.read_runs)."""
  return tables.read_runs(run_dir, list(parse_grid(config.grid)), config.seed,
                          accuracy_column(config))


# ---------------------------------------------------------------------------------------------
# Metrics as the papers report them, per run, then statistics over seeds: fedjax_drift/tables.py.

run_metrics = tables.run_metrics
summarise = tables.summarise


# ---------------------------------------------------------------------------------------------
# The preset runner.

def default_out(name, mode):
  """Outside the repository's tracked files: runs/presets/<preset>-<mode> (runs/ is ignored)."""
  return os.path.join('runs', 'presets', f'{name}-{mode}')


def check_out(out_dir, overwrite):
  """Refuses to replace earlier results (the committed ones above all) without --overwrite."""
  if overwrite or not os.path.exists(os.path.join(out_dir, 'results.json')):
    return
  where = (' (committed results of the repository)'
           if os.path.abspath(out_dir).startswith(COMMITTED + os.sep) else '')
  raise fedjax_drift.UserError(f'--out={out_dir} already holds results{where}; pass '
                               '--overwrite to replace them, or choose another --out')


def selection_overrides(select_on='validation', val_fraction=None):
  """Config values a --select_on/--val_fraction choice sets over the preset's: the papers'
  protocol (test) holds no split out unless --val_fraction says so."""
  if select_on not in ('validation', 'test'):
    raise fedjax_drift.UserError(f'--select_on={select_on} is not one of validation, test')
  if val_fraction is not None:
    if select_on == 'validation' and not val_fraction:
      raise fedjax_drift.UserError('--select_on=validation needs --val_fraction > 0')
    return {'val_fraction': val_fraction}
  return {'val_fraction': 0.0} if select_on == 'test' else {}


def _split_values(preset, replace):
  """{'val_fraction', 'val_source'} the preset's runs use (before NO_SPLIT's fallback)."""
  values = {**SELECTION, **{k: v for k, (v, _) in preset['setting'].items()}, **replace}
  return {k: values[k] for k in ('val_fraction', 'val_source')}


def run_preset(name, mode, data_dir='', dataset='', rounds=None, seeds=None, out_root=None,
               only=None, overwrite=False, log=print, select_on='validation',
               val_fraction=None, runner=None):
  """Runs a preset's live runs; dataset/data_dir/rounds/seeds override it, `only` keeps some
  methods; select_on/val_fraction choose the selection protocol (selection_overrides);
  runner (a Runner, default one method at a time) runs the methods. A preset with no live
  run is refused in one line naming what it needs. Returns the results (results.json)."""
  own = runner is None
  runner = runner or Runner(1)
  try:
    return start_preset(name, mode, data_dir, dataset, rounds, seeds, out_root, only,
                        overwrite, log, select_on, val_fraction, runner)()
  finally:
    if own:
      runner.close()


def pending_line(name, mode, only=None, rows=None):
  """Why a preset with no live run has none: 'not in the cpu tier: ...' or 'pending: ...'."""
  rows = plan(name, mode, only) if rows is None else rows
  if mode == 'cpu' and rows and all(r[5][0].startswith('not in the cpu tier') for r in rows):
    return rows[0][5][0]
  return f'pending: this build lacks {"; ".join(sorted(pending(name, mode, only)))}'


def start_preset(name, mode, data_dir, dataset, rounds, seeds, out_root, only, overwrite, log,
                 select_on, val_fraction, runner):
  """run_preset's checks, then its methods submitted to `runner`; returns finish(), which
  waits for them and writes results.json, table.md and the curves (so `all` keeps every
  worker busy across presets)."""
  preset = PRESETS[name]
  out_dir = out_root or default_out(name, mode)
  replace = {**({'dataset': dataset} if dataset else {}),
             **({'data_dir': data_dir} if data_dir else {}),
             **selection_overrides(select_on, val_fraction)}
  rows = plan(name, mode, only, rounds, seeds, replace)
  live = [(s, m, to_config(v, g, n)) for s, m, v, g, n, r in rows if not r]
  if not live:
    raise fedjax_drift.UserError(f'preset {name} is {pending_line(name, mode, only, rows)}')
  check_out(out_dir, overwrite)
  for ds, dd in {(c.dataset, c.data_dir) for _, _, c in live}:
    try:
      check_data(ds, dd)
    except fedjax_drift.UserError as e:
      raise fedjax_drift.UserError(f'preset {name} ({mode}) needs --dataset={ds}: {e}') from None
  os.makedirs(out_dir, exist_ok=True)
  changed = ([f'dataset {dataset} instead of the paper\'s'] if dataset else []) + \
      ([f'only the methods {", ".join(only)}'] if only else [])
  skipped = [f'{m} @ {s} ({"; ".join(r)})' for s, m, _, _, _, r in rows if r]
  accuracy = {accuracy_column(c) for *_, c in live}
  if len(accuracy) > 1:  # one table, one kind of accuracy
    raise fedjax_drift.UserError(f'preset {name} mixes runs reported by {sorted(accuracy)}')
  results = {'preset': name, 'mode': mode, 'title': preset['title'], 'paper': preset['paper'],
             'metric': preset['metric'], 'accuracy': accuracy.pop(),
             'cuts': cuts(name, mode, rounds, seeds) + changed +
             ([f'pending, not run: {", ".join(skipped)}'] if skipped else []),
             'date': time.strftime('%Y-%m-%d'), 'scenarios': {},
             'selection': {'select_on': select_on, **_split_values(preset, replace),
                           'fallback': NO_SPLIT},
             'references': tables.reference_methods(
                 {label: m['algo'] for label, m in preset['methods'].items()
                  if not only or label in only}, preset['paper'])}
  live = [(scenario, label, dataclasses.replace(
      config, progress=False, overwrite=OVERWRITE, out=os.path.join(
          out_dir, 'runs', f'{scenario}-{label}'.replace(' ', '_').replace('/', '_'))))
          for scenario, label, config in live]
  futures = [runner.submit(c, preset['methods'][label]['sweep']) for _, label, c in live]
  return lambda: _finish_preset(name, mode, rounds, seeds, select_on, log, preset, out_dir,
                                results, live, [f.result() for f in futures])


def _finish_preset(name, mode, rounds, seeds, select_on, log, preset, out_dir, results, live,
                   done):
  """run_preset's tables from its methods' outcomes `done` (Runner jobs, in `live`'s order)."""
  for (scenario, label, config), (status, runs) in zip(live, done):
    at = tuple(t for t in preset['report_rounds'] if t <= config.rounds)  # columns it reached
    if status == 'error':
      raise fedjax_drift.UserError(runs)
    if status == 'diverged':  # a method diverging everywhere is a result
      runs = runs.replace(out_dir + os.sep, '')  # paths relative to the results directory
      results.setdefault('diverged', []).append(f'{label} @ {scenario}: {runs}')
      log(f'[{name}/{scenario}] {label}: every run diverged ({runs})')
      continue
    points = summarise(runs, config.rounds, config.target_accuracy, at)
    on = select_on if config.has_validation else 'test'
    best, on_test = tables.select(points, preset['metric'], on)
    results['scenarios'].setdefault(scenario, []).append(
        {'method': label, 'config': dataclasses.asdict(config), 'chosen': best['grid_point'],
         'select_on': on, 'chosen_on_test': on_test['grid_point'],
         **{k: best[k] for k in best if k != 'grid_point'}})
    log(f'[{name}/{scenario}] {label}: test {preset["metric"]} '
        f'{stats.fmt_interval(best[preset["metric"]])} at {best["grid_point"]} (selected on '
        f'{on})')
  for scenario, rows_ in results['scenarios'].items():
    report.plot_mean_curves(
        os.path.join(out_dir, f'{_slug(scenario)}.png'),
        {r['method']: tuple(zip(*r['curve'])) for r in rows_}, f'{name} ({mode}): {scenario}')
  report.write_json(os.path.join(out_dir, 'results.json'), results)
  table = settings_table(name, mode, rounds, seeds) + '\n' + results_table(results) + ''.join(
      f'\nEvery run diverged, so no row: {d}\n' for d in results.get('diverged', []))
  report.atomic_write(os.path.join(out_dir, 'table.md'), table.encode())
  log(table)
  return results


def write_provenance(out_dir, started, after_s, load_start, n_presets, jobs):
  """OUT/provenance.json: the commit (with whether the checkout had changes), the command,
  when this preset finished into it and the whole command's wall time, load averages and
  the machine; experiments/collect_results.py prints them above the preset's tables."""
  def git(*a):
    try:
      return subprocess.run(['git', '-C', ROOT, *a], capture_output=True, text=True,
                            timeout=30).stdout.strip()
    except OSError:
      return ''
  changed = git('status', '--porcelain', '--untracked-files=no')
  report.write_json(os.path.join(out_dir, 'provenance.json'), {
      'commit': git('rev-parse', '--short', 'HEAD') or 'unknown',
      'checkout': 'with uncommitted changes' if changed else 'clean',
      'command': shlex.join(['python', 'experiments/presets.py', *sys.argv[1:]]),
      'presets_in_command': n_presets, 'jobs': jobs,
      'finished_after_s': round(after_s), 'wall_s': round(time.time() - started),
      'load_start': round(load_start, 2), 'load_end': round(os.getloadavg()[0], 2),
      'machine': f'{os.cpu_count()}-core {platform.machine()} CPU, '
                 f'{"no GPU" if jax_backend() == "cpu" else jax_backend()}',
      'started_utc': time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(started)),
      'finished_utc': time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())})


def jax_backend():
  import jax  # pylint: disable=g-import-not-at-top
  return jax.default_backend()


def _slug(text):
  return ''.join(c if c.isalnum() or c in '.=' else '_' for c in text)


# ---------------------------------------------------------------------------------------------
# Tables.

def cuts(name, mode, rounds=None, seeds=None):
  """What this mode changes from the paper's set-up, one sentence each."""
  preset = PRESETS[name]
  out = []
  if mode == 'short':
    short = preset['short']
    scen = scenario_names(preset, 'short')
    full_rounds = {s: preset['scenarios'][s].get('rounds', preset['setting'].get('rounds'))[0]
                   for s in scen}
    out = ['rounds: ' + ', '.join(f'{s} {_short_rounds(preset, s)} of {full_rounds[s]}'
                                  for s in scen),
           f'seeds: {short["seeds"]} of {preset["seeds"][0]}']
    if len(scen) < len(preset['scenarios']):
      out.append(f'scenarios: {", ".join(scen)} only (of {", ".join(preset["scenarios"])})')
    count = preset['setting'].get('concept_shift_count', (0,))[0]
    if count:
      out.append('concept shifts: ' + ', '.join(
          f'{s} {scaled_shift_count(count, full_rounds[s], _short_rounds(preset, s))} of '
          f'{count}' for s in scen) + ' (the paper\'s shifts per round)')
    tuned = {k for m in preset['methods'].values() for k, (vals, _) in
             method_grid(preset, m).items() if len(vals) > 1}
    if tuned:
      point = short.get('point', {})
      out.append('tuning grid: one point per method instead of the paper\'s grid (' +
                 ', '.join(f'{k}={point[k]:g}' if k in point else f'{k}=first value'
                           for k in sorted(tuned)) + '; fixed values stay)')
    out.append(f'why: {short["why"]}')
  if mode == 'cpu':
    out += [f'{k}: {why}' for k, why in CPU_WHY.items()]
    left = sorted({r for *_, reasons in plan(name, 'cpu') for r in reasons
                   if r.startswith('not in the cpu tier')})
    out += [f'left out: {r[len("not in the cpu tier: "):]}' for r in left]
  if rounds:
    out.append(f'rounds overridden on the command line: {rounds}')
  if seeds:
    out.append(f'seeds overridden on the command line: {seeds}')
  return out


def work_line(name, mode, rounds=None, seeds=None):
  n, hours, unknown = estimate(name, mode, rounds=rounds, seeds=seeds)
  if not n:
    return f'Estimated work of `--mode={mode}`: none of its runs is live in this build.'
  note = (f' Costs of {", ".join(unknown)} are not known here: counted as 100 MFLOP per '
          'sample-gradient on 50,000 examples.' if unknown else '')
  size = (f'{hours * 60:.1f} minutes' if mode == 'cpu' and hours < 1 else f'{hours:,.1f} hours')
  cpu = (' Small models on 2 cores run far below that rate (compilation, evaluation and '
         'per-step overheads dominate): see the wall times in experiments/RESULTS.md.'
         if mode == 'cpu' else '')
  return (f'Estimated work of `--mode={mode}` (its live runs): {n:.2g} sample-gradients, about '
          f'{size} of this 2-core CPU at {CPU_GFLOPS} GFLOP/s (an estimate from '
          f'FLOPs, not measured).{note}{cpu}')


def settings_table(name, mode='full', rounds=None, seeds=None):
  """The preset's settings with the source of every value, its pending runs and mode cuts."""
  preset = PRESETS[name]
  lines = [f'## `{name}`: {preset["title"]}', '',
           f'Paper: {preset["paper"]}. Experiments: '
           f'{", ".join(e["id"] for e in EXPERIMENTS if name in e["presets"])}. Mode `{mode}`' +
           (' (the paper\'s set-up).' if mode == 'full' else
            ' (the paper\'s methods, partition, participation and grids on the embedded data '
            'with a small model; changes listed below).' if mode == 'cpu' else
            ' (the paper\'s model, data and fixed hyperparameters; cut as listed below).'), '',
           f'Pipeline: {preset["pipeline"]}', '',
           '| setting | value | source |', '|---|---|---|']
  for k, (val, src) in preset['setting'].items():
    lines.append(f'| {k} | {_show(val)} | {src} |')
  lines.append(f'| seeds | {preset["seeds"][0]} | {preset["seeds"][1]} |')
  for k, (vals, src) in preset['grid'].items():
    lines.append(f'| {k} (tuned) | {_show(vals)} | {src} |')
  lines.append(f'| reported metric | {preset["metric"]} | see notes |')
  lines.append(f'| grid selection | {selection_text(preset)} | not stated: ours (issue 22); '
               '`--select_on=test` is the papers\' protocol |')
  lines += ['', '| scenario | setting | value | source |', '|---|---|---|---|']
  for scen, items in preset['scenarios'].items():
    extra = preset['scenario_extra'][scen]
    rows = [(k, val, src) for k, (val, src) in items.items()]
    rows += [(f'{k} ({lab} only)', val, src) for lab, t in extra['methods'].items()
             for k, (val, src) in t.items()]
    for k, val, src in rows or [('', '', 'the shared settings above')]:
      lines.append(f'| {scen} | {k} | {_show(val)} | {src} |')
  lines += ['', '| method | algo | setting | value | source |', '|---|---|---|---|---|']
  for label, m in preset['methods'].items():
    items = [(k, val, src) for k, (val, src) in m['set'].items()]
    items += [(f'{k} (tuned)' if len(vals) > 1 else k, vals if len(vals) > 1 else vals[0], src)
              for k, (vals, src) in m['grid'].items()]
    for k, val, src in items or [('', '', 'the shared settings above')]:
      lines.append(f'| {label} | {m["algo"]} | {k} | {_show(val)} | {src} |')
  if preset['notes']:
    lines += [''] + [f'- {n}' for n in preset['notes']]
  waiting = pending(name, mode)
  if waiting:
    lines += ['', '**Pending in this build** (refused until the piece exists; nothing to '
              'change here when it lands):', '']
    total = len(plan(name, mode))
    lines += [f'- {r}: ' + ('every run' if len(where) == total else ', '.join(where))
              for r, where in waiting.items()]
  c = cuts(name, mode, rounds, seeds)
  if c:
    lines += ['', f'**{mode} mode cuts** (everything else is the paper\'s):', '']
    lines += [f'- {x}' for x in c]
  lines += ['', work_line(name, mode, rounds, seeds)]
  return '\n'.join(lines) + '\n'


def selection_text(preset):
  """How the preset's grid points are chosen by default, in a few words."""
  values = {**SELECTION, **{k: v for k, (v, _) in preset['setting'].items()}}
  longtail = values.get('scenario') == 'longtail_stateless' or any(
      s.get('scenario', (None,))[0] == 'longtail_stateless' for s in preset['scenarios'].values())
  own = [(n, s.get('dataset', (values.get('dataset'),))[0]) for n, s in
         preset['scenarios'].items()
         if s.get('val_source', (values['val_source'],))[0] == 'dataset']
  if own and len(own) == len(preset['scenarios']):
    return 'on validation: ' + ', '.join(sorted({stats.own_split_name(d) for _, d in own}))
  if longtail or not values['val_fraction']:
    return f'on test ({NO_SPLIT})' if longtail else 'on test'
  where = ('each client\'s training examples' if values['val_source'] == 'clients'
           else 'the pooled training examples')
  return (f'on validation: {values["val_fraction"]:g} of {where}'
          + ''.join(f'; {n}: {stats.own_split_name(d)}' for n, d in own))


def _show(val):
  if isinstance(val, tuple):
    return '{' + ', '.join(_show(x) for x in val) + '}'
  if isinstance(val, bool):
    return str(val).lower()
  return f'{val:g}' if isinstance(val, float) else str(val)


def results_table(results):
  """The results of run_preset as markdown (fedjax_drift/tables.py markdown)."""
  return tables.markdown(results)


def command(name):
  return f'python experiments/presets.py {name} --mode=full'


def experiment_table():
  """One row per experiment the papers report: where it is, what it compares, how to run it."""
  lines = ['| id | paper | table/figure | compares | preset and command | status here |',
           '|---|---|---|---|---|---|']
  for e in EXPERIMENTS:
    only = f' --only={shlex.quote(",".join(e["only"]))}' if e.get('only') else ''
    cmds = '<br>'.join(f'`{command(p)}{only}`' for p in e['presets'])
    needs = sorted({r for p in e['presets'] for r in pending(p, only=e.get('only'))})
    live = any(configs(p, 'full', only=e.get('only')) for p in e['presets'])
    status = ('live' if not needs else
              ('partly live; ' if live else '') + 'pending: ' + '; '.join(needs))
    if e.get('not_produced'):
      status += f'. Not produced: {e["not_produced"]}'
    lines.append(f'| {e["id"]} | {e["short_paper"]} | {e["where"]} | {e["compares"]} | '
                 f'{cmds} | {status} |')
  return '\n'.join(lines) + '\n'


def document():
  """experiments/PRESETS.md: the experiments, then every preset's full set-up with sources."""
  head = ('# Paper presets\n\nGenerated by `python experiments/presets.py all --write_doc` '
          'from the tables in `experiments/presets/*.toml` (one per paper); do not edit by '
          'hand. It reflects the build it was generated on: a run marked pending becomes '
          'live when its piece lands (regenerate this file then).\n\n'
          '## The experiments\n\nEvery table and figure with results in the five papers, '
          'with the preset that runs it. `--only=a,b` keeps some methods of a preset.\n\n')
  parts = []
  for name in PRESETS:
    full = settings_table(name, 'full')
    parts.append(full + '\n**`--mode=short` cuts** (model, data and fixed hyperparameters '
                 'stay the paper\'s):\n\n' + ''.join(f'- {x}\n' for x in cuts(name, 'short')) +
                 '\n' + work_line(name, 'short') + '\n')
  return head + experiment_table() + '\n' + '\n'.join(parts)


def list_text():
  return '\n'.join(f'{e["id"]:4} {e["short_paper"]:12} {e["where"]:24} {", ".join(e["presets"])}'
                   for e in EXPERIMENTS)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('preset', nargs='?', choices=sorted(PRESETS) + ['all'])
  parser.add_argument('--mode', choices=('cpu', 'short', 'full'), default='short',
                      help='cpu: the paper\'s methods and grids on the embedded data with an '
                      'MLP (minutes here); short and full: the paper\'s data and models, for '
                      'accelerators')
  parser.add_argument('--out', default='', help='results directory (default '
                      'runs/presets/<preset>-<mode> under the current directory)')
  parser.add_argument('--overwrite', action='store_true',
                      help='replace the results already in --out')
  parser.add_argument('--only', default='', help='comma list of method labels to run')
  parser.add_argument('--dataset', default='', help='override the preset\'s dataset')
  parser.add_argument('--data_dir', default='', help='directory of the dataset\'s files')
  parser.add_argument('--rounds', type=int, default=0, help='override the rounds')
  parser.add_argument('--seeds', type=int, default=0, help='override the number of seeds')
  parser.add_argument('--select_on', choices=('validation', 'test'), default='validation',
                      help='pick each method\'s grid point by a validation split held out of '
                      'the clients\' training data (default), or by test accuracy as the papers '
                      'did (then no split is held out)')
  parser.add_argument('--val_fraction', type=float, default=None,
                      help=f'validation share (default {SELECTION["val_fraction"]:g}, or the '
                      'preset\'s own; 0 with --select_on=test)')
  parser.add_argument('--jobs', type=int, default=1,
                      help='methods run at a time, each in its own process (results are the '
                      'same; 2 on a 2-core CPU overlaps compilation and plotting)')
  parser.add_argument('--show', action='store_true', help='print the settings table only')
  parser.add_argument('--list', action='store_true', help='list the experiments and presets')
  parser.add_argument('--write_doc', action='store_true', help=f'rewrite {DOC}')
  args = parser.parse_args()
  if args.list or not args.preset:
    print(list_text())
    return 0
  if args.write_doc:
    report.atomic_write(DOC, document().encode())
    return 0
  names = list(PRESETS) if args.preset == 'all' else [args.preset]
  only = tuple(x.strip() for x in args.only.split(',') if x.strip()) or None
  runner, started, load = None, time.time(), os.getloadavg()[0]
  try:
    runner, finishing = Runner(args.jobs), []
    for name in names:
      if only and not set(only) <= set(PRESETS[name]['methods']):
        raise fedjax_drift.UserError(f'--only: {name} has no method '
                                     f'{sorted(set(only) - set(PRESETS[name]["methods"]))[0]}')
      if args.show:
        print(settings_table(name, args.mode, args.rounds or None, args.seeds or None))
        continue
      if len(names) > 1 and not configs(name, args.mode):  # `all`: say why, go on
        print(f'{name}: skipped, {pending_line(name, args.mode)}')
        continue
      out = args.out if len(names) == 1 else os.path.join(args.out, f'{name}-{args.mode}')
      out = out if args.out else default_out(name, args.mode)
      finishing.append((out, start_preset(
          name, args.mode, args.data_dir, args.dataset, args.rounds or None,
          args.seeds or None, out, only, args.overwrite, print, args.select_on,
          args.val_fraction, runner)))
    finished, failed = [], []
    for out, finish in finishing:
      try:
        finish()
      except fedjax_drift.UserError as e:
        if len(names) == 1:
          raise
        failed.append(out)  # `all`: one preset's error does not lose the others' results
        sys.stderr.write(f'error: {os.path.basename(out)}: {e}\n')
        continue
      finished.append((out, time.time() - started))
    for out, after in finished:  # the whole command's time is known only now
      write_provenance(out, started, after, load, len(finished), args.jobs)
    if failed:
      sys.stderr.write(f'error: {len(failed)} preset(s) failed: '
                       f'{", ".join(os.path.basename(f) for f in failed)}\n')
      return 2
  except fedjax_drift.UserError as e:
    sys.stderr.write(f'error: {e}\n')
    return 2
  finally:
    if runner is not None:
      runner.close()
  return 0


if __name__ == '__main__':
  sys.exit(main())

"""The modes of a preset (full, short, cpu): one method's Config values in one scenario.

`full` is the paper's set-up; `short` cuts what the preset's `short` entry lists; `cpu` moves
every preset by one rule (cpu_values, CPU_WHY) to the embedded data with a small model.
"""
from presetlib import datasizes
from presetlib.loading import PRESETS

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
CPU_DROP = ('augment_pad', 'augment_degrees', 'normalize_mean', 'normalize_std', 'gn_groups',
            'gn_group_size', 'cifar100_labels', 'emnist_split')
NO_SPLIT = 'stateless long-tail clients draw from the whole training set'
# Whole training sets (every domain and part), from datasizes.TRAIN_SETS, the one table of
# sizes with their sources. The cpu tier scales populations by them; estimates.py counts a
# run's client examples with datasizes.client_sizes (its own parts, split and clients).
TRAIN_SIZE = {name: datasizes.total(name) for name in datasizes.TRAIN_SETS}


# Scenario entries that say how its table reports the runs, not how they run (no Config
# field): half_round, the last round of the "best by half budget" column (FedFOR Tables 2-4
# head it "t="; Table 4's E=16 is 15 of 25 rounds, not 25 // 2).
REPORT_KEYS = ('half_round',)


def half_round(preset, scenario, rounds):
  """The last round that the "best by half budget" column of a `rounds`-round run of
  `scenario` counts: the scenario's half_round (the paper's table), scaled by rounds / its
  full rounds when the run is cut (at least 1, at most rounds); rounds // 2 without one."""
  own = preset['scenarios'][scenario].get('half_round')
  if own is None:
    return rounds // 2
  full = preset['scenarios'][scenario].get('rounds', preset['setting'].get('rounds'))[0]
  return max(1, min(rounds, round(own[0] * rounds / full)))


def method_grid(preset, method):
  """{field: (values, source)}: the shared grid with the method's own entries replacing it."""
  return {**preset['grid'], **method['grid']}


def scenario_names(preset, mode):
  """The scenarios a mode runs: all, or in short mode those its `short` entry keeps."""
  names = list(preset['scenarios'])
  return [n for n in names if n in preset['short']['scenarios']] if mode == 'short' else names


def short_rounds(preset, scenario):
  """The rounds of `scenario` in short mode (one number, or one per scenario)."""
  rounds = preset['short']['rounds']
  return rounds[scenario] if isinstance(rounds, dict) else rounds


def resolve(name, mode, scenario, label, rounds=None, seeds=None):
  """(Config values, grid {field: values}, seeds) of one method in one scenario and mode.

  Precedence: setting < scenario < method < the scenario's entry for that method."""
  preset = PRESETS[name]
  method = preset['methods'][label]
  values = dict(SELECTION)
  values.update({k: val for k, (val, _) in preset['setting'].items()})
  values.update({k: val for k, (val, _) in preset['scenarios'][scenario].items()
                 if k not in REPORT_KEYS})
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
    values['rounds'] = short_rounds(preset, scenario)
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


SELECTION_WHY = ('not stated in the papers; ours (issue 22): selection on 10% of each client\'s '
                 'training examples')


def sources(name, scenario, label):
  """{field: source} of every value resolve(name, 'full', scenario, label) returns, by the
  same precedence (the layer that gives a field its value gives its source)."""
  preset = PRESETS[name]
  method = preset['methods'][label]
  out = {k: SELECTION_WHY for k in SELECTION}
  out.update({k: src for k, (_, src) in preset['setting'].items()})
  out.update({k: src for k, (_, src) in preset['scenarios'][scenario].items()
              if k not in REPORT_KEYS})
  out.update({k: src for k, (_, src) in method['set'].items()})
  by_method = preset['scenario_extra'][scenario]['methods'].get(label, {})
  out.update({k: src for k, (_, src) in by_method.items()})
  out['algo'] = f'the method {label}'
  out.update({k: src for k, (_, src) in method_grid(preset, method).items()})
  values = resolve(name, 'full', scenario, label)[0]
  if values.get('scenario') == 'longtail_stateless':
    out['val_fraction'] = f'no split is held out: {NO_SPLIT}'
  return out


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


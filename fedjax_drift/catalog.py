"""The valid values of the main flags, with one line each (`experiments/run.py --list`)."""
from fedjax_drift import algorithms
from fedjax_drift.config import PARTITIONS
from fedjax_drift.data import scenarios, sources
from fedjax_drift.models.zoo import MODELS

MODEL_SUMMARIES = {  # models built by a function rather than a documented class
    'resnet8': 'CIFAR ResNet-8 with GroupNorm (FedGKD): 3 stages of one block',
    'resnet18': 'the ResNet-18 layout on 32x32 inputs, GroupNorm',
    'resnet20': 'He et al.\'s CIFAR ResNet-20, GroupNorm',
    # Docstrings whose first sentence is too long or holds an abbreviation ("App. D").
    'resnet20_bn': 'He et al.\'s CIFAR ResNet-20 with BatchNorm, option A shortcuts (FedFOR)',
    'cnn_mcmahan_cifar': 'McMahan et al.\'s (2017) CIFAR-10 CNN from the TensorFlow tutorial '
                         '(IGFL)',
}
PARTITION_SUMMARIES = {
    'iid': 'uniformly at random',
    'shards': 'sort-and-partition: --classes_per_client single-label shards per client',
    'dirichlet': 'per-class Dirichlet(--dirichlet_alpha) allocation',
    'dirichlet_client': 'a Dirichlet class mixture per client (Hsu et al.)',
    'quantity': 'Dirichlet client sizes, IID labels',
    'domains': 'each domain\'s examples to its own clients (any dataset with domain ids: '
               'digits5, domainnet, digits_domains, npz with d_train/d_test); N >= domains',
    'file:PATH': 'a JSON list of per-client index lists',
    'natural:COLUMN': 'one client per id of the dataset\'s group column (e.g. writer); '
                      '--num_clients picks a seeded subset',
}
SCENARIO_SUMMARIES = {
    'static': 'the partition\'s clients, labels as given',
    'concept_shift': 'each class is remapped to another label with --concept_shift_prob '
                     'before each round',
    'longtail_stateless': 'every selected client is a fresh long-tailed sample; none returns',
}


def _model_summary(name):
  """The first line of the model class's docstring, or MODEL_SUMMARIES[name]."""
  if name in MODEL_SUMMARIES:
    return MODEL_SUMMARIES[name]
  paragraph = (MODELS[name][0].__doc__ or '').strip().split('\n\n')[0]
  sentence = ' '.join(paragraph.split()).split('. ')[0].rstrip('.')
  return sentence if len(sentence) <= 90 else sentence[:87] + '...'


def sections():
  """[(title, flag, {value: one-line summary})] for algorithms, models, datasets, ..."""
  return [
      ('algorithms', 'algo', {n: r.summary for n, r in algorithms.RECIPES.items()}),
      ('models', 'model', {n: _model_summary(n) for n in MODELS}),
      ('datasets', 'dataset', dict(sources.DATASETS)),
      ('partitions', 'partition', {n: PARTITION_SUMMARIES.get(n, '')
                                   for n in PARTITIONS + ('file:PATH', 'natural:COLUMN')}),
      ('scenarios', 'scenario', {n: SCENARIO_SUMMARIES.get(n, '') for n in scenarios.NAMES}),
  ]


def values(flag):
  """The valid values of --flag as listed by sections(), or None if it has no section."""
  for _, name, entries in sections():
    if name == flag:
      return tuple(entries)
  return None


def text():
  """The --list output: a heading per section, then one `name  summary` line per value."""
  lines = []
  for title, flag, entries in sections():
    lines.append(f'{title} (--{flag}):')
    width = max(len(n) for n in entries)
    lines += [f'  {n:{width}s}  {s}'.rstrip() for n, s in entries.items()]
  return '\n'.join(lines)

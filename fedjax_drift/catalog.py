"""The valid values of the main flags, with one line each (`experiments/run.py --list`)."""
from fedjax_drift import algorithms, registry  # pylint: disable=unused-import
from fedjax_drift.data import partitions, scenarios, sources  # pylint: disable=unused-import
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
def _model_summary(name):
  """The first line of the model class's docstring, or MODEL_SUMMARIES[name]."""
  if name in MODEL_SUMMARIES:
    return MODEL_SUMMARIES[name]
  paragraph = (MODELS[name][0].__doc__ or '').strip().split('\n\n')[0]
  sentence = ' '.join(paragraph.split()).split('. ')[0].rstrip('.')
  return sentence if len(sentence) <= 90 else sentence[:87] + '...'


def _registered(kind):
  """{shown name: summary} of a registry kind; a prefix entry shows its summary's first word
  (file:PATH) and the rest of the summary after the comma."""
  out = {}
  for name, entry in registry.entries(kind).items():
    if entry.prefix:
      shown, _, summary = entry.summary.partition(', ')
      out[shown] = summary
    else:
      out[name] = entry.summary
  return out


def sections():
  """[(title, flag, {value: one-line summary})] for algorithms, models, datasets, ..."""
  return [
      ('algorithms', 'algo', _registered('algorithm')),
      ('models', 'model', {n: _model_summary(n) for n in MODELS}),
      ('datasets', 'dataset', dict(sources.DATASETS)),
      ('partitions', 'partition', _registered('partition')),
      ('scenarios', 'scenario', _registered('scenario')),
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

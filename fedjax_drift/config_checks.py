"""The checks across flags that Config.validate() runs after each field's own rule.

Each function takes a Config and raises UserError naming the first bad flag; `validate` runs
them in order. Kept apart from config.py (and core_flags.py, the one flat list of flags) so that
each reads as one thing.
"""
import dataclasses
import importlib.util
import math
import os

from fedjax_drift import registry
from fedjax_drift.data import partitions, scenarios
from fedjax_drift.errors import UserError, did_you_mean


def each_field(config):
  """Each field against its own metadata: its Bounds, then its choices."""
  for f in dataclasses.fields(config):
    value, bounds, choices = (getattr(config, f.name), f.metadata.get('bounds'),
                              f.metadata.get('choices'))
    if bounds is not None and not bounds.accepts(value):
      raise UserError(bounds.error(f.name, value, vars(config)))
    if choices and value not in choices:
      raise UserError(f'--{f.name}={value} is not one of '
                      f'{", ".join(choices)}{did_you_mean(value, choices)}')


def counts(config):
  """Counts that depend on each other: rounds and shifts, cohort, devices, local work."""
  if config.concept_shift_count < 0 or (config.scenario == 'concept_shift' and
                                      config.concept_shift_count > max(config.rounds - 1, 0)):
    raise UserError(f'--concept_shift_count={config.concept_shift_count} must be in 0..'
                    f'{max(config.rounds - 1, 0)} (shifts fall on distinct rounds 2..--rounds)')
  if config.clients_per_round % config.devices:
    raise UserError(f'--clients_per_round={config.clients_per_round} must be a multiple of '
                    f'--devices={config.devices}')
  if config.client_state == 'host' and config.devices > 1:
    raise UserError(f'--client_state=host runs on one device; --devices={config.devices} '
                    'splits the cohort over several (use --client_state=device)')
  if config.gn_groups and config.gn_group_size:
    raise UserError(f'--gn_groups={config.gn_groups} and --gn_group_size={config.gn_group_size} '
                    'conflict: give only one of them')
  if config.local_steps > 0 and config.local_epochs > 0:
    raise UserError(f'--local_steps={config.local_steps} and --local_epochs={config.local_epochs} '
                    'conflict: give only one of them')
  if config.clients_per_round > config.num_clients and not config.partition.startswith('file:'):
    raise UserError(f'--clients_per_round={config.clients_per_round} exceeds '
                    f'--num_clients={config.num_clients}')


def files(config):
  """--init_params and --resume: the files a run starts from."""
  if config.init_params and not config.init_params.endswith('.npz'):
    raise UserError(f'--init_params={config.init_params} must be an .npz (from --save_params)')
  if config.resume and not config.out:
    raise UserError('--resume needs --out=RUN_DIR, the run to continue')
  if config.cohorts and not config.cohorts.startswith('file:'):
    raise UserError(f'--cohorts={config.cohorts} must be file:PATH (a JSON list of one list of '
                    'client ids per round)')
  if config.cohorts and config.cohort_sampler != 'uniform':
    raise UserError(f'--cohorts=file: replaces sampling; drop '
                    f'--cohort_sampler={config.cohort_sampler}')
  if config.cohorts and scenarios.fresh_clients(config.scenario):
    raise UserError(f'--cohorts=file: names clients, but --scenario={config.scenario} draws '
                    'fresh clients every round')


def dataset(config):
  """--dataset: a registered name (or prefix), and the file an npz:PATH or text:PATH names
  exists, so that neither waits for the data loading to be refused."""
  if registry.find('dataset', config.dataset) is None:
    shown = [e.info.shown for e in registry.entries('dataset').values() if e.info.shown]
    raise UserError(f'--dataset={config.dataset} is unknown; use one of {", ".join(shown)}'
                    f'{did_you_mean(config.dataset, [n for n in shown if n.islower()])}')
  kind, _, path = config.dataset.partition(':')
  if kind in ('npz', 'text') and not os.path.exists(path):
    raise UserError(f'--dataset={config.dataset}: data file {path} does not exist')


def partition(config):
  """--partition: a known name, file:PATH or natural:COLUMN; shards needs labels."""
  if registry.find('partition', config.partition) is None:
    named = [n for n, e in registry.entries('partition').items() if not e.prefix]
    raise UserError(f'--partition={config.partition} is unknown; use one of '
                    f'{", ".join(named)}, file:PATH or natural:COLUMN'
                    f'{did_you_mean(config.partition, named)}')
  if config.partition == 'natural:':
    raise UserError('--partition=natural: needs a group column, e.g. natural:writer')
  if config.partition == 'shards' and config.classes_per_client < 1:
    raise UserError('--classes_per_client must be >= 1 with --partition=shards')


def personalization(config):
  """--personalize and an --algo without a server (local_only: its Recipe is not federated)
  need per-client test splits and a global model."""
  if config.personalize == 'calibrate' and config.test_partition != 'like_train':
    raise UserError('--personalize=calibrate needs a per-client test split: add '
                    '--test_partition=like_train')
  entry = registry.find('algorithm', config.algo)
  if entry is None or entry.info.federated:
    return
  algo = f'--algo={config.algo}'
  if not (config.test_partition == 'like_train' or partitions.splits_test(config.partition)):
    raise UserError(f'{algo} tests each client\'s model on its own test split: add '
                    '--test_partition=like_train (or use --partition=domains)')
  if config.personalize != 'none':
    raise UserError(f'--personalize={config.personalize} calibrates the global model, which '
                    f'{algo} never trains; drop it')
  if config.save_params:
    raise UserError(f'--save_params writes the global model, which {algo} never '
                    'trains (its clients\' models are in the checkpoints); drop it')


def outputs(config):
  """--tensorboard's package and --save_params's file name."""
  if config.tensorboard and importlib.util.find_spec('tensorboardX') is None:
    raise UserError('--tensorboard needs tensorboardX: pip install tensorboardX (or '
                    '".[tensorboard]" in the clone)')
  if config.save_params and not config.save_params.endswith('.npz'):
    raise UserError(f'--save_params={config.save_params} must end in .npz')


def selection(config):
  """--val_fraction, --val_source and --select_on (study.py carves the split)."""
  if config.val_source == 'dataset' and config.val_fraction:
    raise UserError(f'--val_source=dataset uses the dataset\'s own validation split, so '
                    f'--val_fraction={config.val_fraction:g} would carve a second one; give '
                    '--val_fraction=0 or another --val_source')
  if config.select_on == 'validation' and not config.has_validation:
    raise UserError('--select_on=validation needs a validation split: give --val_fraction '
                    '(e.g. 0.1) or --val_source=dataset, or --select_on=test')
  if config.val_source == 'dataset' and scenarios.fresh_clients(config.scenario):
    raise UserError(f'--val_source=dataset: --scenario={config.scenario} draws clients from '
                    'every example on the device, the validation split\'s too; use '
                    '--val_source=clients with --val_fraction=0 (and --select_on=test)')
  if config.val_fraction and scenarios.fresh_clients(config.scenario):
    raise UserError(f'--val_fraction: --scenario={config.scenario} draws every client from '
                    'the whole training set, so no validation split can be held out of it; '
                    'use --val_fraction=0 (and --select_on=test)')
  if config.val_fraction and config.val_source == 'server' and config.partition.startswith('file:'):
    raise UserError(f'--val_source=server: --partition={config.partition} names training '
                    'examples by index, so none can be held out before it; use '
                    '--val_source=clients')


def lr_schedule(config):
  """--lr_schedule and the flags of its kind (schedules.py)."""
  if config.lr_schedule in ('step', 'exponential') and not (
      math.isfinite(config.lr_decay) and 0 < config.lr_decay <= 1):
    raise UserError(f'--lr_schedule={config.lr_schedule} needs --lr_decay in (0, 1], got '
                    f'{config.lr_decay:g}')
  if config.lr_schedule == 'step' and config.lr_step_rounds < 1:
    raise UserError(f'--lr_schedule=step needs --lr_step_rounds >= 1 (rounds between '
                    f'decays), got {config.lr_step_rounds}')


def pipeline(config):
  """The training-pipeline flags that go together (data/pipeline.py, algorithms/local.py)."""
  if config.local_optimizer == 'adam' and config.local_momentum:
    raise UserError(f'--local_momentum={config.local_momentum} is SGD\'s; with '
                    '--local_optimizer=adam use --adam_b1')
  own = _own_local_optimizer(config)
  if own and config.local_optimizer != _default(config, 'local_optimizer'):
    raise UserError(f'--local_optimizer={config.local_optimizer} does not combine with '
                    f'--algo={config.algo}, whose local optimizer ({own}) is its own')
  if bool(config.normalize_mean) != bool(config.normalize_std):
    given = 'normalize_mean' if config.normalize_mean else 'normalize_std'
    raise UserError(f'--{given} needs --normalize_{"std" if config.normalize_mean else "mean"} '
                    'too')
  for name in ('normalize_mean', 'normalize_std'):
    for value in getattr(config, name).split(',') if getattr(config, name) else ():
      try:
        number = float(value)
      except ValueError:
        raise UserError(f'--{name}={getattr(config, name)} must be a comma list of '
                        'numbers') from None
      if not math.isfinite(number) or (name == 'normalize_std' and number <= 0):
        raise UserError(f'--{name}={getattr(config, name)}: every value must be finite'
                        f'{" and > 0" if name == "normalize_std" else ""}')


def _own_local_optimizer(config) -> str:
  """The local optimizer --algo's recipe brings (recipes.Recipe.local_optimizer: fedadc_dm's
  double momentum), which --local_optimizer cannot replace; '' for none or an unknown --algo."""
  entry = registry.find('algorithm', config.algo)
  return entry.info.local_optimizer if entry is not None else ''


def _default(config, name):
  """The default value of Config field `name` (a flag at its default was not given)."""
  return next(f.default for f in dataclasses.fields(config) if f.name == name)


def validate(config):
  """Every check, in order: each field's own rule first, then the rules across fields."""
  each_field(config)
  counts(config)
  files(config)
  dataset(config)
  lr_schedule(config)
  pipeline(config)
  partition(config)
  selection(config)
  personalization(config)
  outputs(config)

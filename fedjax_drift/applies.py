"""Which Config fields a run reads, so that a flag or --grid axis that does not apply is caught.

Every registered choice (fedjax_drift/registry.py) declares the fields it reads when it is
chosen: the algorithm and its local parts, aggregator, server and local optimizer, the model
(its --dropout, --gn_* options), and the dataset (its loader's options), partition, scenario,
augmentation, schedule and personalisation. The options that only matter while another flag is set (WHEN_SET) are
declared here. A field that no entry declares (--lr, --server_lr, --weight_decay, --rounds,
...) is read by every run and never checked.

`unread(config)` is the declared() fields that the chosen algorithm (with --local_terms,
--aggregator, --server_optimizer, --server_momentum), scenario, partition and options leave
unread. `check_grid` refuses a --grid axis among them (it would only repeat runs), and
`unread_flags` lists the single-run flags set away from their defaults that nothing reads
(the run warns about them in one line: presets set shared flags for every method).
"""
import dataclasses

from fedjax_drift import algorithms, registry
from fedjax_drift.errors import UserError

# The choices a plain flag selects, in the order _what names them.
CHOICE_KINDS = ('model', 'scenario', 'partition', 'augment', 'personalize', 'lr_schedule',
                'personalize_term')

# flag -> (fields read only while it is set, fields it replaces and leaves unread).
WHEN_SET = {
    'init_params': (('init_params_run',), ('init',)),  # saved parameters replace --init's
    'val_fraction': (('val_source',), ()),  # where the split comes from, when there is one
    'diag_features_rounds': (('diag_features_n',), ()),  # how many, when features are written
    'straggler_frac': (('straggler_min_steps',), ()),  # how few steps, when clients straggle
}



def declared() -> frozenset:
  """The fields some choice or option reads only when chosen or set (those the checks track):
  the registry's declarations as they are now, the projection head's and WHEN_SET's."""
  return (registry.declared() | frozenset(algorithms.PROJECTION_READS)
          | {f for pair in WHEN_SET.values() for fields in pair for f in fields})


def _flag_value(config, kind):
  return getattr(config, registry.KINDS[kind][0])


def _algorithm_reads(config) -> set:
  """The fields the algorithm reads: its recipe's own, its parts', aggregator's, server's and
  local optimizer's, and the projection head's when it has one."""
  r = algorithms.recipe(config)
  out = set(registry.get('algorithm', config.algo).reads)
  if config.aggregator:  # --aggregator replaces the one the recipe's own flag would pick
    out.discard(r.aggregator_flag)
  for p in r.parts:
    out.update(registry.get('part', p).reads)
  out.update(registry.get('aggregator', r.aggregator).reads)
  if algorithms.projection_dim(config):
    out.update(algorithms.PROJECTION_READS)
  server_reads = registry.get('server', r.server).reads
  if r.server == 'slowmo' and config.server_momentum:
    server_reads = ()  # --server_momentum replaces --beta
  out.update(server_reads)
  out.update(registry.get('local_optimizer', algorithms.local_optimizer_name(config)).reads)
  return out


def reads(config) -> set:
  """The declared() fields that config's run reads."""
  out = _algorithm_reads(config)
  for kind in CHOICE_KINDS:
    entry = registry.find(kind, _flag_value(config, kind))
    if entry is not None:
      out.update(entry.reads)
  for flag, (when_set, replaced) in WHEN_SET.items():
    out.update(when_set if getattr(config, flag) else replaced)
  if config.val_source == 'dataset':  # the dataset's own split needs no --val_fraction
    out.add('val_source')
  if config.concept_shift_count:  # an exact count of shifts replaces the per-round chance
    out.discard('concept_shift_prob')
  dataset = registry.find('dataset', config.dataset)  # its loader's own options
  if dataset is not None:
    out.update(dataset.reads)
  for field, fallback in registry.FALLBACKS.items():
    if field in out and getattr(config, field) < 0:
      out.add(fallback)
  return out


def unread(config) -> set:
  """The declared fields that config's algorithm, scenario, partition and options leave unread."""
  return set(declared()) - reads(config)


def _what(config, field):
  """What leaves `field` unread, as flags: the choice flag that would read it (--partition=iid
  for --dirichlet_alpha), else the algorithm with the composition flags given."""
  if field == 'concept_shift_prob' and config.concept_shift_count:
    return f'--concept_shift_count={config.concept_shift_count}'
  for kind in CHOICE_KINDS[:-1]:  # a calibration term's fields are the algorithms' too
    if any(field in e.reads for e in registry.entries(kind).values()):
      return f'--{registry.KINDS[kind][0]}={_flag_value(config, kind)}'
  if any(field in e.reads for e in registry.entries('dataset').values()):
    return f'--dataset={config.dataset}'
  for flag, (when_set, replaced) in WHEN_SET.items():
    if field in when_set + replaced:
      return f'--{flag}={getattr(config, flag)!r}' if field in replaced else f'--{flag} unset'
  optimizers = [registry.get('local_optimizer', n)
                for n in registry.names('local_optimizer', selectable=True)]
  if any(field in e.reads for e in optimizers) and \
      algorithms.local_optimizer_name(config) == config.local_optimizer:
    return f'--local_optimizer={config.local_optimizer}'
  extra = [f'--{k}={getattr(config, k)}' for k in ('local_terms', 'aggregator',
                                                    'server_optimizer', 'server_momentum')
           if getattr(config, k)]
  return ' '.join([f'--algo={config.algo}'] + extra)


def check_grid(config, grid):
  """Raises UserError for the first --grid axis (a name in `grid`) that config's run does not
  read: its points would repeat the same run."""
  missing = [name for name in grid if name in unread(config)]
  if missing:
    raise UserError(f'--grid: {missing[0]} is not read with {_what(config, missing[0])} (its '
                    'points would repeat the same run); drop it from --grid')


def unread_flags(config) -> list:
  """Names of the fields set away from their defaults that config's run does not read, in
  Config order."""
  skip = unread(config)
  return [f.name for f in dataclasses.fields(config)
          if f.name in skip and getattr(config, f.name) != f.default]


def warning(config):
  """The one-line warning about unread_flags(config), or '' when there are none."""
  names = unread_flags(config)
  if not names:
    return ''
  by = {}  # what leaves them unread -> their flags
  for n in names:
    by.setdefault(_what(config, n), []).append(f'--{n}={getattr(config, n)}')
  return 'warning: ' + '; '.join(f'{", ".join(flags)} not read with {what}'
                                 for what, flags in by.items()) + ' (no effect)'

"""Which Config fields a run reads, so that a flag or --grid axis that does not apply is caught.

Every component that reads a field only when it is chosen declares that field here: the local
parts and aggregators of algorithms/parts.py (PART_READS), the server optimizers
(SERVER_READS), the local optimizers (LOCAL_OPTIMIZER_READS), and the data, scenario,
augmentation and personalisation choices (CHOICE_READS) and the dataset loaders
(DATASET_READS). A field named by none of them
(--lr, --server_lr, --weight_decay, --rounds, ...) is read by every run and never checked.

`unread(config)` is the declared fields that the chosen algorithm (with --local_terms,
--aggregator, --server_optimizer, --server_momentum), scenario, partition and options
(WHEN_SET: --init_params) leave unread. `check_grid` refuses a --grid axis among them (it
would only repeat runs), and `unread_flags` lists the single-run flags set away from their defaults that nothing reads
(the run warns about them in one line: presets set shared flags for every method).
"""
import dataclasses

from fedjax_drift.errors import UserError

# Local parts and aggregators (algorithms.LOCAL_TERMS, algorithms.AGGREGATORS; see
# algorithms._part): the hyperparameters each one's constructor is given.
PART_READS = {
    'fedadc': ('beta_local', 'fedadc_variant'),
    'self_kd': ('kd_lambda', 'kd_temperature', 'kd_tau2'),
    'for': ('for_alpha', 'for_scale'),
    'gkd': ('gkd_gamma', 'gkd_buffer', 'kd_temperature', 'gkd_loss', 'kd_tau2',
            'gkd_buffer_start'),
    'gkd_vote': ('vote_lambda', 'vote_val_size', 'gkd_buffer', 'kd_temperature', 'gkd_loss',
                 'kd_tau2', 'gkd_buffer_start'),
    'igfl_c': ('igfl_group',),
    'prox': ('prox_mu',),
    'scaffold': (),
    'dyn': ('dyn_alpha',),
    'curv': ('curv_lambda',),
    'curv_stateless': ('curv_lambda',),
    'ntd': ('ntd_beta', 'ntd_temperature', 'kd_tau2'),
    'rs': ('rs_alpha',),
    'moon': ('moon_mu', 'moon_temperature'),
    'fedbn': (),
    'feddistill': ('distill_lambda', 'kd_temperature', 'kd_tau2'),
    'fedgen': ('fedgen_alpha', 'fedgen_beta', 'fedgen_decay', 'fedgen_noise_dim', 'fedgen_hidden',
               'fedgen_steps', 'fedgen_lr', 'fedgen_weight_decay', 'fedgen_batch',
               'fedgen_client_batch', 'fedgen_diversity', 'fedgen_teacher'),
    'attention': ('attention_similarity', 'attention_temperature'),  # every attention_* aggregator
    'projection': ('moon_projection_dim', 'projection_hidden'),  # MOON, FedGKD+: the head
}

# Server optimizers (algorithms._server_optimizer); every one reads --server_lr.
SERVER_READS = {
    'avg': (),
    'slowmo': ('beta',),                     # --server_momentum, when given, replaces --beta
    'fedadc': ('beta_local', 'beta_global'),  # fedadc_dm: beta_global = beta_local (Alg. 4)
    'adam': ('server_beta1', 'server_beta2', 'server_tau'),
    'yogi': ('server_beta1', 'server_beta2', 'server_tau'),
    'adagrad': ('server_beta1', 'server_tau'),  # v <- v + g^2: no beta2 (Reddi et al., Alg. 2)
}

# Local optimizers (algorithms.local_optimizer); every one reads --lr and --weight_decay.
LOCAL_OPTIMIZER_READS = {
    'sgd': ('local_momentum',),
    'adam': ('adam_b1', 'adam_b2', 'adam_eps'),
    'fedadc_dm': ('phi',),  # its own double-momentum optimizer replaces --local_optimizer
}

# (flag, value or value prefix) -> fields read only with that choice.
CHOICE_READS = {
    ('scenario', 'concept_shift'): ('concept_shift_prob', 'concept_shift_kind',
                                    'concept_shift_count'),
    ('scenario', 'longtail_stateless'): ('imbalance_ratio', 'client_fraction'),
    ('partition', 'shards'): ('classes_per_client',),
    ('partition', 'dirichlet'): ('dirichlet_alpha',),
    ('partition', 'dirichlet_client'): ('dirichlet_alpha',),
    ('partition', 'quantity'): ('dirichlet_alpha',),
    ('augment', 'crop_flip'): ('augment_pad',),
    ('augment', 'flip_rotate'): ('augment_degrees',),
    ('personalize', 'calibrate'): ('personalize_epochs', 'personalize_term'),
    ('lr_schedule', 'step'): ('lr_decay', 'lr_step_rounds'),
    ('lr_schedule', 'exponential'): ('lr_decay',),
    ('lr_schedule', 'cosine'): ('lr_min',),
    ('personalize_term', 'prox'): ('prox_mu',),
    ('personalize_term', 'self_kd'): ('kd_lambda', 'kd_temperature', 'kd_tau2'),
}

# --dataset -> the loader options only its loader reads (data/sources.py LOAD_OPTIONS). A key
# ending in ':' matches that prefix (hf:NAME), 'emnist' also emnist_SPLIT.
DATASET_READS = {
    'hf:': ('hf_image_column', 'hf_label_column', 'hf_train_split', 'hf_test_split'),
    'cifar100': ('cifar100_labels',),
    'emnist': ('emnist_split',),
    'digits5': ('digits5_parts',),
    # Text (data/text.py); tfds: may be text (tfds:ag_news_subset), so it counts as reading them.
    **{key: ('tokenizer', 'vocab_size', 'max_seq_len') for key in ('ag_news', 'sst5', 'text:',
                                                                   'tfds:')},
}

# flag -> (fields read only while it is set, fields it replaces and leaves unread).
WHEN_SET = {
    'init_params': (('init_params_run',), ('init',)),  # saved parameters replace --init's
    'val_fraction': (('val_source',), ()),  # where the split comes from, when there is one
    'diag_features_rounds': (('diag_features_n',), ()),  # how many, when features are written
}

# A field whose -1 means 'the same as' another field also reads that field.
FALLBACKS = {'beta_local': 'beta', 'beta_global': 'beta'}

DECLARED = frozenset(f for table in (PART_READS, SERVER_READS, LOCAL_OPTIMIZER_READS,
                                     CHOICE_READS, DATASET_READS) for fields in table.values() for f in fields
                     ) | {f for pair in WHEN_SET.values() for fields in pair for f in fields}


def _components(config):
  """(part names, server name, local optimizer name) of config's recipe (validated by it)."""
  from fedjax_drift import algorithms  # pylint: disable=g-import-not-at-top
  r = algorithms.recipe(config)
  parts = list(r.parts)
  if r.aggregator.startswith('attention'):
    parts.append('attention')
  if algorithms.projection_dim(config):
    parts.append('projection')
  local = 'fedadc_dm' if config.algo == 'fedadc_dm' else config.local_optimizer
  return parts, r.server, local


def reads(config) -> set:
  """The DECLARED fields that config's run reads."""
  from fedjax_drift import algorithms  # pylint: disable=g-import-not-at-top
  parts, server, local = _components(config)
  out = set()
  for p in parts:
    out.update(PART_READS[p])
  server_reads = SERVER_READS[server]
  if server == 'slowmo' and config.server_momentum:
    server_reads = ()
  if server == 'fedadc' and config.algo == 'fedadc_dm':
    server_reads = ('beta_local',)
  out.update(server_reads)
  out.update(LOCAL_OPTIMIZER_READS[local])
  for (flag, value), fields in CHOICE_READS.items():
    if getattr(config, flag) == value:
      out.update(fields)
  for flag, (when_set, replaced) in WHEN_SET.items():
    out.update(when_set if getattr(config, flag) else replaced)
  if config.val_source == 'dataset':  # the dataset's own split needs no --val_fraction
    out.add('val_source')
  if config.concept_shift_count:  # an exact count of shifts replaces the per-round chance
    out.discard('concept_shift_prob')
  for key, fields in DATASET_READS.items():
    if _is_dataset(config.dataset, key):
      out.update(fields)
  if algorithms.RECIPES[config.algo].aggregator == 'attention' and not config.aggregator:
    out.add('attention')  # the IGFL query, unless --aggregator names one
  for field, fallback in FALLBACKS.items():
    if field in out and getattr(config, field) < 0:
      out.add(fallback)
  return out


def _is_dataset(dataset, key):
  """Whether --dataset=dataset is DATASET_READS's `key`."""
  if key.endswith(':'):
    return dataset.startswith(key)
  return dataset == key or (key == 'emnist' and dataset.startswith('emnist_'))


def unread(config) -> set:
  """The declared fields that config's algorithm, scenario, partition and options leave unread."""
  return (set(DECLARED) | {'attention'}) - reads(config)


def _what(config, field):
  """What leaves `field` unread, as flags: the choice flag that would read it (--partition=iid
  for --dirichlet_alpha), else the algorithm with the composition flags given."""
  if field == 'concept_shift_prob' and config.concept_shift_count:
    return f'--concept_shift_count={config.concept_shift_count}'
  for (flag, _), fields in CHOICE_READS.items():
    if field in fields and flag != 'personalize_term':
      return f'--{flag}={getattr(config, flag)}'
  if any(field in fields for fields in DATASET_READS.values()):
    return f'--dataset={config.dataset}'
  for flag, (when_set, replaced) in WHEN_SET.items():
    if field in when_set + replaced:
      return f'--{flag}={getattr(config, flag)!r}' if field in replaced else f'--{flag} unset'
  if field in LOCAL_OPTIMIZER_READS['sgd'] + LOCAL_OPTIMIZER_READS['adam'] and \
      config.algo != 'fedadc_dm':
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

"""One registry of choices: each component registers once, beside its code.

An entry is a choice that a flag selects: an algorithm (--algo), a local part (--local_terms),
an aggregator, a server or local optimizer, a dataset, a partition, a scenario, an
augmentation, a learning-rate schedule, a personalisation, a model, an initialisation. It
gives its name, a one-line summary, the Config fields it reads when it is chosen (`reads`) and
how it is built from their values (`build`). Lists (`--list`, `--help`'s choices), checks
(flags that do not apply, --grid axes) and the documents derive from these entries, so a
choice is named once.

`build(values, **context)` receives a `Values` view that holds the entry's declared fields and
the fields every run reads (those no entry declares): reading any other field is an error, so
a declaration cannot fall behind its code (tests/test_registry.py builds every entry through a
recording Config and holds each declaration to what it read).

Each kind's contract: what an entry's `info` is, and what its `build` receives besides the
Values (the context) and returns. INTERNAL as info: a choice a recipe makes, not its flag.
- algorithm: info a recipes.Recipe (its parts, aggregator, server, local optimizer, the paper's
  weighting, `federated`, the `aggregator_flag` of its own that picks its aggregator,
  `masks_cohort`...; a recipe's own local optimizer refuses --local_optimizer). build,
  optional: (values, algo, model, parts, trainer, objective, optimizer, clip, train_apply) ->
  the FederatedAlgorithm in place of the recipe's composed `algo` (algorithms.method_context
  says what each is).
- part: info a parts.PartNeeds (a server of its own, a projection head, a server validation
  split, local normalisation layers), None for none. build(values, model, server_data, parts,
  weighting) -> a parts.Part.
- aggregator: info None. build(values, model, server_data, parts, weighting) -> a Part with an
  `aggregate` hook, or None for compose's own weighted mean.
- server, local_optimizer: info None or INTERNAL. build(values) -> an optax
  GradientTransformation.
- model: info a models/info.ModelInfo (its family, 'dense', 'conv' or 'text'; BatchNorm; its
  BatchNorm twin for FedBN). build(values, num_classes, input_shape, vocab_size) -> a flax
  module; values holds only its options (--dropout, --gn_*, --pretrained).
- init: info (scheme, after_init), read by models.get; no build.
- dataset: info a data/common.DatasetInfo (its loader, files, model, classes...); no build.
- partition: info a data/partitions.PartitionInfo (a label partition's function, fixed
  indices, a check of the dataset, whether it splits the test set). build(values, dataset,
  keep) -> (train parts as indices into the whole training set, test parts or None); keep: the
  examples clients may hold.
- scenario: info None or a data/scenarios.ScenarioInfo (whether its clients are drawn afresh
  every round). build(values, num_classes, y_train) -> a data/scenarios.Scenario.
- lr_schedule: info None. build(values) -> an optax schedule, or None for a constant rate.
- personalize_term: info None. build(values) -> the parts.Part whose loss calibration adds to
  the cross-entropy, or None for none (personalize.for_experiment).
- augment, personalize: pure data (a name and its reads); no build.

A user's own module registers the same way, with flags of its own (`flag`: a setting that
becomes a Config field, config.config_class): `--plugin=FILE_OR_MODULE` loads it
(`load_plugins`) before the command line reads its other flags, and config.json records it, so
--resume and --config=RUN_DIR load it too (docs/new_method.md, section 7).

`load_package` imports every module of the package that registers choices (PACKAGE_MODULES);
the package's __init__ calls it, so the command line, a user's script and the tests read one
complete registry. Tables derived from the registry (applies.declared, sources.datasets,
catalog.sections, config.fields) are computed when asked, never snapshotted at import, so a
choice or flag registered later joins them.

This module is the bottom of the package: it imports nothing of the project but errors (its
loaders import the package's registering modules and plugins when called).
"""
import collections.abc
import dataclasses
import importlib
import importlib.util
import os
import sys
from typing import Any, Callable, NamedTuple, Optional

from fedjax_drift.errors import UserError, did_you_mean

# kind -> (the flag that selects it, what its entries are), in --list order.
KINDS = {
    'algorithm': ('algo', 'algorithms'),
    'part': ('local_terms', 'local parts (--local_terms adds them to any algorithm)'),
    'aggregator': ('aggregator', 'aggregators'),
    'server': ('server_optimizer', 'server optimizers'),
    'local_optimizer': ('local_optimizer', 'local optimizers'),
    'model': ('model', 'models'),
    'init': ('init', 'parameter initialisations'),
    'dataset': ('dataset', 'datasets'),
    'partition': ('partition', 'partitions'),
    'scenario': ('scenario', 'scenarios'),
    'augment': ('augment', 'augmentations'),
    'lr_schedule': ('lr_schedule', 'learning-rate schedules'),
    'personalize': ('personalize', 'personalisation after training'),
    'personalize_term': ('personalize_term', 'calibration terms'),
}

# A field whose negative value means 'the same as' another field: reading it reads that one too.
FALLBACKS = {'beta_local': 'beta', 'beta_global': 'beta'}


class Entry(NamedTuple):
  """One registered choice.

  kind: a KINDS key. name: the flag's value ('file:' with prefix=True matches file:PATH).
  summary: one line for --list and the documents. reads: the Config fields read only when this
  entry is chosen. build: callable(values, **context) -> the component, or None for a choice
  that is pure data. info: kind-specific data (an algorithm's recipe, a dataset's files...).
  """
  kind: str
  name: str
  summary: str
  reads: tuple = ()
  build: Optional[Callable] = None
  prefix: bool = False
  info: Any = None


_ENTRIES = {kind: {} for kind in KINDS}
_DECLARED = []  # declared()'s answer, cleared by register


def register(kind, name, summary, reads=(), build=None, prefix=False, info=None) -> Entry:
  """Registers one choice and returns its Entry; a second entry of the same name is an error."""
  if kind not in KINDS:
    raise ValueError(f'unknown registry kind {kind!r}; use one of {", ".join(KINDS)}')
  if name in _ENTRIES[kind]:
    raise ValueError(f'{kind} {name!r} is registered twice')
  entry = Entry(kind, name, summary, tuple(reads), build, prefix, info)
  _ENTRIES[kind][name] = entry
  _DECLARED.clear()
  return entry


def registers(kind, name, summary, reads=(), prefix=False, info=None):
  """Decorator form of `register`: the decorated function is the entry's build."""
  def wrap(build):
    register(kind, name, summary, reads, build, prefix, info)
    return build
  return wrap


def entries(kind) -> dict:
  """{name: Entry} of one kind, in registration order."""
  return dict(_ENTRIES[kind])


# An entry's info that marks it internal: a recipe chooses it, its flag does not offer it.
INTERNAL = 'internal'


def names(kind, selectable=False) -> tuple:
  """The registered names of one kind ('file:' for a prefix entry), in registration order;
  selectable=True leaves out the INTERNAL entries (those only a recipe chooses)."""
  return tuple(n for n, e in _ENTRIES[kind].items() if not (selectable and e.info == INTERNAL))


class Choices(collections.abc.Sequence):
  """The selectable names of one kind, read when used: a Config field's choices, which stay
  current as modules register entries after config.py is imported."""

  def __init__(self, kind):
    self.kind = kind

  def _names(self):
    return names(self.kind, selectable=True)

  def __getitem__(self, i):
    return self._names()[i]

  def __len__(self):
    return len(self._names())

  def __repr__(self):
    return f'registry.Choices({self.kind!r})'


def find(kind, value) -> Optional[Entry]:
  """The entry that `value` selects (a prefix entry matches value.startswith(name)), or None."""
  if value in _ENTRIES[kind]:
    return _ENTRIES[kind][value]
  for entry in _ENTRIES[kind].values():
    if entry.prefix and value.startswith(entry.name):
      return entry
  return None


def get(kind, value, flag=None) -> Entry:
  """find(), or a one-line UserError naming the flag, the choices and the nearest name."""
  entry = find(kind, value)
  if entry is None:
    flag = flag or KINDS[kind][0]
    shown = [n + ('...' if e.prefix else '') for n, e in _ENTRIES[kind].items()]
    raise UserError(f'--{flag}={value} is unknown; use one of {", ".join(shown)}'
                    f'{did_you_mean(value, [n for n in _ENTRIES[kind] if n.islower()])}')
  return entry


def declared() -> frozenset:
  """Every field some entry reads only when chosen (the fields the unread-flag check tracks)."""
  if not _DECLARED:
    _DECLARED.append(frozenset(f for table in _ENTRIES.values() for e in table.values()
                               for f in e.reads))
  return _DECLARED[0]


def resolve_fallback(field, value, config):
  """A FALLBACKS field's value with -1 read as its fallback's (a traced value counts as set)."""
  if field in FALLBACKS and isinstance(value, (int, float)) and value < 0:
    return getattr(config, FALLBACKS[field])
  return value


class Values:
  """A read-only view of a Config for one entry's build: its declared fields (FALLBACKS
  resolved) and the fields every run reads; any other field raises AttributeError naming it."""

  def __init__(self, entry: Entry, config):
    object.__setattr__(self, '_entry', entry)
    object.__setattr__(self, '_config', config)

  def __getattr__(self, field):
    entry, config = self._entry, self._config
    if field in entry.reads:
      return resolve_fallback(field, getattr(config, field), config)
    if field in declared():
      raise AttributeError(f'{entry.kind} {entry.name!r} reads --{field} but does not declare '
                           'it (registry.register(..., reads=...))')
    return getattr(config, field)

  def __setattr__(self, field, value):
    raise AttributeError('registry.Values is read-only')


def build(kind, name, config, **context):
  """The component `name` of `kind`, built from config's values of the fields it declares."""
  entry = get(kind, name)
  return entry.build(Values(entry, config), **context)


def field_names(config_class) -> frozenset:
  """The field names of a Config dataclass (for checking declarations against it)."""
  return frozenset(f.name for f in dataclasses.fields(config_class))


# --- Flags of a plugin's own, and loading the modules that register ---

# The modules of the package that register choices (each imports its family's files).
PACKAGE_MODULES = ('fedjax_drift.algorithms', 'fedjax_drift.personalize', 'fedjax_drift.schedules',
                   'fedjax_drift.models.zoo', 'fedjax_drift.models.convnets',
                   'fedjax_drift.models.mlps', 'fedjax_drift.models.recurrent',
                   'fedjax_drift.models.resnets', 'fedjax_drift.models.text',
                   'fedjax_drift.data.partitions',
                   'fedjax_drift.data.pipeline', 'fedjax_drift.data.scenarios',
                   'fedjax_drift.data.sources')


def load_package():
  """Imports PACKAGE_MODULES: every choice of the package is registered after this."""
  for name in PACKAGE_MODULES:
    importlib.import_module(name)


class Flag(NamedTuple):
  """A plugin's setting: what core_flags._f takes for a core field; its type is the default's."""
  name: str
  default: Any
  help: str
  choices: Optional[tuple] = None
  group: str = 'algorithm'
  bounds: Any = None
  gridable: bool = False


_FLAGS = {}  # name -> Flag, in declaration order
_RESERVED = set()  # the core Config's field names and the command line's own flags
_PLUGINS = {}  # a plugin as loaded (absolute path or module name) -> its module


def reserve(names):
  """Marks `names` (the core Config's fields: config.py calls this) as taken; a flag declared
  under one of them before (by a module of the package imported ahead of config.py) is a
  ValueError, as it is after."""
  taken = sorted(set(names) & set(_FLAGS))
  if taken:
    raise ValueError(f'flag --{taken[0]} already exists; give the flag another name')
  _RESERVED.update(names)


def flag(name, default, help_text, choices=None, group='algorithm', *, bounds=None,
         gridable=False) -> str:
  """Declares a plugin's setting --name, a new Config field; returns its name.

  default: its value when not given (a bool, int, float or str: the flag's type). help_text,
  choices, group, bounds, gridable: as for a core field (core_flags._f). The entry that reads it
  declares it in `reads`. A name a core field or an earlier flag has is a ValueError."""
  if not name.isidentifier():
    raise ValueError(f'flag {name!r} is not a Python identifier')
  if name in _RESERVED or name in _FLAGS:
    raise ValueError(f'flag --{name} already exists; give the plugin\'s flag another name')
  if not isinstance(default, (bool, int, float, str)):
    raise ValueError(f'flag --{name}: its default must be a bool, int, float or str')
  _FLAGS[name] = Flag(name, default, help_text, tuple(choices) if choices else None, group,
                      bounds, gridable)
  return name


def flags() -> dict:
  """{name: Flag} of every plugin flag declared so far, in declaration order."""
  return dict(_FLAGS)


def plugin_names(text) -> list:
  """The plugins a --plugin value names ('a.py,pkg.mod' -> ['a.py', 'pkg.mod'])."""
  return [s.strip() for s in (text or '').split(',') if s.strip()]


def _is_file(spec):
  return spec.endswith('.py') or '/' in spec or os.sep in spec


def absolute_plugins(text) -> str:
  """A --plugin value with its files as absolute paths (module names as given)."""
  return ','.join(os.path.abspath(s) if _is_file(s) else s for s in plugin_names(text))


def _import_file(path):
  """Executes the Python file at `path` as a module named after it; returns the module."""
  name = 'fedjax_drift_plugin_' + os.path.splitext(os.path.basename(path))[0]
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module
  try:
    spec.loader.exec_module(module)
  except BaseException:
    del sys.modules[name]
    raise
  return module


def load_plugin(spec):
  """Imports one plugin (a .py file or a module name) once; returns its module. UserError
  naming --plugin when there is no such file or module; its own errors are its own."""
  key = os.path.abspath(spec) if _is_file(spec) else spec
  if key not in _PLUGINS:
    if _is_file(spec) and not os.path.isfile(key):
      raise UserError(f'--plugin={spec}: no such file')
    try:
      _PLUGINS[key] = _import_file(key) if _is_file(spec) else importlib.import_module(spec)
    except ModuleNotFoundError as e:
      if _is_file(spec) or e.name != spec.split('.')[0]:
        raise
      raise UserError(f'--plugin={spec}: no file or module of that name (give a path ending '
                      'in .py, or a module on sys.path)') from None
  return _PLUGINS[key]


def load_plugins(text):
  """Loads every plugin a --plugin value names (see plugin_names), in order."""
  for spec in plugin_names(text):
    load_plugin(spec)


def plugins_in_argv(argv) -> str:
  """The --plugin values of a command line as one (files as absolute paths), or ''."""
  found = []
  for i, token in enumerate(argv):
    if token == '--':
      break
    if token.startswith('--plugin='):
      found.append(token.split('=', 1)[1])
    elif token == '--plugin' and i + 1 < len(argv):
      found.append(argv[i + 1])
  return ','.join(absolute_plugins(v) for v in found if plugin_names(v))

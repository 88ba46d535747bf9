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

This module is the bottom of the package: it imports nothing of the project but errors.
"""
import collections.abc
import dataclasses
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

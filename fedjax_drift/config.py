"""The run configuration: Config, the core flags and the plugins', validated before any work.

The flags themselves, with their metadata and what it asks of the code reading them (traced
gridable fields, scenario axes), are core_flags.py's CoreFlags; Config is those fields with
the behaviour: validate() checks every field's bounds and choices from that metadata, then
the rules that tie fields together (config_checks.py). The CLI builds its flags from the
fields (`--name=value`), so `fedjax_drift.run(Config(...))` does exactly what the CLI does.

A plugin's own flags (registry.flag, docs/new_method.md) are fields too: config_class() is
Config, or once plugins declared flags, a dataclass subclass with their fields after these,
and `Config(...)` builds an instance of it, so replace(), asdict(), validate() and the tables
below (fields(), gridable_fields(), sweepable(), read when asked) see them. GRIDABLE (the
fields --grid may trace) and SCENARIO_AXES (those it grids as data, never traced) are the core
fields' only.
"""
import dataclasses
import itertools
import os
from typing import Optional

from fedjax_drift import config_checks, registry
from fedjax_drift.bounds import Bounds
from fedjax_drift.core_flags import CoreFlags, plugin_field
from fedjax_drift.errors import UserError


@dataclasses.dataclass
class Config(CoreFlags):
  """Every flag of a run, one field each, with its metadata (core_flags.py's `_f`).

  Fields marked gridable may hold tracers: inside a compiled round the Config is rebuilt with
  each gridded field a traced scalar, so code reading them must only do arithmetic with them.
  `Config(...)` first loads the plugins its `plugin` value names, and is an instance of
  config_class(): this class, or a subclass holding the plugins' flags too.
  """

  def __new__(cls, *args, **kwargs):
    del args
    if cls is Config:
      registry.load_plugins(kwargs.get('plugin', ''))
      cls = config_class()
    return object.__new__(cls)

  def __post_init__(self):
    if self.local_steps == 0 and self.local_epochs == 0:  # neither given: one epoch
      self.local_epochs = 1

  def validate(self):
    """Raises UserError naming the first bad flag; returns self.

    First every field's own rule (its metadata's bounds and choices, in field order), then the
    rules that tie several fields together, step by step (config_checks.py)."""
    config_checks.validate(self)
    return self

  @property
  def has_validation(self) -> bool:
    """Whether runs score a validation split: one carved by --val_fraction, or the dataset's
    own (--val_source=dataset)."""
    return bool(self.val_fraction) or self.val_source == 'dataset'

  def resolved_select_on(self) -> str:
    """'validation' or 'test': what --select_on=auto stands for."""
    if self.select_on != 'auto':
      return self.select_on
    return 'validation' if self.has_validation else 'test'

  def run_dir(self, timestamp: str) -> str:
    if self.out:
      return self.out
    return os.path.join('runs', f'{self.algo}-{self.dataset.replace(":", "_").replace("/", "_")}'
                        f'-{self.partition.split(":")[0]}-s{self.seed}-{timestamp}')


# The command line's own flags, besides Config's fields.
registry.reserve({f.name for f in dataclasses.fields(Config)} | {'list', 'config', 'help'})
_CLASSES = {(): Config}  # the plugin flags' names -> the Config class holding them


def _rebuild(values):
  """A Config from its field values (how a plugin-extended Config is pickled)."""
  return Config(**values)


def config_class():
  """The Config class of the flags declared so far: Config itself, or, once plugins declared
  flags of their own (registry.flag), a subclass with those fields after Config's; made once
  per set of plugin flags."""
  declared = registry.flags()
  key = tuple(declared)
  if key not in _CLASSES:
    _CLASSES[key] = dataclasses.make_dataclass(
        'Config', [plugin_field(f) for f in declared.values()], bases=(Config,),
        namespace={'__module__': __name__, '__reduce__': lambda self: (_rebuild, (
            {f.name: getattr(self, f.name) for f in dataclasses.fields(self)},))})
  return _CLASSES[key]


def fields():
  """The Config fields of every flag, the plugins' last, in their (--help and config.json)
  order."""
  return dataclasses.fields(config_class())


def field_names() -> frozenset:
  """The names of fields()."""
  return frozenset(f.name for f in fields())


def defaults() -> dict:
  """{name: value} of a Config built from no flags (its defaults, __post_init__ applied), the
  plugins' flags included."""
  return dataclasses.asdict(Config())


def from_dict(values: dict, base: Optional[Config] = None) -> Config:
  """A Config from {name: value} (the plugins its `plugin` value names loaded first); unknown
  names are an error naming the flag."""
  registry.load_plugins(values.get('plugin', ''))
  known = field_names()
  unknown = sorted(set(values) - known)
  if unknown:
    raise UserError(f'unknown flag --{unknown[0]}')
  if base is None:  # fields not in `values` keep their defaults, resolved together
    return Config(**values)
  return dataclasses.replace(base, **values)


def metadata(name: str):
  """Field `name`'s metadata (read-only): help, choices, group, bounds (a Bounds or None),
  gridable, and const for a flag that may be given bare. KeyError for an unknown name."""
  return config_class().__dataclass_fields__[name].metadata


def bounds_of(name: str) -> Optional[Bounds]:
  """The Bounds that validate() holds field `name` to, or None where it has none."""
  return metadata(name)['bounds']


def gridable_fields() -> tuple:
  """The names of the fields marked gridable=True, in Config's field order."""
  return tuple(f.name for f in fields() if f.metadata.get('gridable'))


# Flags --grid may sweep: float hyperparameters that only enter arithmetic, so a value can be
# a traced scalar and one compiled program serves every grid point (the module docstring says
# what that asks of the code reading them). Everything else (model, algorithm, shapes, step
# counts, variants, buffer sizes, integer and string flags) steers compilation and stays one
# value per sweep. Marked by gridable=True on the field; see study.py.
GRIDABLE = tuple(f.name for f in dataclasses.fields(Config) if f.metadata.get('gridable'))
# Scenario axes: values that shape only a run's host-built data (its partition) or its step
# counts, never an array's shape. study.py builds each run's data with its own value, as it
# does each seed's, and hands per-run step counts to the round as int32 data on the run axis.
SCENARIO_AXES = tuple(f.name for f in dataclasses.fields(Config)
                      if f.metadata.get('scenario_axis'))
SWEEPABLE = GRIDABLE + SCENARIO_AXES


def sweepable() -> tuple:
  """The fields --grid may sweep, as SWEEPABLE, with the plugins' gridable flags."""
  return gridable_fields() + tuple(f.name for f in fields() if f.metadata.get('scenario_axis'))


def _grid_value(name, text):
  """One --grid value of field `name`, typed as the field is (an int field takes integers)."""
  value = float(text)
  if config_class().__dataclass_fields__[name].type not in (int, 'int'):
    return value
  if not value.is_integer():
    raise UserError(f'--grid: values of {name} must be integers, got {text.strip()!r}')
  return int(value)


def _refusal(name):
  """The one-line refusal of --grid axis `name` (a flag, or not one)."""
  if name not in field_names():
    return f'--grid: {name!r} cannot be swept; use one of {", ".join(sweepable())}'
  return (f'--grid: {name!r} cannot be swept: --{name} sets the compiled program\'s shapes or '
          f'structure (give one value per command); sweepable: {", ".join(sweepable())}')


def parse_grid(text):
  """'lr:0.01,0.05;beta:0.8,0.9' -> {'lr': [0.01, 0.05], 'beta': [0.8, 0.9]} (an int
  field's values as ints)."""
  grid = {}
  for item in [t for t in (text or '').split(';') if t.strip()]:
    name, _, values = item.partition(':')
    name = name.strip()
    if name not in sweepable():
      raise UserError(_refusal(name))
    if name in grid:
      raise UserError(f'--grid: {name} appears twice')
    try:
      grid[name] = [_grid_value(name, v) for v in values.split(',') if v.strip()]
    except UserError:
      raise
    except ValueError:
      raise UserError(f'--grid: values of {name} must be numbers, got {values!r}') from None
    if not grid[name]:
      raise UserError(f'--grid: {name} has no values')
  return grid


def grid_points(grid):
  """The cartesian product of a parsed grid as a list of {name: value} ({} without a grid)."""
  names = list(grid)
  return [dict(zip(names, values)) for values in itertools.product(*grid.values())] or [{}]

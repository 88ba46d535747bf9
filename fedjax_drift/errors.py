"""The one exception type for mistakes a user can fix (bad flags, bad files).

The CLI prints its message as one line and exits with code 2; the library raises it so that
`fedjax_drift.run(config)` callers get the same message. `read_json_input` reads a JSON file
a flag names with that one message for every way it can be bad.
"""
import json
import os


class UserError(ValueError):
  """A bad flag, file or combination, with a message that names it."""


class DivergenceError(UserError):
  """Training produced a non-finite model or update; the message names the round."""


class MemoryBudgetError(UserError):
  """A run's data and state, or XLA's estimate for its program, exceed the memory budget
  (--memory_budget_gb, or what the device may use): fewer runs at once may fit."""


def first_line(e):
  """The first line of an exception's message (its type's name when it has none), for the
  one-line errors that name a file."""
  text = str(e).strip().splitlines()
  return text[0] if text else type(e).__name__


def did_you_mean(value, options):
  """' (did you mean X?)' for the closest of `options` to `value`, or '' if none is close."""
  import difflib  # pylint: disable=g-import-not-at-top
  close = difflib.get_close_matches(str(value), [str(o) for o in options], n=1, cutoff=0.6)
  return f' (did you mean {close[0]}?)' if close else ''


def too_many_devices(requested, available, backend):
  """The UserError for --devices above what jax sees; on CPU it says how to get more."""
  message = f'--devices={requested} but jax sees {available} {backend} device(s)'
  if backend == 'cpu':
    message += (f'; on CPU, set XLA_FLAGS=--xla_force_host_platform_device_count={requested} '
                'before starting Python')
  return UserError(message)


def read_json_input(path, flag, expected=''):
  """The JSON value in the file `path` that `flag` names (e.g. '--cohorts=file:PATH').

  A missing file, one that cannot be read, invalid JSON or JSON nested too deeply for the
  parser is one UserError starting with the flag (and the path, when the flag does not hold
  it); `expected` (e.g. 'a JSON list of index lists') is added to the nesting error, whose
  cause a reader would not guess. What the value must hold is the caller's to check.
  """
  where = flag if str(path) in flag else f'{flag}: {path}'
  if not os.path.isfile(path):
    raise UserError(f'{where}: file does not exist')
  try:
    with open(path, encoding='utf-8') as f:
      return json.load(f)
  except OSError as e:
    raise UserError(f'{where}: cannot read it ({e.strerror or e})') from None
  except ValueError as e:  # json.JSONDecodeError, and bytes that are not UTF-8
    raise UserError(f'{where}: not valid JSON ({e})') from None
  except RecursionError:  # lists nested thousands deep
    raise UserError(f'{where}: nested too deeply'
                    + (f'; expected {expected}' if expected else '')) from None

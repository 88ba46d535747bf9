"""The one exception type for mistakes a user can fix (bad flags, bad files).

The CLI prints its message as one line and exits with code 2; the library raises it so that
`fedjax_drift.run(config)` callers get the same message.
"""


class UserError(ValueError):
  """A bad flag, file or combination, with a message that names it."""


class DivergenceError(UserError):
  """Training produced a non-finite model or update; the message names the round."""

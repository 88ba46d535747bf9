"""Bounds: the values a numeric Config field accepts, and the words its error says.

A field declares them in its metadata (core_flags._f(..., bounds=...)); Config.validate() checks
every field against its own, so the rule and its message are written once, beside the flag.
The named kinds below are the rules most fields share; a field whose words differ derives its
own with .but(hint=..., wording=..., allow=...).
"""
import dataclasses
import math
from typing import Optional


@dataclasses.dataclass(frozen=True)
class Bounds:
  """The values a numeric field accepts, and the words its error says.

  low, high: the interval's ends, open where low_open / high_open; finite: NaN and +-inf are
  refused too (a two-sided interval refuses them anyway; NaN fails every comparison). allow:
  one value accepted outside the interval, a sentinel such as -1 = 'the default'. hint: said in
  parentheses after the rule ('or -1 for --beta', '0 = off'). wording: the rule's words where
  they are not the interval's own. message: a whole message, formatted with the fields' values
  by name ('{image_size}'), for a rule stated together with another field's.
  """
  low: float = -math.inf
  high: float = math.inf
  low_open: bool = False
  high_open: bool = False
  finite: bool = False
  allow: Optional[float] = None
  hint: str = ''
  wording: str = ''
  message: str = ''

  def but(self, **changes) -> 'Bounds':
    """These bounds with `changes` (the dataclass's fields), e.g. UNIT.but(hint='...')."""
    return dataclasses.replace(self, **changes)

  def accepts(self, value) -> bool:
    """Whether a field with these bounds may hold `value` (a number)."""
    if self.allow is not None and value == self.allow:
      return True
    if self.finite and not math.isfinite(value):
      return False
    above = self.low < value if self.low_open else self.low <= value
    below = value < self.high if self.high_open else value <= self.high
    return above and below

  def rule(self) -> str:
    """The words after 'must be': '>= 1', 'a finite number > 0', 'in [0, 1] (or -1 for --beta)'."""
    if self.wording:
      words = self.wording
    elif math.isinf(self.high):
      words = f'{">" if self.low_open else ">="} {self.low:g}'
      words = f'a finite number {words}' if self.finite else words
    else:
      words = (f'in {"(" if self.low_open else "["}{self.low:g}, {self.high:g}'
               f'{")" if self.high_open else "]"}')
    return f'{words} ({self.hint})' if self.hint else words

  def error(self, name: str, value, values) -> str:
    """The UserError text for field `name` holding `value` (outside these bounds); values:
    {field: value} of every field, for a `message` that names others."""
    if self.message:
      return self.message.format(**values)
    return f'--{name}={value} must be {self.rule()}'


# The bound kinds most fields share.
AT_LEAST_0 = Bounds(0)                                    # >= 0
AT_LEAST_1 = Bounds(1)                                    # >= 1
ABOVE_0 = Bounds(0, low_open=True)                        # > 0 (inf passes)
POSITIVE = Bounds(0, low_open=True, finite=True)          # a finite number > 0
NONNEG = Bounds(0, finite=True)                           # a finite number >= 0
UNIT = Bounds(0, 1)                                       # in [0, 1]
UNIT_EXCL_0 = Bounds(0, 1, low_open=True)                 # in (0, 1]
UNIT_EXCL_1 = Bounds(0, 1, high_open=True)                # in [0, 1)

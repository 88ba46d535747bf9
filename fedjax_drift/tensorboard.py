"""Metrics as TensorBoard scalars, written by tensorboardX (the optional extra `tensorboard`).

    writer = tensorboard.ScalarWriter(os.path.join(run_dir, 'tensorboard'))  # once per run
    writer.write({'round': 5, 'test_accuracy': 0.61, ...}, tag_prefix='eval/')
    writer.close()

`write_scalars(log_dir, rows)` does the same for a list of rows at once. Each numeric,
finite column except the step column becomes the tag `tag_prefix + column` at that step.
"""
import math
import numbers

from fedjax_drift.errors import UserError


def _summary_writer(log_dir):
  try:
    from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise UserError('--tensorboard needs tensorboardX: '
                    'pip install tensorboardX (or ".[tensorboard]" in the clone)') from None
  return SummaryWriter(log_dir=log_dir)


def _scalar(value):
  """value as a float if it is a finite real number (numpy scalars too), else None."""
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    try:
      value = float(value) if getattr(value, 'shape', None) == () else None
    except (TypeError, ValueError):
      return None
  if value is None or not math.isfinite(float(value)):
    return None
  return float(value)


class ScalarWriter:
  """One event file per run under `log_dir`; write rows as they come, then close."""

  def __init__(self, log_dir):
    self.log_dir = log_dir
    self._writer = _summary_writer(log_dir)

  def write(self, row, step_key='round', tag_prefix=''):
    """Adds every numeric column of `row` (a dict) at step row[step_key]."""
    step = int(row[step_key])
    for key, value in row.items():
      scalar = _scalar(value)
      if key != step_key and scalar is not None:
        self._writer.add_scalar(f'{tag_prefix}{key}', scalar, step)

  def flush(self):
    self._writer.flush()

  def close(self):
    self._writer.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


def write_scalars(log_dir, rows, step_key='round', tag_prefix=''):
  """Writes `rows` (dicts with a `step_key` column) to an event file in `log_dir`."""
  with ScalarWriter(log_dir) as writer:
    for row in rows:
      writer.write(row, step_key, tag_prefix)

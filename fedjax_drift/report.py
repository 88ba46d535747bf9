"""The run directory: config.json, metrics.csv, rounds.csv, summary.json and plots.

Every file is written to a temporary name and renamed into place, so a reader (or a killed
run) never sees a half-written file.
"""
import csv
import functools
import io
import json
import os

import numpy as np

from fedjax_drift.errors import UserError


TEMP_PREFIX, TEMP_SUFFIX = '.fjd-', '.tmp'
TEMP_NAME_LEN = len(TEMP_PREFIX) + 8 + len(TEMP_SUFFIX)  # '.fjd-1a2b3c4d.tmp'


# realpath of a run directory -> its rundir.Record while a run writes there (see
# start_recording): files written there are entered in the record first, and temporaries
# carry its tag. The run's locks.Lock holder alone writes there, so one entry per directory.
_records = {}


def start_recording(directory, record):
  """From now on atomic_write into `directory` records each file's base name in `record`
  (record.add) before creating it, and names temporaries with record.temp_tag."""
  _records[os.path.realpath(directory)] = record


def stop_recording(directory):
  _records.pop(os.path.realpath(directory), None)


def will_create(path):
  """Records `path` (a file or directory about to be created) in the record of its
  directory, when a run is recording there (see `start_recording`)."""
  record = _records.get(os.path.realpath(os.path.dirname(os.path.abspath(path))))
  if record is not None:
    record.add(os.path.basename(os.path.abspath(path)))


def temp_name(directory, tag=None):
  """A fresh fixed-length temporary file name in `directory`; `tag` (4 hex digits) starts
  its random part, so a run's temporaries are recognisable by its record.

  Fixed length (not `name + '.tmpPID'`) so a legal final name never becomes too long.
  """
  tag = tag or os.urandom(2).hex()
  return os.path.join(directory, f'{TEMP_PREFIX}{tag}{os.urandom(2).hex()}{TEMP_SUFFIX}')


def atomic_write(path, data: bytes, tag=None, hint='', parents=False):
  """Writes the bytes `data` to `path` through a temporary beside it (atomic_write_with)."""
  atomic_write_with(path, lambda f: f.write(data), tag, hint, parents)


def atomic_write_with(path, write, tag=None, hint='', parents=False):
  """Calls write(f) on a new temporary file beside `path` (binary), fsyncs it, then renames
  it into place: the tool's one way to write a file, so a reader (or a killed process) sees
  the old file or the whole new one, never a part.

  On any failure or interrupt the temporary file is removed; an OSError (a full disk, no
  permission) becomes one UserError naming `path`, with `hint` (what to do) after it.
  parents: create the folder first. Inside a recording run directory, `path` is recorded
  first and the temporary carries the run's tag.
  """
  directory = os.path.dirname(os.path.abspath(path))
  record = _records.get(os.path.realpath(directory))
  if record is not None and tag is None:
    will_create(path)
    tag = record.temp_tag
  tmp = temp_name(directory, tag)
  try:
    if parents:
      os.makedirs(directory, exist_ok=True)
    with open(tmp, 'xb') as f:
      write(f)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException as e:
    if os.path.exists(tmp):
      os.remove(tmp)
    if isinstance(e, OSError):
      raise UserError(f'cannot write {path}: {e.strerror or e}'
                      + (f' ({hint})' if hint else '')) from None
    raise


def strict_json(obj):
  """(obj with NaN/inf floats replaced by None, {'a.b[2]': 'NaN', ...} naming each one)."""
  notes = {}

  def clean(value, where):
    if isinstance(value, dict):
      return {k: clean(v, f'{where}.{k}' if where else str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
      return [clean(v, f'{where}[{i}]') for i, v in enumerate(value)]
    if isinstance(value, (float, np.floating)) and not np.isfinite(value):
      notes[where] = repr(float(value)).replace('nan', 'NaN').replace('inf', 'Infinity')
      return None
    if isinstance(value, np.generic):
      return value.item()
    return value
  return clean(obj, ''), notes


def write_json(path, obj):
  """Strict JSON: a NaN or inf value is written as null, and a top-level `non_finite` object
  maps each such value's path to what it was ('NaN', 'Infinity', '-Infinity')."""
  obj, notes = strict_json(obj)
  if notes and isinstance(obj, dict):
    obj = {**obj, 'non_finite': notes}
  text = json.dumps(obj, indent=2, sort_keys=False, allow_nan=False)
  atomic_write(path, (text + '\n').encode())


def write_csv(path, rows, columns=None):
  """rows: list of dicts with the same keys; floats written with repr (full precision).
  columns: the header to write (also when there are no rows); default: the first row's keys."""
  buf = io.StringIO()
  if rows or columns:
    writer = csv.DictWriter(buf, fieldnames=list(columns or rows[0]), lineterminator='\n')
    writer.writeheader()
    for row in rows:
      writer.writerow({k: repr(float(v)) if isinstance(v, (float, np.floating)) else v
                       for k, v in row.items()})
  atomic_write(path, buf.getvalue().encode())


def _figure(width, height, panels=1, right=0.2):
  """A width x height inch figure with `panels` axes side by side, and those axes, with its
  margins fixed in inches (right: room for a legend outside the axes). One draw saves it: the
  bbox_inches='tight' and tight_layout these figures had drew each two or three times, about
  half of a run's plotting time (benchmarks/results/plots-*.json). matplotlib's Figure without
  pyplot: no global figure registry to close."""
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  fig = Figure(figsize=(width, height))
  panel = (width - 0.85 - right) / panels  # each axes' width and the room for its y labels
  fig.subplots_adjust(left=0.85 / width, right=1 - right / width, bottom=0.55 / height,
                      top=1 - 0.35 / height, wspace=0.95 / max(panel - 0.95, 0.1))
  return fig, fig.subplots(1, panels, squeeze=False)[0]


@functools.lru_cache(maxsize=None)
def _plotting() -> bool:
  """Whether matplotlib imports. Without it (a bare accelerator image: it is a dependency,
  yet may be absent where the package runs from a checkout) every plot is skipped with one
  warning line per process, and the run's other files are written as usual."""
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    import sys  # pylint: disable=g-import-not-at-top
    print('warning: matplotlib is not installed: no plots (*.png) are written', file=sys.stderr)
    return False
  return True


def _if_plotting(plot):
  """`plot` that does nothing where matplotlib is absent (_plotting)."""
  @functools.wraps(plot)
  def wrapper(*args, **kwargs):
    return plot(*args, **kwargs) if _plotting() else None
  return wrapper


def _png(fig) -> bytes:
  buf = io.BytesIO()
  fig.savefig(buf, format='png', dpi=110)
  return buf.getvalue()


def _save(fig, path):
  atomic_write(path, _png(fig))


def _round_axis(ax):
  """x labelled 'round' with integer ticks only (a few rounds drew 0.5, 1.5, ...)."""
  from matplotlib.ticker import MaxNLocator  # pylint: disable=g-import-not-at-top
  ax.xaxis.set_major_locator(MaxNLocator(integer=True))
  ax.set_xlabel('round')


@_if_plotting
def plot_accuracy(path, rounds, accuracies, best, title, marks=(), diverged_at=None):
  """Accuracy and best-so-far curves, each evaluation a marker (a run stopped after one
  evaluation is then one visible point); `marks`: rounds to draw as vertical lines (the
  rounds at whose start a concept shift happened); diverged_at: the round the run diverged
  in, drawn as a line with 'diverged at round N' (None: it did not)."""
  fig, (ax,) = _figure(6, 4)
  ax.plot(rounds, accuracies, marker='o', ms=3, label='test accuracy')
  ax.plot(rounds, best, '--', marker='.', ms=3, label='best so far')
  for i, r in enumerate(marks):
    ax.axvline(r, color='tab:red', alpha=0.4, lw=0.8, label='concept shift' if i == 0 else None)
  if diverged_at is not None:
    ax.axvline(diverged_at, color='black', ls=':', lw=1,
               label=f'diverged at round {diverged_at}')
  _round_axis(ax)
  ax.set_ylabel('global-model test accuracy')
  ax.set_title(title)
  ax.grid(alpha=0.3)
  ax.legend()
  _save(fig, path)


@_if_plotting
def plot_partition(path, label_hist, title, max_clients=100):
  """Stacked bars: each client's label counts (the first max_clients clients)."""
  hist = np.ascontiguousarray(np.asarray(label_hist)[:max_clients])
  atomic_write(path, _partition_png(hist.tobytes(), hist.shape, hist.dtype.str, title,
                                    len(label_hist) > max_clients, max_clients))


# Every method of a scenario draws the same partition figure (a preset's worker runs many):
# each (histogram, title) is rendered once per process, ~0.13 s a figure. Same bytes.
@functools.lru_cache(maxsize=8)
def _partition_png(data, shape, dtype, title, cut, max_clients):
  import matplotlib  # pylint: disable=g-import-not-at-top
  hist = np.frombuffer(data, dtype).reshape(shape)
  legend = hist.shape[1] <= 20  # beside the axes, in the figure's right margin
  fig, (ax,) = _figure(max(6, 0.12 * len(hist)) + (1.0 if legend else 0), 4,
                       right=1.25 if legend else 0.2)
  bottom = np.zeros(len(hist))
  edges = np.arange(len(hist) + 1) - 0.5
  cmap = matplotlib.colormaps['tab10' if hist.shape[1] <= 10 else 'tab20']
  for c in range(hist.shape[1]):  # one filled step patch per label, not one bar per client:
    top = bottom + hist[:, c]     # 100 clients x 10 labels were 1,000 artists and seconds
    ax.stairs(top, edges, baseline=bottom, fill=True, color=cmap(c % cmap.N), label=str(c),
              lw=0)
    bottom = top
  ax.set_xlim(edges[0], edges[-1])
  ax.set_ylim(0, max(float(bottom.max()), 1.0) * 1.02)
  ax.set_xlabel('client' + (f' (first {max_clients})' if cut else ''))
  ax.set_ylabel('examples')
  ax.set_title(title)
  if legend:
    ax.legend(title='label', fontsize=7, ncol=2, bbox_to_anchor=(1.01, 1), loc='upper left')
  return _png(fig)


# rounds.csv's drift columns: (title of their panel in drift.png, its y-axis label).
DRIFT_COLUMNS = {
    'train_loss': ('mean client training loss', 'cross-entropy'),
    'client_update_norm_mean': ('mean of client update norms', 'L2 norm'),
    'mean_update_norm': ('norm of the mean update', 'L2 norm'),
    'update_cosine': ('mean cosine of client updates to their mean', 'cosine'),
    'client_loss_std': ('std of client training losses', 'std of cross-entropy'),
}


@_if_plotting
def plot_drift(path, rows):
  """The per-round training loss and drift diagnostics from rounds.csv, one panel each."""
  keys = [k for k in DRIFT_COLUMNS if rows and k in rows[0]]
  fig, axes = _figure(4 * max(len(keys), 1), 3.2, panels=max(len(keys), 1))
  r = [row['round'] for row in rows]
  for ax, k in zip(axes, keys):
    title, ylabel = DRIFT_COLUMNS[k]
    ax.plot(r, [row[k] for row in rows])
    ax.set_title(title, fontsize=9)
    _round_axis(ax)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
  _save(fig, path)


@_if_plotting
def plot_mean_curves(path, curves, title, ylabel='test accuracy (mean ± std over seeds)',
                     xlabel=None):
  """curves: {label: (rounds, mean, std)}; one line with a ±std band each. xlabel: the x
  values' name when they are not rounds (e.g. megabytes sent)."""
  fig, (ax,) = _figure(6, 4)
  for label, (rounds, mean, std) in curves.items():
    mean, std = np.asarray(mean), np.asarray(std)
    ax.plot(rounds, mean, label=label, marker='o' if len(rounds) == 1 else None)  # a lone point
    ax.fill_between(rounds, mean - std, mean + std, alpha=0.15)
  ax.set_title(title, fontsize=9)
  if xlabel:
    ax.set_xlabel(xlabel)
  else:
    _round_axis(ax)
  ax.set_ylabel(ylabel)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7)
  _save(fig, path)

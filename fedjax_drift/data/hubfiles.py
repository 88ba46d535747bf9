"""Hugging Face dataset folders read as tables, without the `datasets` library: the files of a
hub repository as `huggingface-cli download` (or a git clone) leaves them, or a folder written
by `save_to_disk`.

Layouts:
  hub repository   data files anywhere below the folder: *.parquet (flwrlabs/femnist's
                   data/train-00000-of-0000N.parquet), *.csv (flwrlabs/shakespeare's one
                   shakespeare.csv) or *.arrow; a file's split is the word train, test or
                   validation (valid, val, dev) in its path below the folder, as the hub's
                   default data-file patterns name them, and `train` when none (a lone
                   shakespeare.csv is the training split).
  save_to_disk     dataset_dict.json with train/ and test/ folders of data-*.arrow (Arrow IPC
                   streams): the same rule finds the splits by their folder names.
Hidden folders (.git, .cache) are skipped. Image columns are the hub's struct {bytes, path};
`image_bytes` returns the encoded bytes of each row.
"""
import csv
import os
import re

from fedjax_drift.errors import UserError

try:  # pyarrow comes with the `datasets` extra (the hf extra)
  import pyarrow as pa
  import pyarrow.csv as pa_csv
  import pyarrow.parquet as pa_parquet
except ImportError:  # pragma: no cover - the `hf` extra installs it
  pa = None

EXTENSIONS = ('.parquet', '.csv', '.arrow')
_SPLIT_WORDS = {'train': 'train', 'training': 'train', 'test': 'test', 'testing': 'test',
                'validation': 'validation', 'valid': 'validation', 'val': 'validation',
                'dev': 'validation'}


def data_files(folder) -> list:
  """The data files below `folder` (hidden folders skipped), sorted."""
  found = []
  for d, subdirs, files in os.walk(folder):
    subdirs[:] = sorted(s for s in subdirs if not s.startswith('.'))
    found += [os.path.join(d, f) for f in files if f.endswith(EXTENSIONS)]
  return sorted(found)


def split_of(relpath) -> str:
  """A data file's split from the words of its path below the folder (module docstring)."""
  words = re.split(r'[^a-z]+', os.path.splitext(relpath)[0].lower())
  named = [_SPLIT_WORDS[w] for w in words if w in _SPLIT_WORDS]
  return named[0] if named else 'train'


def _csv_table(path):
  """A CSV with a header row, every column read as strings (a column of single characters
  such as Shakespeare's y must not become numbers)."""
  with open(path, newline='', encoding='utf-8') as f:
    header = next(csv.reader(f), None)
  if not header:
    raise UserError(f'{path} is empty (expected a CSV with a header row)')
  types = {name: pa.string() for name in header}
  return pa_csv.read_csv(path, convert_options=pa_csv.ConvertOptions(
      column_types=types, strings_can_be_null=False, quoted_strings_can_be_null=False))


def _arrow_table(path):
  """An .arrow file: an IPC stream (what save_to_disk writes), else the IPC file format."""
  try:
    with pa.ipc.open_stream(path) as reader:
      return reader.read_all()
  except pa.ArrowInvalid:
    with pa.ipc.open_file(path) as reader:
      return reader.read_all()


def read_table(path):
  """One data file -> a pyarrow Table; a file it cannot parse is a one-line UserError."""
  try:
    if path.endswith('.parquet'):
      return pa_parquet.read_table(path)
    if path.endswith('.csv'):
      return _csv_table(path)
    return _arrow_table(path)
  except (OSError, ValueError, UnicodeDecodeError) as e:  # ArrowInvalid is a ValueError
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    raise UserError(f'cannot read {path}: {text}') from None


def read_splits(folder) -> dict:
  """A Hugging Face dataset folder -> {split: pyarrow Table}, each split's files concatenated
  in sorted order (module docstring for the layouts)."""
  if pa is None:
    raise UserError(f'reading the Hugging Face folder {folder} needs pyarrow: pip install '
                    'pyarrow (or ".[hf]" in the clone)')
  files = data_files(folder)
  if not files:
    raise UserError(f'{folder} holds no .parquet, .csv or .arrow files')
  by_split = {}
  for path in files:
    by_split.setdefault(split_of(os.path.relpath(path, folder)), []).append(read_table(path))
  out = {}
  for split, tables in by_split.items():
    try:
      out[split] = pa.concat_tables(tables)
    except pa.ArrowInvalid as e:
      raise UserError(f'{folder}: the {split} files have different columns ({e})') from None
  return out


def column_names(path) -> list:
  """The column names of one data file, from its schema or header alone."""
  if path.endswith('.parquet'):
    return list(pa_parquet.read_schema(path).names)
  if path.endswith('.csv'):
    with open(path, newline='', encoding='utf-8') as f:
      return next(csv.reader(f), [])
  with pa.ipc.open_stream(path) as reader:
    return list(reader.schema.names)


def columns(table, names, where):
  """{name: the column as a Python list} of `names`; a missing one is a UserError naming
  the columns the table has."""
  missing = [n for n in names if n not in table.column_names]
  if missing:
    raise UserError(f'{where} lacks column {", ".join(missing)} (it has '
                    f'{", ".join(table.column_names)})')
  return {n: table.column(n).to_pylist() for n in names}


def image_bytes(values, where) -> list:
  """The hub's image cells ({'bytes': b'...', 'path': ...} or raw bytes) -> encoded bytes."""
  out = []
  for v in values:
    data = v.get('bytes') if isinstance(v, dict) else v
    if not isinstance(data, (bytes, bytearray)):
      raise UserError(f'{where}: an image cell holds no encoded bytes ({type(v).__name__})')
    out.append(bytes(data))
  return out

"""Datasets from the hubs: TensorFlow Datasets (`tfds:NAME`) and Hugging Face `datasets`
(`hf:NAME[:CONFIG]` or `hf:DIR`), read into a validated Dataset of uint8 NHWC images.

Images of different sizes are resized to --image_size x --image_size (PIL bilinear); a
dataset mixing grey and colour images becomes RGB (grey planes repeated). Images stream one
at a time into a preallocated array (data.images.ImageStack).

TFDS reads through `tfds.data_source` (random access, ArrayRecord files, no TensorFlow needed
to read); preparing a dataset the first time downloads it, and most builders need TensorFlow
for that (docs/data.md, "Getting real data"). `tfds:domainnet` joins TFDS's six DomainNet configs
(domainnet/clipart ... domainnet/sketch, 345 classes) with one domain id per config.

Hugging Face datasets are read offline only: from a folder written by `save_to_disk`, or from
the local `datasets` cache; nothing is downloaded (HF_DATASETS_OFFLINE / HF_HUB_OFFLINE).
Integer and string columns other than the image and label become Dataset.groups (dense ids
0..k-1 in sorted order of the values), e.g. a writer id for --partition=natural:writer_id.
"""
import contextlib
import logging
import os
import socket
import threading

import numpy as np

from fedjax_drift.data import common, images, multidomain, text
from fedjax_drift.errors import UserError

# Offline, TFDS retries its downloads for minutes before it fails: an unprepared dataset
# first checks that the internet answers, within ONLINE_PROBE_S.
ONLINE_PROBE_S = 5
ONLINE_PROBE_HOST = ('storage.googleapis.com', 443)  # where TFDS's own downloads come from
TFDS_DOMAINNET = tuple(f'domainnet/{site}' for site in multidomain.DOMAINNET_SITES)


def load(dataset, data_dir=None, image_size=0, hf_image_column='', hf_label_column='',
         hf_train_split='train', hf_test_split='test', **options):
  """`tfds:NAME` or `hf:...` (the --dataset value) -> a validated Dataset. options: the
  tokenizer flags (data/text.to_dataset) for TFDS text datasets."""
  if dataset.startswith('tfds:'):
    return load_tfds(dataset[len('tfds:'):], data_dir, image_size, **options)
  return load_hf(dataset[len('hf:'):], data_dir, image_size, hf_image_column, hf_label_column,
                 (hf_train_split, hf_test_split))


def _first_line(e):
  return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def _stream(n, image_at, size, where):
  """x [n, ...] from image_at(i), through an ImageStack; features that are not uint8 images
  (float vectors, for example) are stacked as they are."""
  from tqdm import tqdm  # pylint: disable=g-import-not-at-top
  stack, plain = images.ImageStack(n, size, where), []
  for i in tqdm(range(n), desc=where, unit='example', disable=None):
    x = image_at(i)
    if isinstance(x, list):
      x = np.asarray(x)
    if plain or (i == 0 and not _is_image(x)):
      plain.append(np.asarray(x))
    else:
      stack.put(i, x)
  if plain:
    try:
      return np.stack(plain)
    except ValueError:
      raise UserError(f'{where}: its examples have different shapes and are not uint8 '
                      'images') from None
  return stack.result()


def _is_image(x):
  if not isinstance(x, np.ndarray):
    return True  # a PIL image
  return x.dtype == np.uint8 and (x.ndim == 2 or (x.ndim == 3 and x.shape[-1] in (1, 3, 4)))


# --- TFDS ---------------------------------------------------------------------------------


def _tfds_keys(name, features, example):
  """(image key, label key) of a TFDS example: 'image' / 'label' when present, else the first
  Image / ClassLabel feature of the builder's FeaturesDict."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  spec = dict(features.items()) if features is not None else {}
  def pick(preferred, kind):
    if preferred in example:
      return preferred
    typed = [k for k, f in spec.items() if isinstance(f, kind) and k in example]
    return typed[0] if typed else None
  image, label = pick('image', tfds.features.Image), pick('label', tfds.features.ClassLabel)
  image = image or ('features' if 'features' in example else None)
  if image is None or label is None:
    raise UserError(f'--dataset=tfds:{name}: found no {"image" if image is None else "label"} '
                    f'feature among {", ".join(sorted(example))}')
  return image, label


def _tfds_text_keys(features):
  """The Text features whose strings make an example's text, in order: 'text' alone, else
  'title' then 'description' (ag_news_subset: title + " " + description, as the CSV
  reader), else every Text feature in name order; () when the dataset has none."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  spec = dict(features.items()) if features is not None else {}
  keys = sorted(k for k, f in spec.items() if isinstance(f, tfds.features.Text))
  if 'text' in keys:
    return ('text',)
  if {'title', 'description'} <= set(keys):
    return ('title', 'description')
  return tuple(keys)


def _tfds_label_key(name, features, example):
  """'label' when present, else the first ClassLabel feature of a text dataset."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  if 'label' in example:
    return 'label'
  spec = dict(features.items()) if features is not None else {}
  typed = [k for k, f in spec.items() if isinstance(f, tfds.features.ClassLabel)]
  if not typed:
    raise UserError(f'--dataset=tfds:{name}: found no label feature among '
                    f'{", ".join(sorted(example))}')
  return typed[0]


def _tfds_texts(source, keys, label_key, where):
  """A TFDS text split -> ([str], int64 labels)."""
  from tqdm import tqdm  # pylint: disable=g-import-not-at-top
  texts, y = [], np.zeros(len(source), np.int64)
  as_str = lambda v: v.decode('utf-8') if isinstance(v, bytes) else str(v)
  for i in tqdm(range(len(source)), desc=where, unit='example', disable=None):
    example = source[i]
    texts.append(' '.join(as_str(example[k]) for k in keys))
    y[i] = int(example[label_key])
  return texts, y


def online(host=ONLINE_PROBE_HOST, seconds=ONLINE_PROBE_S) -> bool:
  """Whether a TCP connection to `host` opens within `seconds` (name lookup included, which
  a socket timeout does not bound: it runs in a thread that is left behind if it hangs)."""
  done = []

  def connect():
    try:
      socket.create_connection(host, timeout=seconds).close()
      done.append(True)
    except OSError:
      pass

  probe = threading.Thread(target=connect, daemon=True)
  probe.start()
  probe.join(seconds)
  return bool(done)


def _check_prepared_or_online(tfds, name, data_dir):
  """Refuses at once a dataset of TFDS's catalogue that TFDS would have to download when the
  internet is unreachable (TFDS itself retries for minutes). A name TFDS does not know is left
  to data_source."""
  absl = logging.getLogger('absl')
  level = absl.level
  absl.setLevel(logging.ERROR)  # "Variant folder ... has no dataset_info.json": not prepared
  try:
    builder = tfds.builder(name, data_dir=data_dir)
    prepared, where = builder.is_prepared(), builder.data_dir
  except Exception:  # pylint: disable=broad-except
    return
  finally:
    absl.setLevel(level)
  # TFDS's own catalogue, prepared by TFDS's own download, needs the internet; a builder
  # defined elsewhere (a user's, a test's) or a replaced preparation (tfds.testing.mock_data)
  # may not.
  prepare = getattr(type(builder).download_and_prepare, '__module__', '') or ''
  catalogue = (type(builder).__module__.startswith('tensorflow_datasets.') and
               prepare.startswith('tensorflow_datasets.core'))
  if catalogue and not prepared and not online():
    raise UserError(f'--dataset=tfds:{name} is not prepared in {where} and the internet is '
                    f'unreachable ({ONLINE_PROBE_HOST[0]} did not answer within '
                    f'{ONLINE_PROBE_S}s); prepare it once where there is internet and pass that '
                    'tensorflow_datasets folder as --data_dir')


def _tfds_split(name, split, data_dir, size):
  """One TFDS split -> (x, y); x is a list of strings for a text dataset."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  _check_prepared_or_online(tfds, name, data_dir)
  try:
    # tfds.data_source picks ArrayRecord (the random-access format) only when no data_dir is
    # given; with one, TFDS would prepare TFRecord files that data_source cannot read.
    source = tfds.data_source(name, split=split, data_dir=data_dir,
                              builder_kwargs={'file_format': 'array_record'})
  except Exception as e:  # pylint: disable=broad-except
    text = _first_line(e)
    if 'tensorflow' in str(e) and 'No module named' in str(e):
      text = (f'preparing it needs TensorFlow ({text}); pip install tensorflow, or prepare it '
              'once elsewhere and pass the tensorflow_datasets folder as --data_dir')
    raise UserError(f'--dataset=tfds:{name}: TFDS could not load split {split!r}: {text}') \
        from None
  if len(source) == 0:
    raise UserError(f'--dataset=tfds:{name}: split {split!r} is empty')
  features = getattr(getattr(source, 'dataset_info', None), 'features', None)
  text_keys = _tfds_text_keys(features)
  if text_keys:
    label_key = _tfds_label_key(name, features, source[0])
    return _tfds_texts(source, text_keys, label_key, f'tfds:{name} {split}')
  image_key, label_key = _tfds_keys(name, features, source[0])
  y = np.zeros(len(source), np.int64)
  def image_at(i):  # one decode per example gives both its image and its label
    example = source[i]
    y[i] = int(example[label_key])
    return np.asarray(example[image_key])
  return _stream(len(source), image_at, size, f'tfds:{name} {split}'), y


def load_tfds(name, data_dir=None, image_size=0, **options):
  """A TFDS dataset's train and test splits; `domainnet` joins its six domain configs. A
  dataset of Text features (tfds:ag_news_subset) is tokenised (options: data/text.to_dataset's)."""
  if name in ('domainnet',) + TFDS_DOMAINNET:
    image_size = image_size or multidomain.DOMAINNET_SIZE  # DomainNet's sizes vary
  configs = TFDS_DOMAINNET if name == 'domainnet' else (name,)
  parts = [[_tfds_split(c, split, data_dir, image_size) for split in ('train', 'test')]
           for c in configs]
  if isinstance(parts[0][0][0], list):  # texts
    (train, y_train), (test, y_test) = parts[0]
    return text.to_dataset(f'tfds:{name}', text.Texts(train, y_train, test, y_test), **options)
  xs = images.same_channels(*[x for domain in parts for x, _ in domain])
  x_train, x_test = np.concatenate(xs[0::2]), np.concatenate(xs[1::2])
  y_train = np.concatenate([d[0][1] for d in parts])
  y_test = np.concatenate([d[1][1] for d in parts])
  if len(configs) == 1:
    return common.validate(f'tfds:{name}', x_train, y_train, x_test, y_test)
  ids = lambda k: np.concatenate([np.full(len(d[k][1]), i, np.int32) for i, d in enumerate(parts)])
  return common.validate(f'tfds:{name}', x_train, y_train, x_test, y_test,
                         domains_train=ids(0), domains_test=ids(1),
                         domain_names=tuple(c.split('/')[-1] for c in configs))


# --- Hugging Face datasets ---------------------------------------------------------------


@contextlib.contextmanager
def _offline():
  """Hugging Face `datasets` with the hub switched off, for this block only: the environment
  variables cover a first import, the module flags an earlier import."""
  os.environ['HF_DATASETS_OFFLINE'] = os.environ['HF_HUB_OFFLINE'] = '1'
  try:
    import datasets  # pylint: disable=g-import-not-at-top
    from huggingface_hub import constants  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise UserError('--dataset=hf:... needs the Hugging Face `datasets` library: '
                    'pip install datasets (or ".[hf]" in the clone)') from None
  saved = datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE
  datasets.config.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE = True
  try:
    yield datasets
  finally:
    datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE = saved


def _is_saved(path):
  return any(os.path.exists(os.path.join(path, f))
             for f in ('dataset_dict.json', 'state.json', 'dataset_info.json'))


def saved_folder(spec, data_dir=None):
  """The save_to_disk folder hf:SPEC names (SPEC, --data_dir or --data_dir/SPEC), or None."""
  folders = [spec] + ([data_dir, os.path.join(data_dir, spec)] if data_dir else [])
  return next((f for f in folders if os.path.isdir(f) and _is_saved(f)), None)


def _hf_open(datasets, spec, data_dir):
  """The DatasetDict named by hf:SPEC: a save_to_disk folder (saved_folder), else
  NAME[:CONFIG] from the local cache (--data_dir as cache_dir)."""
  saved = saved_folder(spec, data_dir)
  if saved:
    try:
      return datasets.load_from_disk(saved), saved
    except Exception as e:  # pylint: disable=broad-except  (truncated or foreign files)
      raise UserError(f'--dataset=hf:{spec}: cannot read {saved} as a save_to_disk folder: '
                      f'{_first_line(e)}') from None
  try:
    if spec.startswith(('/', '.', '~')) or os.path.isdir(spec):
      raise UserError(f'--dataset=hf:{spec}: {spec} is not a folder written by save_to_disk '
                      '(no dataset_dict.json)')
    name, _, config = spec.partition(':')
    return datasets.load_dataset(name, config or None, cache_dir=data_dir or None), name
  except UserError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    raise UserError(f'--dataset=hf:{spec}: not readable offline ({_first_line(e)}); save it '
                    'once where there is internet with datasets.load_dataset(...).save_to_disk'
                    '(DIR) and pass hf:DIR') from None


def _hf_column(split, given, kind, flag, where):
  """The column named by --flag, or the only/first column whose feature is `kind`."""
  if given:
    if given not in split.features:
      raise UserError(f'--{flag}={given}: {where} has columns {", ".join(split.column_names)}')
    return given
  typed = [k for k, f in split.features.items() if isinstance(f, kind)]
  if not typed:
    raise UserError(f'{where} has no {kind.__name__} column; name one with --{flag} '
                    f'(columns: {", ".join(split.column_names)})')
  return 'label' if 'label' in typed else typed[0]


def _dense_ids(values, where):
  """Values (ints or strings) -> int32 ids 0..k-1 in sorted order of the distinct values."""
  try:
    _, ids = np.unique(np.asarray(values), return_inverse=True)
  except TypeError:
    raise UserError(f'{where} mixes value types') from None
  return ids.reshape(-1).astype(np.int32)


def _hf_labels(split, column, where):
  values = np.asarray(split[column])
  if values.ndim != 1:
    raise UserError(f'{where}: label column {column!r} is not one value per example')
  if np.issubdtype(values.dtype, np.integer):
    return values.astype(np.int64)
  raise UserError(f'{where}: label column {column!r} holds {values.dtype}, not class ids '
                  '(use a ClassLabel or integer column)')


def _hf_groups(datasets, split, skip):
  """{column: ids} for the integer and string columns not in `skip`."""
  kinds = ('int8', 'int16', 'int32', 'int64', 'uint8', 'uint16', 'uint32', 'uint64', 'string',
           'large_string')
  return {k: _dense_ids(split[k], f'column {k!r}') for k, f in split.features.items()
          if k not in skip and isinstance(f, datasets.Value) and f.dtype in kinds}


def load_hf(spec, data_dir=None, image_size=0, image_column='', label_column='',
            splits=('train', 'test')):
  """hf:SPEC's two splits -> a validated Dataset; groups from its train split's id columns."""
  with _offline() as datasets:
    data, where = _hf_open(datasets, spec, data_dir)
    if not isinstance(data, datasets.DatasetDict):
      raise UserError(f'--dataset=hf:{spec}: {where} holds one split, not a DatasetDict with '
                      f'{splits[0]!r} and {splits[1]!r}')
    for flag, split in zip(('hf_train_split', 'hf_test_split'), splits):
      if split not in data:
        raise UserError(f'--{flag}={split}: hf:{spec} has splits {", ".join(data)}')
    train = data[splits[0]]
    image_col = _hf_column(train, image_column, datasets.Image, 'hf_image_column', f'hf:{spec}')
    label_col = _hf_column(train, label_column, datasets.ClassLabel, 'hf_label_column',
                           f'hf:{spec}')
    arrays = []
    try:
      for name in splits:
        split = data[name]
        y = _hf_labels(split, label_col, f'hf:{spec} {name}')
        pictures = split.select_columns([image_col])
        x = _stream(len(split), lambda i, p=pictures: p[i][image_col], image_size,
                    f'hf:{spec} {name}')
        arrays += [x, y]
      groups = _hf_groups(datasets, train, (image_col, label_col))
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
      if isinstance(e, UserError):
        raise
      raise UserError(f'--dataset=hf:{spec}: cannot read {where}: {_first_line(e)}') from None
  arrays[0], arrays[2] = images.same_channels(arrays[0], arrays[2])
  return common.validate(f'hf:{spec}', *arrays, groups=groups)


def _hf_files(dataset, data_dir):
  """A save_to_disk folder's files (a dataset from the local cache is known by name only)."""
  folder = saved_folder(dataset[len('hf:'):], data_dir)
  return common.files_under(folder) if folder else []


# A tfds: dataset may be text (tfds:ag_news_subset), so it counts as reading the tokenizer flags.
common.register_dataset(
    'tfds:', 'a TensorFlow Datasets dataset (downloaded once, needs internet); '
    'tfds:domainnet = its six domains with domain ids; text ones '
    '(tfds:ag_news_subset) are tokenised',
    load, reads=text.TOKENIZER_READS, shared=('image_size', 'pretrained'), prefix=True,
    shown='tfds:NAME')
common.register_dataset(
    'hf:', 'a Hugging Face `datasets` dataset, offline: hf:DIR (save_to_disk) '
    'or NAME from the local cache (pip install ".[hf]")',
    load, reads=('hf_image_column', 'hf_label_column', 'hf_train_split', 'hf_test_split'),
    shared=('image_size',), prefix=True, shown='hf:NAME[:CONFIG]', files=_hf_files)

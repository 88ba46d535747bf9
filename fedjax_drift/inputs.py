"""The files a run reads, made absolute and fingerprinted so `--resume` can refuse changes.

config.json stores path flags absolute (a relative path would resolve elsewhere from another
working directory) and, under `_resolved.inputs`, each input file's absolute path and sha256.
TFDS datasets are fingerprinted by name and version.
"""
import hashlib
import os
from typing import NamedTuple

from fedjax_drift.data import common, sources, tokenization
from fedjax_drift.errors import UserError
from fedjax_drift.models import text as text_models


def _absolute_flag(name, value):
  """A path flag's value with its path made absolute; other values unchanged."""
  if not isinstance(value, str) or not value:
    return value
  if name == 'dataset' and value.startswith(('npz:', 'text:')):
    prefix, _, path = value.partition(':')
    return f'{prefix}:{os.path.abspath(path)}'
  if name in ('tokenizer', 'pretrained') and value != 'auto':
    return os.path.abspath(value)
  if name == 'dataset' and value.startswith('hf:') and os.path.isdir(value[3:]):
    return 'hf:' + os.path.abspath(value[3:])  # a save_to_disk folder, not a hub name
  if name in ('partition', 'cohorts') and value.startswith('file:'):
    return 'file:' + os.path.abspath(value[5:])
  if name in ('data_dir', 'save_params', 'out', 'init_params'):
    return os.path.abspath(value)
  return value


def absolute_flags(values: dict) -> dict:
  """{flag: value} with the paths of --dataset=npz: and text:, --partition=file:,
  --cohorts=file:, --data_dir, --save_params, --init_params, --tokenizer, --pretrained and
  --out made absolute."""
  return {k: _absolute_flag(k, v) for k, v in values.items()}


# The flags whose values hold paths (absolute_flags makes them absolute).
PATH_FLAGS = ('dataset', 'partition', 'cohorts', 'data_dir', 'save_params', 'out',
              'init_params', 'tokenizer', 'pretrained')


class Flags(NamedTuple):
  """The values of the flags that name the files a run reads (their Config fields)."""
  dataset: str
  data_dir: str = ''
  partition: str = ''
  cohorts: str = ''
  init_params: str = ''
  tokenizer: str = 'auto'
  pretrained: str = ''


def input_files(flags: Flags) -> list:
  """[(flag, absolute path)] of every file the run with these flags reads: dataset files,
  partition file, cohorts file, --init_params, --tokenizer's and --pretrained's files."""
  flag = '--data_dir' if flags.data_dir and not flags.dataset.startswith('npz:') \
      else '--dataset'
  files = [(flag, p) for p in sources.dataset_files(flags.dataset, flags.data_dir)]
  if flags.partition.startswith('file:'):
    files.append(('--partition', flags.partition[5:]))
  if flags.cohorts.startswith('file:'):
    files.append(('--cohorts', flags.cohorts[5:]))
  if flags.init_params:
    files.append(('--init_params', flags.init_params))
  if flags.tokenizer not in ('', 'auto'):  # text: the tokenizer's files
    tok = flags.tokenizer
    files += [('--tokenizer', p) for p in (common.files_under(tok) if os.path.isdir(tok)
                                           else [tok])]
  if flags.pretrained:  # the checkpoint's config, weights and tokenizer
    tokenization.check_pretrained(flags.pretrained)  # before any work: a missing folder is named
    files += [('--pretrained', p) for p in text_models.checkpoint_files(flags.pretrained)]
  return [(flag, os.path.abspath(p)) for flag, p in files]


def sha256(path) -> str:
  digest = hashlib.sha256()
  with open(path, 'rb') as f:
    for chunk in iter(lambda: f.read(1 << 20), b''):
      digest.update(chunk)
  return digest.hexdigest()


def _tfds_version(name, data_dir):
  try:
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    return str(tfds.builder(name, data_dir=data_dir or None).version)
  except Exception:  # pylint: disable=broad-except
    return None  # unknown: the loader reports the real problem


def fingerprint(flags: Flags) -> dict:
  """{'files': [{'flag', 'path', 'sha256'}], 'tfds': {'name', 'version'} or None} of the
  inputs these flags name.

  Files that do not exist are left out: the loader names them with a better message.
  """
  files = [{'flag': flag, 'path': path, 'sha256': sha256(path)}
           for flag, path in input_files(flags) if os.path.isfile(path)]
  for entry in files:  # the packaged subset is known by name: the package may move
    if entry['path'] == os.path.abspath(sources.EMBEDDED_PATH):
      entry['path'] = 'embedded'
      entry['flag'] = '--dataset=embedded'

  tfds = None
  if flags.dataset.startswith('tfds:'):
    name = flags.dataset[5:]
    tfds = {'name': name, 'data_dir': flags.data_dir,
            'version': _tfds_version(name, flags.data_dir)}
  return {'files': files, 'tfds': tfds}


def check_unchanged(saved: dict, run_dir, while_reading=False):
  """UserError naming the first input that changed since the run in run_dir started.

  saved: the run's fingerprint (config.json `_resolved.inputs`); files are re-hashed now.
  while_reading: `saved` was taken just before this launch read the files (simulation.run
  fingerprints before loading and checks after, so the recorded hash is of the bytes read).
  """
  for entry in saved.get('files', []):
    path = sources.EMBEDDED_PATH if entry['path'] == 'embedded' else entry['path']
    if while_reading and (not os.path.isfile(path) or sha256(path) != entry['sha256']):
      raise UserError(f'input {path} ({entry["flag"]}) changed while it was being read; run '
                      'again once it stays unchanged')
    if not os.path.isfile(path):
      raise UserError(f'--resume: input {path} ({entry["flag"]}) of {run_dir} no longer exists')
    if sha256(path) != entry['sha256']:
      raise UserError(f'--resume: input {path} ({entry["flag"]}) changed since {run_dir} '
                      'started (sha256 differs); start a new run instead')
  tfds = saved.get('tfds')
  if tfds and tfds.get('version'):
    now = _tfds_version(tfds['name'], tfds.get('data_dir'))
    if now and now != tfds['version']:
      raise UserError(f'--resume: TFDS dataset {tfds["name"]} is version {now} now, '
                      f'{tfds["version"]} when the run started')

"""Stack Overflow by user: TensorFlow Federated's next-word prediction task, read from TFF's h5
files with h5py (the `federated` extra).

Layout (TFF's stackoverflow.tar.bz2 and stackoverflow.word_count.tar.bz2, unpacked into one
folder, the --data_dir):
  stackoverflow_train.h5, stackoverflow_test.h5   examples/<user id>/tokens: one byte string
      per sentence, its words separated by single spaces, beside title, tags, creation_date,
      score and type (not read). stackoverflow_held_out.h5 is not read.
  stackoverflow.word_count   one "word count" line per word, most frequent first.

Task, as TFF's word-prediction baselines build it (to_ids, get_special_tokens): the vocabulary
is the word-count file's first VOCAB_SIZE (10,000) words; ids are pad 0, the words 1..V, oov
V+1, bos V+2, eos V+3 (V + 4 classes). A sentence becomes [bos, ids of its first SEQ_LEN (20)
words, eos when it had fewer than 20], its inputs ids[:-1] and its targets ids[1:].

Windows: the engine takes one label per example (batch.y [B], a per-example mask), so each of
a sentence's T targets becomes one example: the prefix ids[:t] (t <= SEQ_LEN tokens, padded
on the right with id 0 and mask 0) labelled ids[t]. A causal model that reads its output at
the last real token (word_lstm reads position mask.sum - 1; that output has seen ids[:t] and
nothing after) gives each window exactly the prediction it gives position t - 1 of the whole
sentence, so the windows' summed loss is the per-token model's loss on the sentence. Known
limit: a window runs all SEQ_LEN positions, so a sentence costs T times the compute of one
per-token pass (up to 20 times: at most 20 targets), and its examples take T rows of the batch.
Accuracy counts every target, oov and eos included (TFF's baselines also report one that
leaves the special ids out; that one is not computed here).

Users: --num_clients users are drawn with --seed at load time (the full data, 342,477 users
and 135 million sentences, is read only by the chosen users' groups), the same draw
partitions.natural makes on the whole list of users (sorted ids): np.random.default_rng(seed)
.choice(users, num_clients, replace=False), kept in increasing order. Their training sentences
make the training split, each example carrying its user's number in the group column `user`
(--partition=natural); their sentences in the test file make the test split. The study loads
the data once, so the runs of --seeds > 1 (and grid points) share one draw of users.
"""
import os

import numpy as np

from fedjax_drift.data import common
from fedjax_drift.errors import UserError

try:  # optional: only TFF's h5 files need it
  import h5py
except ImportError:  # pragma: no cover - the `federated` extra installs it
  h5py = None

FILES = ('stackoverflow_train.h5', 'stackoverflow_test.h5')
WORD_COUNT = 'stackoverflow.word_count'
VOCAB_SIZE = 10_000  # TFF's baselines: the 10,000 most frequent words
SEQ_LEN = 20  # TFF's max sequence length: 20 words
COLUMN = 'user'


def special_tokens(vocab_size):
  """(pad, oov, bos, eos) for a vocabulary of `vocab_size` words (TFF's, one oov bucket)."""
  return 0, vocab_size + 1, vocab_size + 2, vocab_size + 3


def read_vocab(path, size=VOCAB_SIZE) -> list:
  """The first `size` words of a TFF word-count file ("word count" per line)."""
  words = []
  try:
    with open(path, encoding='utf-8') as f:
      for number, line in enumerate(f, 1):
        if len(words) == size:
          break
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
          raise UserError(f'{path} line {number} is not "word count": {line.strip()[:60]!r}')
        words.append(parts[0])
  except OSError as e:
    raise UserError(f'cannot read {path}: {e}') from None
  if not words:
    raise UserError(f'{path} holds no words')
  return words


def sentence_ids(sentence, index, seq_len=SEQ_LEN) -> list:
  """TFF's to_ids: a sentence's words split on ' ', the first seq_len looked up (index:
  word -> 1..V; others oov), bos before, eos after when fewer than seq_len words."""
  _, oov, bos, eos = special_tokens(len(index))
  words = sentence.split(' ')[:seq_len]
  return [bos] + [index.get(w, oov) for w in words] + ([eos] if len(words) < seq_len else [])


def windows(sentences, seq_len=SEQ_LEN):
  """Id lists (each 2..seq_len + 1 long) -> (x int32 [N, 2, seq_len], y int32 [N]): for each
  sentence s and t = 1..len(s) - 1, the prefix s[:t] right-padded (ids, mask) and s[t]."""
  lengths = np.array([len(s) for s in sentences], np.int64)
  padded = np.zeros((len(sentences), seq_len + 1), np.int32)
  for row, s in enumerate(sentences):
    padded[row, :len(s)] = s
  targets = np.maximum(lengths - 1, 0)
  rows = np.repeat(np.arange(len(sentences)), targets)
  t = np.arange(targets.sum()) - np.repeat(np.cumsum(targets) - targets, targets) + 1
  mask = (np.arange(seq_len)[None] < t[:, None]).astype(np.int32)
  x = np.stack([padded[rows, :seq_len] * mask, mask], axis=1)
  return x, padded[rows, t]


def _need_h5py(path):
  if h5py is None:
    raise UserError(f'reading {path} needs h5py: pip install "fedjax-drift[federated]"')


def user_ids(path) -> list:
  """The sorted user ids of a TFF h5 file (its examples/ group)."""
  _need_h5py(path)
  try:
    with h5py.File(path, 'r') as f:
      if 'examples' not in f:
        raise UserError(f'{path} has no examples/ group (TFF\'s layout: examples/<user>/tokens)')
      return sorted(f['examples'])
  except OSError as e:
    raise UserError(f'cannot read {path} as h5: {e}') from None


def choose(users, num_clients, seed) -> list:
  """The users --num_clients draws with --seed (module docstring); all when it is not below
  their number."""
  if not num_clients or num_clients >= len(users):
    return list(users)
  picked = np.sort(np.random.default_rng(seed).choice(len(users), num_clients, replace=False))
  return [users[i] for i in picked]


def read_sentences(path, users) -> dict:
  """{user: [sentence strings]} of `users` in a TFF h5 file; users it lacks are left out."""
  _need_h5py(path)
  out = {}
  try:
    with h5py.File(path, 'r') as f:
      examples = f['examples'] if 'examples' in f else {}
      for u in users:
        if u not in examples:
          continue
        if 'tokens' not in examples[u]:
          raise UserError(f'{path}: user {u} lacks tokens (TFF\'s layout: '
                          'examples/<user>/tokens)')
        out[u] = [s.decode('utf-8') if isinstance(s, bytes) else str(s)
                  for s in examples[u]['tokens'][()]]
  except OSError as e:
    raise UserError(f'cannot read {path} as h5: {e}') from None
  return out


def _split(sentences, users, index):
  """{user: sentences} -> (x, y, user numbers) of the windows, users in the given order."""
  xs, ys, ids = [], [], []
  for k, u in enumerate(users):
    x, y = windows([sentence_ids(s, index) for s in sentences.get(u, [])])
    xs.append(x)
    ys.append(y)
    ids.append(np.full(len(y), k, np.int32))
  if not xs:
    return np.zeros((0, 2, SEQ_LEN), np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32)
  return np.concatenate(xs), np.concatenate(ys), np.concatenate(ids)


def read_folder(folder, num_clients=0, seed=0):
  """TFF's Stack Overflow folder -> a validated Dataset of the chosen users' windows."""
  if not os.path.isdir(folder):
    raise UserError(f'--data_dir={folder} is not a directory')
  paths = [os.path.join(folder, f) for f in FILES + (WORD_COUNT,)]
  missing = [os.path.basename(p) for p in paths if not os.path.exists(p)]
  if missing:
    raise UserError(f'--data_dir={folder} lacks {", ".join(missing)} (TFF\'s Stack Overflow: '
                    f'{", ".join(FILES)} and {WORD_COUNT})')
  vocab = read_vocab(paths[2])
  index = {w: i + 1 for i, w in enumerate(vocab)}
  users = choose(user_ids(paths[0]), num_clients, seed)
  x_train, y_train, groups = _split(read_sentences(paths[0], users), users, index)
  x_test, y_test, _ = _split(read_sentences(paths[1], users), users, index)
  if not len(y_train):
    raise UserError(f'{paths[0]}: the chosen users have no sentences')
  if not len(y_test):
    raise UserError(f'{paths[1]} holds no sentences of the {len(users)} users chosen '
                    '(--num_clients, --seed); choose more users')
  classes = len(vocab) + 4
  ds = common.validate('stackoverflow', x_train, y_train, x_test, y_test,
                       groups={COLUMN: groups}, vocab_size=classes)
  return ds._replace(num_classes=classes)


SOURCE = ('https://storage.googleapis.com/tff-datasets-public/stackoverflow.tar.bz2 and '
          'stackoverflow.word_count.tar.bz2 beside it')


def load(dataset, data_dir=None, num_clients=0, seed=0, **_):
  """--dataset=stackoverflow from --data_dir (read_folder); there is no imported copy."""
  del dataset
  if not data_dir:
    raise UserError('--dataset=stackoverflow needs --data_dir: the folder holding TFF\'s '
                    f'{", ".join(FILES)} and {WORD_COUNT}; get them from {SOURCE}')
  return read_folder(data_dir, num_clients, seed)


common.register_dataset(
    'stackoverflow', 'Stack Overflow by user, TFF\'s next-word prediction (10,000 words + 4 '
    'special ids, one window per target word): --data_dir with stackoverflow_{train,test}.h5 '
    'and stackoverflow.word_count; --num_clients users drawn at load; group column user',
    load, shared=('num_clients', 'seed'),
    folder_files=lambda dataset, folder: [os.path.join(folder, f) for f in FILES + (WORD_COUNT,)],
    model='word_lstm', classes=VOCAB_SIZE + 4, source=SOURCE)

"""Stack Overflow by user (issue 35 item 1): a tiny copy of TFF's stackoverflow_{train,test}.h5
(examples/<user>/{tokens, title, tags, creation_date, score, type}) and stackoverflow.word_count
("word count" per line, most frequent first), read by --dataset=stackoverflow; the vocabulary
and the next-word windows checked against a transcription of TFF's to_ids, --num_clients's
draw against partitions.natural's, the word LSTM against a numpy LSTM run once over the whole
sentence (the windows' summed loss is the per-token loss), and two rounds run."""
import json
import os

import jax
import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import models, registry
from fedjax_drift.data import common, partitions, sources, stackoverflow

h5py = pytest.importorskip('h5py')

WORDS = ('the', 'to', 'i', 'a', 'is', 'in', 'it', 'and', 'of', 'you', 'code', 'this')
LONG = ' '.join(WORDS * 2)  # 24 words: truncated to 20, no eos
TRAIN = {'00000123': ['i like the code .', LONG, 'this is it'],  # 'like', '.': oov
         '00000456': ['you and i', 'a zebra in the code'],  # 'zebra' is out of vocabulary
         '00000789': ['of the', 'it is'],
         '00001000': ['the code is in the code']}
TEST = {'00000123': ['the end'], '00000789': ['to you', 'and it is'],
        '00002000': ['a user with no training sentences']}


def _write_split(path, users):
  with h5py.File(path, 'w') as f:
    for user, sentences in users.items():
      group = f.create_group(f'examples/{user}')
      n = len(sentences)
      text = lambda values: np.array([v.encode() for v in values], dtype=object)
      group.create_dataset('tokens', data=text(sentences), dtype=h5py.string_dtype())
      group.create_dataset('title', data=text(['a title'] * n), dtype=h5py.string_dtype())
      group.create_dataset('tags', data=text(['python|numpy'] * n), dtype=h5py.string_dtype())
      group.create_dataset('creation_date', data=text(['2010-01-08 09:34:05.997 UTC'] * n),
                           dtype=h5py.string_dtype())
      group.create_dataset('type', data=text(['answer'] * n), dtype=h5py.string_dtype())
      group.create_dataset('score', data=np.arange(n, dtype=np.int64))


def write_stackoverflow(folder):
  """TFF's unpacked archives: the two h5 files read and the word counts (held_out unread)."""
  os.makedirs(folder, exist_ok=True)
  _write_split(os.path.join(folder, 'stackoverflow_train.h5'), TRAIN)
  _write_split(os.path.join(folder, 'stackoverflow_test.h5'), TEST)
  with open(os.path.join(folder, 'stackoverflow.word_count'), 'w') as f:
    f.writelines(f'{w} {1000 - 10 * k}\n' for k, w in enumerate(WORDS))


def _tff_ids(sentence, vocab, seq_len=20):
  """TFF's to_ids, transcribed: pad 0, words 1..V, oov V+1, bos V+2, eos V+3."""
  v = len(vocab)
  words = sentence.split(' ')[:seq_len]
  ids = [vocab.index(w) + 1 if w in vocab else v + 1 for w in words]
  return [v + 2] + ids + ([v + 3] if len(words) < seq_len else [])


def _windows(users, vocab, seq_len=20):
  """Per target: (prefix ids right-padded with 0, mask, next id, user number)."""
  xs, masks, ys, owner = [], [], [], []
  for k, u in enumerate(sorted(users)):
    for s in users[u]:
      ids = _tff_ids(s, vocab)
      for t in range(1, len(ids)):
        xs.append(ids[:t] + [0] * (seq_len - t))
        masks.append([1] * t + [0] * (seq_len - t))
        ys.append(ids[t])
        owner.append(k)
  return np.array(xs), np.array(masks), np.array(ys), np.array(owner)


def test_vocabulary_windows_and_users_are_tffs(tmp_path):
  write_stackoverflow(str(tmp_path))
  assert stackoverflow.read_vocab(str(tmp_path / 'stackoverflow.word_count'), 3) == [
      'the', 'to', 'i']
  ds = sources.load('stackoverflow', str(tmp_path), num_clients=100, seed=0)
  vocab = list(WORDS)
  x, mask, y, owner = _windows(TRAIN, vocab)
  np.testing.assert_array_equal(ds.x_train[:, 0], x)
  np.testing.assert_array_equal(ds.x_train[:, 1], mask)
  np.testing.assert_array_equal(ds.y_train, y)
  np.testing.assert_array_equal(ds.groups['user'], owner)
  assert _tff_ids(LONG, vocab)[-1] != len(vocab) + 3 and len(_tff_ids(LONG, vocab)) == 21
  assert (y == len(vocab) + 1).sum() == 3  # 'like', '.' and 'zebra'
  # The test split: the chosen users' test sentences (a test-only user is nobody's).
  tx, _, ty, _ = _windows({u: TEST[u] for u in TEST if u in TRAIN}, vocab)
  np.testing.assert_array_equal(ds.x_test[:, 0], tx)
  np.testing.assert_array_equal(ds.y_test, ty)
  assert ds.vocab_size == ds.num_classes == len(vocab) + 4
  assert common.usual_model('stackoverflow') == 'word_lstm'


def test_num_clients_draws_the_users_natural_would(tmp_path):
  write_stackoverflow(str(tmp_path))
  every = sources.load('stackoverflow', str(tmp_path), num_clients=100, seed=0)
  for seed in range(6):
    some = sources.load('stackoverflow', str(tmp_path), num_clients=2, seed=seed)
    want = partitions.natural(every.groups['user'], 2, np.random.default_rng(seed))
    np.testing.assert_array_equal(some.y_train, every.y_train[np.concatenate(want)])
    np.testing.assert_array_equal(some.x_train, every.x_train[np.concatenate(want)])
    assert len(np.unique(some.groups['user'])) == 2


def test_missing_files_and_users_without_test_sentences_are_one_line(tmp_path):
  with pytest.raises(fedjax_drift.UserError, match='needs --data_dir'):
    sources.load('stackoverflow')
  with pytest.raises(fedjax_drift.UserError, match='lacks stackoverflow_train.h5, '
                                                    'stackoverflow_test.h5'):
    sources.load('stackoverflow', str(tmp_path))
  write_stackoverflow(str(tmp_path))
  # A seed drawing 00000456 and 00001000, who wrote no test sentence.
  seed = next(s for s in range(100)
              if not set(stackoverflow.choose(sorted(TRAIN), 2, s)) & set(TEST))
  with pytest.raises(fedjax_drift.UserError, match='holds no sentences of the 2 users'):
    sources.load('stackoverflow', str(tmp_path), num_clients=2, seed=seed)
  (tmp_path / 'stackoverflow.word_count').write_text('the 10 extra\n')
  with pytest.raises(fedjax_drift.UserError, match='line 1 is not "word count"'):
    sources.load('stackoverflow', str(tmp_path))


# --- The word LSTM -----------------------------------------------------------------------------

def _sigmoid(z):
  return 1 / (1 + np.exp(-z))


def _log_softmax(z):
  z = z - z.max(1, keepdims=True)
  return z - np.log(np.exp(z).sum(1, keepdims=True))


def _numpy_per_token(p, ids):
  """TFF's model once over a whole sentence, in numpy: logits at every position."""
  h_seq = np.asarray(p['embed']['embedding'], np.float64)[ids]
  w, b = (np.asarray(p['lstm']['gates'][n], np.float64) for n in ('kernel', 'bias'))
  c = h = np.zeros(w.shape[1] // 4)
  logits = []
  for t in range(len(ids)):
    i, j, f, o = np.split(np.concatenate([h_seq[t], h]) @ w + b, 4)
    c = _sigmoid(f + 1.0) * c + _sigmoid(i) * np.tanh(j)
    h = np.tanh(c) * _sigmoid(o)
    z = h @ p['project']['kernel'] + p['project']['bias']
    logits.append(z @ p['head']['kernel'] + p['head']['bias'])
  return np.stack(logits)


@pytest.mark.slow
def test_word_lstm_windows_give_the_per_token_loss():
  model = models.get('word_lstm', 10004, (2, 20), vocab_size=10004)
  shapes = jax.tree.map(lambda a: a.shape, model.init(jax.random.key(0)))
  assert shapes == {'embed': {'embedding': (10004, 96)},
                    'lstm': {'gates': {'kernel': (96 + 670, 4 * 670), 'bias': (4 * 670,)}},
                    'project': {'kernel': (670, 96), 'bias': (96,)},
                    'head': {'kernel': (96, 10004), 'bias': (10004,)}}
  assert registry.get('model', 'word_lstm_small').info.family == 'text'
  vocab = list(WORDS)
  small = models.get('word_lstm_small', len(vocab) + 4, (2, 20), vocab_size=len(vocab) + 4)
  params = small.init(jax.random.key(1))
  emb = np.asarray(params['embed']['embedding'])
  assert emb.shape == (16, 32) and np.abs(emb).max() <= 0.05  # Keras' U(+-0.05)
  ids = _tff_ids('i like the code in this', vocab)
  x, mask, y, _ = _windows({'u': ['i like the code in this']}, vocab)
  logits = np.asarray(small.apply(params, np.stack([x, mask], 1).astype(np.int32)))
  per_token = _numpy_per_token(jax.tree.map(np.asarray, params), np.array(ids[:-1]))
  np.testing.assert_allclose(logits, per_token, rtol=2e-4, atol=2e-5)
  np.testing.assert_array_equal(y, ids[1:])
  window_loss = -_log_softmax(logits.astype(np.float64))[np.arange(len(y)), y].sum()
  token_loss = -_log_softmax(per_token)[np.arange(len(y)), np.array(ids[1:])].sum()
  np.testing.assert_allclose(window_loss, token_loss, rtol=1e-4)


@pytest.mark.slow
def test_two_rounds_on_the_users_own_windows(tmp_path):
  write_stackoverflow(str(tmp_path / 'data'))
  config = fedjax_drift.Config(
      dataset='stackoverflow', data_dir=str(tmp_path / 'data'), partition='natural',
      num_clients=3, model='word_lstm_small', rounds=2, local_steps=2, local_epochs=0,
      batch_size=4, clients_per_round=2, progress=False, eval_every=1, lr=0.1, seed=0,
      out=str(tmp_path / 'run'))
  exp = fedjax_drift.prepare(config)
  users = stackoverflow.choose(sorted(TRAIN), 3, 0)
  sizes = [sum(len(_tff_ids(s, list(WORDS))) - 1 for s in TRAIN[u]) for u in users]
  assert [len(p) for p in exp.train_parts] == sizes
  fedjax_drift.run(config, log=lambda *a, **k: None)
  with open(tmp_path / 'run' / 'summary.json') as f:
    summary = json.load(f)
  assert summary and os.path.isfile(tmp_path / 'run' / 'metrics.csv')

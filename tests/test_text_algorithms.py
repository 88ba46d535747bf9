"""Every FedGKD Table 4 method on the text models, with local Adam at lr 1e-5 as the paper sets
it (issue 20 item 4), on synthetic token data in an npz (int32 x [N, 2, L] + vocab_size);
and FedGKD on text in a sweep that is stopped and resumed."""
import csv

import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import algorithms
from fedjax_drift.data import sources

QUIET = dict(log=lambda *_: None)
VOCAB, L = 50, 16
# FedGKD Table 4's methods; FedGen when it is registered.
TABLE4 = ['fedavg', 'fedprox', 'moon', 'fedgkd', 'fedgkd_vote', 'fedgkd_plus', 'feddistill_plus'
          ] + [a for a in ('fedgen',) if a in algorithms.names()]


def _split(rng, n):
  """n examples: [CLS]=1 first, a label token at position 1, random tokens, random lengths."""
  y = rng.integers(0, 4, n)
  ids = rng.integers(5, VOCAB, (n, L))
  ids[:, 0], ids[:, 1] = 1, 1 + y  # ids 1..4 are the label tokens
  mask = (np.arange(L)[None] < rng.integers(3, L + 1, n)[:, None]).astype(np.int32)
  return np.stack([np.where(mask > 0, ids, 0), mask], 1).astype(np.int32), y


@pytest.fixture
def text_npz(tmp_path):
  rng = np.random.default_rng(0)
  (x, y), (xt, yt) = _split(rng, 160), _split(rng, 40)
  path = tmp_path / 'tokens.npz'
  np.savez(path, x_train=x, y_train=y, x_test=xt, y_test=yt, vocab_size=np.int32(VOCAB))
  return path


def _config(npz, out, **kw):
  base = dict(dataset=f'npz:{npz}', model='text_bag', partition='dirichlet',
              dirichlet_alpha=0.1, num_clients=4, clients_per_round=2, rounds=2, eval_every=1,
              local_epochs=1, batch_size=16, local_optimizer='adam', lr=1e-5,
              weight_decay=0.0, vote_val_size=16, progress=False, out=str(out))
  base.update(kw)
  return fedjax_drift.Config(**base)


def _rows(path):
  with open(path) as f:
    return list(csv.DictReader(f))


def test_npz_token_data_carries_its_vocabulary(text_npz):
  ds = sources.load(f'npz:{text_npz}')
  assert ds.vocab_size == VOCAB and ds.x_train.dtype == np.int32
  assert ds.x_train.shape[1:] == (2, L)  # no channel axis added to token data


@pytest.mark.slow
@pytest.mark.parametrize('algo', TABLE4)
def test_table4_method_trains_text_bag_with_adam(text_npz, tmp_path, algo):
  fedjax_drift.run(_config(text_npz, tmp_path / algo, algo=algo), **QUIET)
  losses = [float(r['test_loss']) for r in _rows(tmp_path / algo / 'metrics.csv')]
  assert len(losses) == 3 and np.all(np.isfinite(losses))
  assert losses[2] != losses[0]  # the global model moved, even at lr 1e-5


@pytest.mark.slow
@pytest.mark.parametrize('algo', ['moon', 'fedgkd_plus'])
def test_projection_head_on_the_cls_feature_of_text_transformer(text_npz, tmp_path, algo):
  """MOON's and FedGKD+'s head sits on the transformer's [CLS] feature; dropout is on."""
  fedjax_drift.run(_config(text_npz, tmp_path / algo, algo=algo, model='text_transformer',
                           rounds=1, save_params=str(tmp_path / f'{algo}.npz')), **QUIET)
  with np.load(tmp_path / f'{algo}.npz') as f:
    names = set(f.files)
  assert any('projection_dense2' in n for n in names)
  assert any('base/pre_classifier' in n for n in names)  # the [CLS] pooled feature's layer
  losses = [float(r['test_loss']) for r in _rows(tmp_path / algo / 'metrics.csv')]
  assert np.all(np.isfinite(losses)) and losses[1] != losses[0]


@pytest.mark.slow
def test_fedgkd_text_sweep_resumes_bit_identically(text_npz, tmp_path):
  """A 2-seed FedGKD sweep on text stopped after round 1 and resumed equals the uninterrupted
  sweep row for row (the buffer of past global models is in the checkpoint)."""
  kw = dict(algo='fedgkd', seeds=2, model='text_transformer', lr=1e-3)
  fedjax_drift.run(_config(text_npz, tmp_path / 'whole', **kw), **QUIET)
  fedjax_drift.run(_config(text_npz, tmp_path / 'cut', **dict(kw, rounds=1)), **QUIET)
  fedjax_drift.resume(str(tmp_path / 'cut'), rounds=2, **QUIET)
  whole, cut = (_rows(tmp_path / d / 'metrics.csv') for d in ('whole', 'cut'))
  key = lambda rows: [(r['run'], r['round'], r['test_loss'], r['test_accuracy']) for r in rows]
  assert len(whole) == 6 and key(cut) == key(whole)


@pytest.mark.slow
@pytest.mark.parametrize('algo', ['fedgkd', 'moon'])
def test_pretrained_distilbert_trains_a_round(text_npz, tmp_path, algo):
  """--pretrained: the checkpoint is round 0's model (with MOON under the projection head's
  'base'), and a round of local Adam moves it."""
  from test_text_models import write_tiny_distilbert  # pylint: disable=g-import-not-at-top
  folder = write_tiny_distilbert(str(tmp_path / 'ckpt'))
  out = tmp_path / algo
  fedjax_drift.run(_config(text_npz, out, algo=algo, model='distilbert', pretrained=folder,
                           rounds=1, lr=1e-3, save_params=str(tmp_path / 'p.npz')), **QUIET)
  from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top
  word = load_file(f'{folder}/model.safetensors')['distilbert.embeddings.word_embeddings.weight']
  with np.load(tmp_path / 'p.npz') as f:
    key = [n for n in f.files if n.endswith('word_embeddings/embedding')][0]
    trained = f[key][0]  # run axis
  assert trained.shape == word.shape and not np.array_equal(trained, word)
  assert np.abs(trained - word).max() < 0.1  # started from the checkpoint, moved by Adam
  losses = [float(r['test_loss']) for r in _rows(out / 'metrics.csv')]
  assert np.all(np.isfinite(losses)) and losses[1] != losses[0]

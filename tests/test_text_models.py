"""Text models (models/text.py): DistilBERT against Hugging Face's PyTorch model on the same
checkpoint, checkpoint loading and its errors, and the small text models."""
import json
import os
import sys

import jax
import numpy as np
import pytest
from safetensors.numpy import save_file

import fedjax_drift
from fedjax_drift import inputs, models, study
from fedjax_drift.errors import UserError
from fedjax_drift.models import text

TINY = dict(dim=32, n_layers=2, n_heads=2, hidden_dim=64, vocab_size=100)
L = 12


def _hf():
  """(torch, transformers), or a skip saying which is missing."""
  try:
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    pytest.skip(f'the Hugging Face comparison needs torch and transformers '
                f'(pip install -e .[text-check]): {e}')
  return torch, transformers


def _tokens(seed=0, n=4):
  """int32 [n, 2, L]: random ids, masks with real lengths 12, 7, 3, 12 (padding id 0)."""
  rng = np.random.default_rng(seed)
  ids = rng.integers(1, TINY['vocab_size'], (n, L))
  mask = np.ones((n, L), np.int64)
  mask[1, 7:], mask[2, 3:] = 0, 0
  ids[mask == 0] = 0
  return ids, mask, np.stack([ids, mask], 1).astype(np.int32)


def _save_hf(torch, transformers, directory, base=False, bin_format=False, num_labels=3):
  """A tiny DistilBERT saved with transformers, its weights drawn at a scale that makes the
  logits O(1) (the default init gives ~0.01); returns the PyTorch model in eval mode."""
  torch.manual_seed(0)
  config = transformers.DistilBertConfig(**TINY, num_labels=num_labels)
  cls = transformers.DistilBertModel if base else \
      transformers.DistilBertForSequenceClassification
  model = cls(config).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():
      p.copy_(torch.randn_like(p) * 0.3 + (1.0 if 'orm.weight' in name else 0.0))  # LN ~ 1
  model.save_pretrained(str(directory))
  if bin_format:  # the older layout: pytorch_model.bin (torch.save of the state dict)
    (directory / 'model.safetensors').unlink()
    torch.save(model.state_dict(), str(directory / 'pytorch_model.bin'))
  return model


@pytest.mark.parametrize('bin_format', [False, True], ids=['safetensors', 'pytorch_model.bin'])
def test_logits_equal_hugging_face(tmp_path, bin_format):
  torch, transformers = _hf()
  ref_model = _save_hf(torch, transformers, tmp_path, bin_format=bin_format)
  ids, mask, x = _tokens()
  with torch.no_grad():
    ref = ref_model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).logits
  model = models.get('distilbert', 3, (2, L), vocab_size=100, pretrained=str(tmp_path))
  params = model.init(jax.random.key(0))
  out = np.asarray(model.apply(params, x))
  assert np.abs(ref.numpy()).max() > 0.5  # a comparison at a scale where errors would show
  np.testing.assert_allclose(out, ref.numpy(), rtol=1e-4, atol=1e-4)
  # The representation MOON and FedGKD+ project is the classifier's input.
  logits, z = model.features(params, x)
  np.testing.assert_allclose(np.asarray(z @ params['head']['kernel'] + params['head']['bias']),
                             np.asarray(logits), rtol=1e-5, atol=1e-5)


def test_base_checkpoint_gets_a_fresh_head_said_once(tmp_path, capsys):
  torch, transformers = _hf()
  ref_model = _save_hf(torch, transformers, tmp_path, base=True)
  ids, mask, x = _tokens()
  model = models.get('distilbert', 5, (2, L), vocab_size=90, pretrained=str(tmp_path))
  params = model.init(jax.random.key(0))
  model.init(jax.random.key(1))
  assert capsys.readouterr().err.count('no classification head') == 1
  word = ref_model.embeddings.word_embeddings.weight.detach().numpy()
  np.testing.assert_array_equal(np.asarray(params['word_embeddings']['embedding']), word)
  assert params['head']['kernel'].shape == (32, 5)
  # The body's [CLS] state equals the PyTorch base model's.
  with torch.no_grad():
    hidden = ref_model(input_ids=torch.tensor(ids),
                       attention_mask=torch.tensor(mask)).last_hidden_state[:, 0].numpy()
  pre = params['pre_classifier']
  _, z = model.features(params, x)
  # z = relu(pre_classifier(h_cls)); invert nothing, recompute from the reference h_cls.
  np.testing.assert_allclose(np.asarray(z), np.maximum(hidden @ pre['kernel'] + pre['bias'], 0),
                             rtol=1e-4, atol=1e-4)


def _numpy_checkpoint(directory, num_classes=3, drop=(), reshape=()):
  """A checkpoint written with safetensors' numpy API from a flax DistilBert of the TINY
  sizes (no torch needed); returns the flax params it holds."""
  spec = text.Spec(**{k: TINY[k] for k in TINY}, max_position_embeddings=512)
  module = text.DistilBert(num_classes, spec)
  params = module.init(jax.random.key(3), np.zeros((1, 2, L), np.int32))['params']
  tensors = {}
  for path, value in jax.tree_util.tree_flatten_with_path(params)[0]:
    name, transpose = text.hf_name(tuple(k.key for k in path))
    if not name.startswith(text.HEAD_TENSORS):
      name = f'distilbert.{name}'
    value = np.asarray(value)
    tensors[name] = np.ascontiguousarray(value.T if transpose else value)
  for name in drop:
    del tensors[name]
  for name in reshape:
    tensors[name] = tensors[name][:-1]
  save_file(tensors, str(directory / 'model.safetensors'))
  (directory / 'config.json').write_text(json.dumps(dict(TINY, model_type='distilbert')))
  return params


def write_tiny_distilbert(directory):
  """A tiny DistilBERT base-model folder as Hugging Face lays one out (config.json,
  model.safetensors under 'distilbert.', no classification head, vocab.txt), written with
  safetensors' numpy API; its WordPiece vocabulary spells any lowercase ASCII word letter by
  letter. For tests that need --pretrained (test_presets)."""
  os.makedirs(directory, exist_ok=True)
  chars = list('abcdefghijklmnopqrstuvwxyz0123456789.,;:!?\'"()-&$%/')
  vocab = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'] + chars + [f'##{c}' for c in chars]
  spec = text.Spec(vocab_size=len(vocab), dim=32, n_layers=2, n_heads=2, hidden_dim=64)
  params = text.DistilBert(2, spec).init(jax.random.key(5), np.zeros((1, 2, 8), np.int32))
  tensors = {}
  for path, value in jax.tree_util.tree_flatten_with_path(params['params'])[0]:
    name, transpose = text.hf_name(tuple(k.key for k in path))
    if not name.startswith(text.HEAD_TENSORS):
      value = np.asarray(value)
      tensors[f'distilbert.{name}'] = np.ascontiguousarray(value.T if transpose else value)
  save_file(tensors, os.path.join(directory, 'model.safetensors'))
  with open(os.path.join(directory, 'config.json'), 'w') as f:
    json.dump(dict(spec._asdict(), model_type='distilbert'), f)
  with open(os.path.join(directory, 'vocab.txt'), 'w') as f:
    f.write('\n'.join(vocab) + '\n')
  return directory


def test_every_tensor_maps_back_to_its_parameter(tmp_path):
  saved = _numpy_checkpoint(tmp_path)
  model = models.get('distilbert', 3, (2, L), vocab_size=100, pretrained=str(tmp_path))
  loaded = model.init(jax.random.key(0))
  assert jax.tree.structure(loaded) == jax.tree.structure(saved)
  for a, b in zip(jax.tree.leaves(loaded), jax.tree.leaves(saved)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_base_checkpoint_without_torch_traces_and_loads(tmp_path):
  """A base model (no head) loads under jax.eval_shape too (the memory preflight traces init)."""
  folder = write_tiny_distilbert(str(tmp_path))
  model = models.get('distilbert', 4, (2, L), vocab_size=60, pretrained=folder)
  shapes = jax.eval_shape(model.init, jax.random.key(0))
  params = model.init(jax.random.key(0))
  assert jax.tree.map(lambda a: a.shape, shapes) == jax.tree.map(lambda a: a.shape, params)
  assert params['head']['kernel'].shape == (32, 4)


def test_resume_fingerprints_the_checkpoint_files_it_reads(tmp_path):
  folder = write_tiny_distilbert(str(tmp_path / 'ckpt'))
  (tmp_path / 'ckpt' / 'flax_model.msgpack').write_bytes(b'not read by this project')
  config = fedjax_drift.Config(dataset='embedded', model='distilbert', pretrained=folder)
  read = {os.path.basename(p) for flag, p in inputs.input_files(study.input_flags(config))
          if flag == '--pretrained'}
  assert read == {'config.json', 'model.safetensors', 'vocab.txt'}


def test_checkpoint_errors_name_the_tensor_or_file(tmp_path, monkeypatch):
  missing, bad, pt = tmp_path / 'missing', tmp_path / 'bad', tmp_path / 'pt'
  for d in (missing, bad, pt):
    d.mkdir()
  _numpy_checkpoint(missing, drop=['distilbert.transformer.layer.1.ffn.lin2.bias'])
  _numpy_checkpoint(bad, reshape=['distilbert.embeddings.position_embeddings.weight'])
  get = lambda d, **kw: models.get('distilbert', 3, (2, L), vocab_size=kw.get('vocab', 100),
                                   pretrained=str(d), **{k: v for k, v in kw.items()
                                                         if k != 'vocab'}).init(
                                                             jax.random.key(0))
  with pytest.raises(UserError, match=r'no tensor transformer\.layer\.1\.ffn\.lin2\.bias'):
    get(missing)
  with pytest.raises(UserError, match=r'position_embeddings\.weight has shape \(511, 32\)'):
    get(bad)
  with pytest.raises(UserError, match=r'vocabulary \(101 tokens\) exceeds the 100'):
    get(missing, vocab=101)
  (pt / 'config.json').write_text(json.dumps(TINY))
  with pytest.raises(UserError, match='neither model.safetensors nor pytorch_model.bin'):
    get(pt)
  (pt / 'pytorch_model.bin').write_bytes(b'not read')
  monkeypatch.setitem(sys.modules, 'torch', None)  # as if torch were not installed
  with pytest.raises(UserError, match='needs torch'):
    get(pt)
  with pytest.raises(UserError, match='no config.json'):
    get(tmp_path)
  with pytest.raises(UserError, match='--max_seq_len=600 exceeds the 512 positions'):
    models.get('distilbert', 3, (2, 600), vocab_size=100, pretrained=str(missing))
  with pytest.raises(UserError, match='--pretrained applies to --model=distilbert'):
    models.get('text_bag', 3, (2, L), vocab_size=100, pretrained=str(missing))


def test_standard_distilbert_has_66m_parameters():
  model = models.get('distilbert', 4, (2, 128), vocab_size=30522)
  shapes = jax.eval_shape(model.init, jax.random.key(0))
  head = 768 * 768 + 768 + 768 * 4 + 4  # pre_classifier + classifier
  assert models.num_params(shapes) - head == 66_362_880  # distilbert-base-uncased's count


@pytest.mark.parametrize('name', ['text_bag', 'text_transformer'])
@pytest.mark.slow
def test_small_text_models(name):
  ids, mask, x = _tokens(1)
  model = models.get(name, 4, (2, L), vocab_size=100)
  params = model.init(jax.random.key(0))
  logits, z = model.features(params, x)
  assert logits.shape == (4, 4) and z.ndim == 2
  # Padding is invisible: other ids at masked positions leave the logits unchanged.
  other = x.copy()
  other[:, 0][mask == 0] = 57
  np.testing.assert_allclose(np.asarray(model.apply(params, other)), np.asarray(logits),
                             rtol=1e-6, atol=1e-6)
  if model.has_dropout:  # dropout only with an rng, as train_apply's convention
    a, _ = model.train_apply(params, x, jax.random.key(1))
    b, _ = model.train_apply(params, x)
    assert not np.allclose(np.asarray(a), np.asarray(b))
    np.testing.assert_allclose(np.asarray(b), np.asarray(logits), rtol=1e-6)
  # MOON / FedGKD+'s projection head sits on the same representation.
  proj = models.get(name, 4, (2, L), projection_dim=16, vocab_size=100)
  _, zp = proj.features(proj.init(jax.random.key(0)), x)
  assert zp.shape == (4, 16)


def test_text_and_image_models_refuse_the_other_data():
  with pytest.raises(UserError, match='does not read token sequences'):
    models.get('mlp', 4, (2, L), vocab_size=100)
  with pytest.raises(UserError, match=r'needs token sequences \[2, L\]'):
    models.get('text_bag', 4, (28, 28, 1))

"""Text models on token sequences: DistilBERT (with Hugging Face checkpoints) and two small ones.

Inputs are int32 [B, 2, L]: x[:, 0] the token ids, x[:, 1] the attention mask (1 = a real
token, 0 = padding), as the text datasets store them. Every model here returns logits and,
with `return_features=True`, (logits, z) where z is the input of its output layer `head`:
the [CLS] feature after DistilBERT's pre-classifier, or the masked mean of the embeddings.
MOON's and FedGKD+'s projection head (zoo.WithProjection) sits on z.

DistilBERT follows Hugging Face's PyTorch `DistilBertForSequenceClassification`
(transformers/models/distilbert/modeling_distilbert.py, Sanh et al. 2019) operation for
operation, so that a checkpoint gives the same logits: learned (or sinusoidal) position
embeddings added to the token embeddings, LayerNorm (eps 1e-12), dropout; then n_layers
post-LN blocks x = LN(x + Attn(x)), x = LN(x + FFN(x)) with FFN = lin2(gelu(lin1(x))) and
dropout; then the head on the [CLS] (first) position: pre_classifier Dense(dim), ReLU,
dropout(seq_classif_dropout), classifier Dense(C). `load_pretrained` maps every tensor of a
Hugging Face checkpoint folder onto this module's parameters.
"""
import functools
import os
import sys
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

from fedjax_drift import registry
from fedjax_drift.errors import UserError, read_json_input
from fedjax_drift.models.info import ModelInfo
from fedjax_drift.models.layers import dense, embed


class Spec(NamedTuple):
  """A DistilBERT configuration: the fields of Hugging Face's DistilBertConfig we use."""
  vocab_size: int = 30522
  dim: int = 768
  n_layers: int = 6
  n_heads: int = 12
  hidden_dim: int = 3072
  max_position_embeddings: int = 512
  dropout: float = 0.1
  attention_dropout: float = 0.1
  seq_classif_dropout: float = 0.2
  sinusoidal_pos_embds: bool = False
  activation: str = 'gelu'
  initializer_range: float = 0.02


STANDARD = Spec()  # distilbert-base-uncased's config.json (HF DistilBertConfig's defaults)

# The small encoder of --model=text_transformer: DistilBERT's layout at a CPU-friendly size.
SMALL = Spec(dim=64, n_layers=2, n_heads=2, hidden_dim=256)

_ACTIVATIONS = {'gelu': functools.partial(nn.gelu, approximate=False),  # HF 'gelu' is erf's
                'relu': nn.relu}


def read_config(directory):
  """Spec from DIR/config.json of a Hugging Face DistilBERT checkpoint folder.

  Fields the file lacks take HF DistilBertConfig's defaults; a file that is not a DistilBERT
  config, or an activation other than gelu/relu, is a UserError naming the file."""
  path = os.path.join(directory, 'config.json')
  if not os.path.isfile(path):
    raise UserError(f'--pretrained={directory}: no config.json in it (a Hugging Face '
                    'checkpoint folder holds config.json and model.safetensors)')
  raw = read_json_input(path, '--pretrained')
  if raw.get('model_type', 'distilbert') != 'distilbert':
    raise UserError(f'--pretrained: {path} is a {raw.get("model_type")!r} model; '
                    '--model=distilbert reads DistilBERT checkpoints')
  spec = Spec(**{k: type(getattr(STANDARD, k))(raw[k]) for k in Spec._fields if k in raw})
  if spec.activation not in _ACTIVATIONS:
    raise UserError(f'--pretrained: {path} has activation {spec.activation!r}; supported: '
                    f'{", ".join(_ACTIVATIONS)}')
  if spec.dim % spec.n_heads:
    raise UserError(f'--pretrained: {path}: n_heads={spec.n_heads} does not divide '
                    f'dim={spec.dim}')
  return spec


def sinusoidal_positions(n_pos, dim):
  """[n_pos, dim] table of HF's create_sinusoidal_embeddings: sin on even, cos on odd columns,
  angle pos / 10000^(2 (j // 2) / dim)."""
  pos, j = np.arange(n_pos)[:, None], np.arange(dim)[None, :]
  angle = pos / np.power(10000, 2 * (j // 2) / dim)
  return np.where(j % 2 == 0, np.sin(angle), np.cos(angle)).astype(np.float32)


def _dense(features, spec, name):
  return nn.Dense(features, kernel_init=nn.initializers.normal(spec.initializer_range),
                  name=name)


def _layer_norm(name):
  # eps as HF (1e-12); the two-pass variance, as torch computes it.
  return nn.LayerNorm(epsilon=1e-12, use_fast_variance=False, name=name)


class Block(nn.Module):
  """One post-LN transformer block of DistilBERT (HF `TransformerBlock`)."""
  spec: Spec

  @nn.compact
  def __call__(self, x, mask, deterministic):
    s = self.spec
    b, length, head_dim = x.shape[0], x.shape[1], s.dim // s.n_heads

    def heads(name):  # [B, L, dim] -> [B, heads, L, head_dim]
      y = _dense(s.dim, s, name)(x)
      return y.reshape(b, length, s.n_heads, head_dim).transpose(0, 2, 1, 3)

    q, k, v = heads('q_lin'), heads('k_lin'), heads('v_lin')
    scores = jnp.einsum('bhqd,bhkd->bhqk', q, k) * head_dim ** -0.5
    # Padding keys get the lowest float, as HF's additive mask: exp underflows to exactly 0.
    scores = jnp.where(mask[:, None, None, :] > 0, scores, jnp.finfo(scores.dtype).min)
    weights = nn.Dropout(s.attention_dropout, deterministic=deterministic)(
        jax.nn.softmax(scores, axis=-1))
    attn = jnp.einsum('bhqk,bhkd->bhqd', weights, v).transpose(0, 2, 1, 3)
    attn = _dense(s.dim, s, 'out_lin')(attn.reshape(b, length, s.dim))
    x = _layer_norm('sa_layer_norm')(attn + x)
    y = _dense(s.dim, s, 'lin2')(_ACTIVATIONS[s.activation](_dense(s.hidden_dim, s, 'lin1')(x)))
    y = nn.Dropout(s.dropout, deterministic=deterministic)(y)
    return _layer_norm('output_layer_norm')(y + x)


class DistilBert(nn.Module):
  """DistilBERT (Sanh et al. 2019) with Hugging Face's sequence-classification head.

  See the module docstring. `spec` holds the sizes and dropout rates (a checkpoint's
  config.json, or `STANDARD`); dropout is on only with train=True and a 'dropout' rng.
  """
  num_classes: int
  spec: Spec = STANDARD

  @nn.compact
  def __call__(self, x, return_features=False, train=False):
    s = self.spec
    ids, mask = x[:, 0], x[:, 1]
    deterministic = not (train and self.has_rng('dropout'))
    init = nn.initializers.normal(s.initializer_range)
    position_init = init
    if s.sinusoidal_pos_embds:  # HF's _init_weights writes the table; trained thereafter
      table = sinusoidal_positions(s.max_position_embeddings, s.dim)
      position_init = lambda *_: jnp.asarray(table)
    h = (nn.Embed(s.vocab_size, s.dim, embedding_init=init, name='word_embeddings')(ids)
         + nn.Embed(s.max_position_embeddings, s.dim, embedding_init=position_init,
                    name='position_embeddings')(jnp.arange(ids.shape[1])[None, :]))
    h = nn.Dropout(s.dropout, deterministic=deterministic)(_layer_norm('embeddings_norm')(h))
    for i in range(s.n_layers):
      h = Block(s, name=f'layer_{i}')(h, mask, deterministic)
    z = nn.relu(_dense(s.dim, s, 'pre_classifier')(h[:, 0]))
    z = nn.Dropout(s.seq_classif_dropout, deterministic=deterministic)(z)
    logits = _dense(self.num_classes, s, 'head')(z)
    return (logits, z) if return_features else logits


class TextBag(nn.Module):
  """A bag of embeddings: the masked mean of token embeddings, then a linear classifier.

  fastText's classifier without n-grams (Joulin et al. 2017, "Bag of Tricks for Efficient
  Text Classification"): z = mean of the embeddings of the real tokens, logits = head(z).
  """
  num_classes: int
  vocab_size: int
  dim: int = 64

  @nn.compact
  def __call__(self, x, return_features=False):
    ids, mask = x[:, 0], x[:, 1].astype(jnp.float32)
    e = embed(self.vocab_size, self.dim, nn.initializers.normal(0.1), 'embed')(ids)
    z = (e * mask[..., None]).sum(1) / jnp.maximum(mask.sum(1, keepdims=True), 1.0)
    logits = dense(z, self.num_classes, 'head')
    return (logits, z) if return_features else logits


def _rates(spec, dropout):
  """spec with every dropout rate set to `dropout` (--dropout); -1 keeps spec's own."""
  if dropout < 0:
    return spec
  return spec._replace(dropout=dropout, attention_dropout=dropout, seq_classif_dropout=dropout)


def _check_lengths(spec, seq_len, vocab_size, where):
  if seq_len > spec.max_position_embeddings:
    raise UserError(f'--max_seq_len={seq_len} exceeds the {spec.max_position_embeddings} '
                    f'positions of {where}')
  if vocab_size > spec.vocab_size:
    raise UserError(f'the tokenizer\'s vocabulary ({vocab_size} tokens) exceeds the '
                    f'{spec.vocab_size} token embeddings of {where}; use the checkpoint\'s '
                    'own tokenizer (--tokenizer=auto)')


def distilbert(num_classes, vocab_size, seq_len, dropout=-1.0, pretrained=''):
  """DistilBERT with Hugging Face's classification head; --pretrained=DIR loads a checkpoint.

  Sanh et al. (2019); see `DistilBert`. pretrained: a Hugging Face checkpoint folder (its
  config.json gives the sizes; models.get loads its weights); '' = distilbert-base's sizes with a `vocab_size` embedding table,
  randomly initialised. dropout: -1 = the config's rates, else every rate.
  """
  if pretrained:
    spec = read_config(pretrained)
    _check_lengths(spec, seq_len, vocab_size, f'--pretrained={pretrained}')
  else:
    spec = STANDARD._replace(vocab_size=vocab_size)
    _check_lengths(spec, seq_len, vocab_size, '--model=distilbert')
  return DistilBert(num_classes, _rates(spec, dropout))


def text_transformer(num_classes, vocab_size, seq_len, dropout=-1.0):
  """A 2-layer transformer encoder (dim 64, 2 heads, FFN 256) in DistilBERT's layout.

  DistilBERT's blocks and classification head at a CPU-friendly size. Learned positions for
  `seq_len` tokens; dropout: -1 = DistilBERT's rates (0.1, head 0.2), else every rate."""
  return DistilBert(num_classes, _rates(SMALL._replace(vocab_size=vocab_size,
                                                       max_position_embeddings=seq_len),
                                        dropout))


def text_bag(num_classes, vocab_size, seq_len):  # pylint: disable=unused-argument
  """Bag of embeddings (fastText-like): masked mean of 64-d token embeddings, linear classifier.

  See `TextBag`; it trains from scratch in CPU-seconds."""
  return TextBag(num_classes, vocab_size)


# --- Registration -----------------------------------------------------------------------------
# build(values, num_classes, input_shape, vocab_size) -> the flax module; info: a ModelInfo of
# family 'text' (int32 [B, 2, L] token ids and attention masks). --pretrained is read here and by
# the text datasets' tokenizers, so no entry declares it. DistilBERT's layers draw their
# parameters as Hugging Face's PyTorch `_init_weights` does under every --init.
registry.register('model', 'distilbert', 'DistilBERT with Hugging Face\'s classification head; '
                  '--pretrained=DIR loads a checkpoint', reads=('dropout',),
                  build=lambda v, num_classes, input_shape, vocab_size: distilbert(
                      num_classes, vocab_size, input_shape[1], v.dropout, v.pretrained),
                  info=ModelInfo('text'))
registry.register('model', 'text_bag', 'Bag of embeddings (fastText-like): masked mean of 64-d '
                  'token embeddings, linear classifier',
                  build=lambda v, num_classes, input_shape, vocab_size: text_bag(
                      num_classes, vocab_size, input_shape[1]), info=ModelInfo('text'))
registry.register('model', 'text_transformer', 'A 2-layer transformer encoder (dim 64, 2 heads, '
                  'FFN 256) in DistilBERT\'s layout', reads=('dropout',),
                  build=lambda v, num_classes, input_shape, vocab_size: text_transformer(
                      num_classes, vocab_size, input_shape[1], v.dropout), info=ModelInfo('text'))


# ----------------------------------------------------------------------------------------------
# Hugging Face checkpoints.

# The classification head of DistilBertForSequenceClassification: absent from a base model
# (DistilBertModel, DistilBertForMaskedLM), which then starts with a fresh head.
HEAD_TENSORS = ('pre_classifier.weight', 'pre_classifier.bias', 'classifier.weight',
                'classifier.bias')


def hf_name(path):
  """(Hugging Face tensor name without the 'distilbert.' prefix, transposed?) for a flax
  parameter path of `DistilBert`, e.g. ('layer_0', 'q_lin', 'kernel') ->
  ('transformer.layer.0.attention.q_lin.weight', True). Head names carry no prefix in HF
  (see `checkpoint_name`)."""
  *scope, leaf = path
  name = {'kernel': 'weight', 'embedding': 'weight', 'scale': 'weight', 'bias': 'bias'}[leaf]
  if scope[0].startswith('layer_'):
    block, layer = scope[0][len('layer_'):], scope[1]
    part = 'attention.' if layer.endswith('_lin') and layer[0] in 'qkvo' else (
        'ffn.' if layer in ('lin1', 'lin2') else '')
    return f'transformer.layer.{block}.{part}{layer}.{name}', leaf == 'kernel'
  module = {'word_embeddings': 'embeddings.word_embeddings',
            'position_embeddings': 'embeddings.position_embeddings',
            'embeddings_norm': 'embeddings.LayerNorm', 'head': 'classifier',
            'pre_classifier': 'pre_classifier'}[scope[0]]
  return f'{module}.{name}', leaf == 'kernel'


def checkpoint_name(name, tensors):
  """The key of HF tensor `name` in `tensors`: the body under 'distilbert.' when the
  checkpoint is a task model, LayerNorm's legacy gamma/beta names accepted; None if absent."""
  prefixed = any(k.startswith('distilbert.') for k in tensors)
  key = name if name.startswith(HEAD_TENSORS) or not prefixed else f'distilbert.{name}'
  if key in tensors:
    return key
  legacy = key.replace('LayerNorm.weight', 'LayerNorm.gamma').replace('LayerNorm.bias',
                                                                      'LayerNorm.beta')
  if 'norm' in key.lower() and legacy != key and legacy in tensors:
    return legacy
  return None


# The tokenizer files a checkpoint folder may hold (data/text.py reads them with --tokenizer=auto).
TOKENIZER_FILES = ('tokenizer.json', 'vocab.txt', 'tokenizer_config.json')


def checkpoint_files(directory):
  """The files of a --pretrained folder that a run reads: config.json, the weights it loads
  (model.safetensors, else pytorch_model.bin) and the tokenizer's files; those that exist.
  (--resume fingerprints them: a changed checkpoint is refused.)"""
  weights = [f for f in ('model.safetensors', 'pytorch_model.bin')
             if os.path.isfile(os.path.join(directory, f))][:1]
  names = ('config.json',) + tuple(weights) + TOKENIZER_FILES
  return [os.path.join(directory, n) for n in names if os.path.isfile(os.path.join(directory, n))]


@functools.lru_cache(maxsize=2)
def read_tensors(directory):
  """{tensor name: float32 numpy array} of DIR/model.safetensors (read with safetensors'
  numpy API) or else DIR/pytorch_model.bin (needs torch). Cached: a sweep's runs read once."""
  st, pt = (os.path.join(directory, f) for f in ('model.safetensors', 'pytorch_model.bin'))
  if os.path.isfile(st):
    from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top
    try:
      tensors = load_file(st)
    except Exception as e:  # pylint: disable=broad-except  # a truncated or foreign file
      raise UserError(f'--pretrained: cannot read {st}: {e}') from None
  elif os.path.isfile(pt):
    try:
      import torch  # pylint: disable=g-import-not-at-top
    except ImportError:
      raise UserError(f'--pretrained: {pt} needs torch to read (pip install torch), or '
                      'convert it to model.safetensors') from None
    try:
      state = torch.load(pt, map_location='cpu', weights_only=True)
    except Exception as e:  # pylint: disable=broad-except
      raise UserError(f'--pretrained: cannot read {pt}: {e}') from None
    tensors = {k: v.float().numpy() for k, v in state.items()}
  else:
    raise UserError(f'--pretrained={directory}: neither model.safetensors nor '
                    'pytorch_model.bin in it')
  return {k: np.asarray(v, np.float32) for k, v in tensors.items()}


_SAID = set()  # checkpoints whose missing head was reported (once per process)


def load_pretrained(params, directory):
  """`params` (a DistilBert tree, or WithProjection's with it under 'base') with every tensor
  of the checkpoint in `directory` in place; Linear weights transposed ([out, in] -> flax's
  [in, out]). A missing or mis-shaped tensor is a UserError naming it, except the
  classification head (HEAD_TENSORS) which, absent, stays as initialised (said once).
  Returns a new tree (the checkpoint's tensors as numpy arrays); the input is not changed."""
  tensors = read_tensors(directory)
  tree = params['base'] if 'base' in params else params
  flat = jax.tree_util.tree_flatten_with_path(tree)
  fresh, leaves = [], []
  for path, value in flat[0]:
    names = tuple(getattr(k, 'key', k) for k in path)
    name, transpose = hf_name(names)
    key = checkpoint_name(name, tensors)
    if key is None:
      if not name.startswith(HEAD_TENSORS):
        raise UserError(f'--pretrained={directory}: the checkpoint has no tensor {name}')
      fresh.append(name)
      leaves.append(value)  # as initialised (a tracer under jax.eval_shape)
      continue
    array = tensors[key].T if transpose else tensors[key]
    if array.shape != tuple(value.shape):
      raise UserError(f'--pretrained={directory}: tensor {key} has shape '
                      f'{tensors[key].shape}; the model needs '
                      f'{tuple(value.shape)[::-1] if transpose else tuple(value.shape)}')
    leaves.append(array)
  if fresh and directory not in _SAID:
    _SAID.add(directory)
    print(f'--pretrained={directory}: no classification head in the checkpoint '
          f'({", ".join(sorted({n.rsplit(".", 1)[0] for n in fresh}))}); initialised fresh',
          file=sys.stderr)
  loaded = jax.tree_util.tree_unflatten(flat[1], leaves)
  return dict(params, base=loaded) if 'base' in params else loaded

"""Flax models and the pure functions the engine needs from them."""
import types
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_drift import registry
from fedjax_drift.errors import UserError
from fedjax_drift.models import layers, text
from fedjax_drift.models.zoo import OUTPUT_LAYERS, WithProjection, takes_train


class Model(NamedTuple):
  """What the rest of the library knows of a model: init and apply, both pure."""
  name: str
  family: str                                # 'dense', 'conv' or 'text'
  init: Callable[[jax.Array], Any]           # key -> params
  # (params, x) -> logits (evaluation); x float32, or int32 [B, 2, L] tokens for text models
  apply: Callable[[Any, jax.Array], jax.Array]
  input_shape: tuple
  features: Callable = None  # (params, x) -> (logits, representation); the projection if any
  # Training-mode forward: (params, x, rng=None) -> (logits, new model state or None). Models
  # with BatchNorm carry {'params', 'batch_stats'} as their "params" pytree; the new state
  # holds the updated batch statistics, which local training writes back after each step. rng
  # (a PRNG key) feeds flax's 'dropout' collection: dropout is on only when it is given.
  train_apply: Callable = None
  has_state: bool = False
  conv_impl: str = 'im2col'  # how its convolutions are computed (models/layers.py)
  # As train_apply with the representation: (params, x, rng=None) -> ((logits, z), state).
  train_features: Callable = None
  has_dropout: bool = False  # whether an rng given to train_apply changes anything
  # (params, x) -> z [B, d]: the penultimate layer, the input of the output layer (evaluation
  # mode); with a projection head, the projection (the classifier reads it).
  penultimate: Callable = None
  # (params, z) -> logits: the output layer alone, so head(p, penultimate(p, x)) = apply(p, x)
  # (FedGen's generator regulariser); head_params(params) -> the output layer's subtree, which
  # `head` also accepts as its params.
  head: Callable = None
  head_params: Callable = None


# The model options: the Config fields a model entry may declare in `reads` (registry kind
# 'model'), each with the value that means "the model's own".
OPTIONS = {'dropout': -1.0, 'gn_groups': 0, 'gn_group_size': 0, 'gn_eps': -1.0}
_OPTION_WHAT = {'dropout': 'dropout layers', 'gn_groups': 'GroupNorm layers',
                'gn_group_size': 'GroupNorm layers', 'gn_eps': 'GroupNorm layers'}


def _check_options(name, entry, given):
  """UserError naming the flag for an option set away from its OPTIONS value on a model whose
  entry does not read it, except --dropout=0 (off is off)."""
  for option, value in given.items():
    if value != OPTIONS[option] and option not in entry.reads and not (
        option == 'dropout' and value == 0):
      raise UserError(f'--{option}={value} does not apply: --model={name} has no '
                      f'{_OPTION_WHAT[option]}')


def _check(name, family, input_shape, init, conv_impl, projection_hidden):
  """UserError for the values models.get refuses before building anything."""
  if conv_impl not in layers.CONV_IMPLS:
    raise UserError(f'--conv_impl={conv_impl} is unknown; use one of '
                    f'{", ".join(layers.CONV_IMPLS)}')
  registry.get('init', init)
  if projection_hidden < 0:
    raise UserError(f'--projection_hidden={projection_hidden} must be >= 0')
  if family == 'conv' and len(input_shape) != 3:
    raise UserError(f'--model={name} needs images [H, W, C]; the data has shape {input_shape}')


def get(name, num_classes, input_shape, init='default', projection_dim=0, conv_impl='auto',
        projection_hidden=0, dropout=-1.0, gn_groups=0, gn_group_size=0, vocab_size=0,
        pretrained='', gn_eps=-1.0):
  """Builds model `name` (registry kind 'model') for inputs of `input_shape` (one example, no
  batch axis).

  init (--init, registry kind 'init'): default (flax's), zeros or torch (each layer as PyTorch
  builds it; models/layers.py). projection_dim > 0 puts a projection head before the output
  layer (MOON, FedGKD+; zoo.WithProjection); `features` then returns (logits, projection).
  projection_hidden is its hidden width (0 = the base model's feature width). conv_impl (auto,
  im2col, lax, onednn; see models/layers.py) picks how convolutions are computed; auto resolves
  now, for the default backend: oneDNN on CPU where its extension builds (else im2col),
  lax.conv on GPU/TPU. dropout (-1 = the model's rates, 0 = off, p = every rate p), gn_groups
  and gn_group_size (GroupNorm groups, or channels per group; 0 = the model's rule) and gn_eps
  (GroupNorm's ε, -1 = the model's) are --dropout, --gn_groups, --gn_group_size and --gn_eps,
  refused by models whose entry does not read them. A model whose entry says batchnorm
  (models/info.ModelInfo) has BatchNorm: its params are {'params', 'batch_stats'}. Text models (family 'text', models/text.py) take int32
  [2, L] inputs (token ids, attention mask) and need the tokenizer's `vocab_size`
  (Dataset.vocab_size); `pretrained` (--pretrained, distilbert only) is a Hugging Face
  checkpoint folder whose weights init puts in place of the random ones.
  """
  entry = registry.get('model', name)
  family = entry.info.family
  _check(name, family, input_shape, init, conv_impl, projection_hidden)
  options = dict(dropout=dropout, gn_groups=gn_groups, gn_group_size=gn_group_size,
                 gn_eps=gn_eps)
  _check_options(name, entry, options)
  _check_text(name, family, input_shape, vocab_size, pretrained, init)
  # Only a model with convolutions builds or loads the oneDNN extension for `auto`.
  conv_impl = layers.resolve_conv_impl(conv_impl, convolves=family == 'conv')
  module = registry.build('model', name, types.SimpleNamespace(**options, pretrained=pretrained),
                          num_classes=num_classes, input_shape=tuple(int(d) for d in input_shape),
                          vocab_size=int(vocab_size))
  if projection_dim:
    module = WithProjection(module, projection_dim, projection_hidden)
  has_state = entry.info.batchnorm
  scheme, after_init = registry.get('init', init).info

  def scoped(fn):  # every trace of the module sees the chosen convolution and initialisation
    def wrapped(*args, **kwargs):
      with layers.conv_impl(conv_impl), layers.init_scheme(scheme):
        return fn(*args, **kwargs)
    return wrapped

  @scoped
  def init_fn(key):
    dtype = jnp.int32 if family == 'text' else jnp.float32  # token ids stay integers
    variables = module.init(key, jnp.zeros((1,) + tuple(input_shape), dtype),
                            return_features=True)
    params = dict(variables) if has_state else variables['params']
    if after_init is not None:
      params = after_init(params)
    if pretrained:
      params = jax.tree.map(jnp.asarray, text.load_pretrained(params, pretrained))
    return params

  fns = _forward(module, has_state, scoped)
  if gn_groups or gn_group_size:  # a grouping that does not divide fails now, not mid-run
    jax.eval_shape(init_fn, jax.random.key(0))
  return Model(name, family, init_fn, fns['apply'], tuple(input_shape), fns['features'],
               fns['train_apply'], has_state, conv_impl, fns['train_features'],
               'dropout' in entry.reads and dropout != 0,
               penultimate=lambda params, x: fns['features'](params, x)[1],
               head=_head(name, has_state, projection_dim),
               head_params=_head_params(name, has_state, projection_dim))


def _forward(module, has_state, scoped):
  """{'apply', 'features', 'train_apply', 'train_features'}: Model's forward functions of the
  flax `module` (see Model), each traced inside `scoped`."""
  train_kwargs = {'train': True} if takes_train(module) else {}

  def variables(params):
    return params if has_state else {'params': params}

  @scoped
  def apply_fn(params, x):
    return module.apply(variables(params), x)

  @scoped
  def features_fn(params, x):
    return module.apply(variables(params), x, return_features=True)

  @scoped
  def train_forward(params, x, rng=None, return_features=False):
    rngs = {'dropout': rng} if rng is not None else {}
    if not has_state:
      return module.apply(variables(params), x, return_features=return_features, rngs=rngs,
                          **train_kwargs), None
    out, updates = module.apply(params, x, return_features=return_features, rngs=rngs,
                                mutable=['batch_stats'], **train_kwargs)
    return out, dict(updates)

  return {'apply': apply_fn, 'features': features_fn,
          'train_apply': lambda params, x, rng=None: train_forward(params, x, rng),
          'train_features': lambda params, x, rng=None: train_forward(params, x, rng, True)}


def _head_params(name, has_state, projection_dim):
  """Model.head_params: params -> the output layer's subtree (in the params' own layout)."""
  def head_params_fn(params):
    tree = params['params'] if has_state else params
    sub = {layer: tree[layer] for layer in _output_layer(name, tree, projection_dim)}
    return {'params': sub} if has_state else sub
  return head_params_fn


def _head(name, has_state, projection_dim):
  """Model.head: (params, z) -> logits of the output layer alone."""
  def head_fn(params, z):
    tree = params['params'] if has_state else params
    (layer,) = _output_layer(name, tree, projection_dim)
    return z @ tree[layer]['kernel'] + tree[layer]['bias']
  return head_fn


def _output_layer(name, tree, projection_dim):
  """(the name of the model's output layer,): the Dense layer whose input is the `features`
  representation. Zoo models name it 'head' or 'dense' (zoo.OUTPUT_LAYERS), a model with a
  projection head 'classifier'. A model without exactly one of these at its top level: UserError.
  """
  wanted = ('classifier',) if projection_dim else OUTPUT_LAYERS
  found = [n for n in wanted if n in tree and set(tree[n]) == {'kernel', 'bias'}]
  if len(found) != 1:
    raise UserError(f'--model={name} has no single output layer named {" or ".join(wanted)} '
                    'taking its features, so its head cannot be applied alone')
  return tuple(found)


def example_input(model, batch=1):
  """jax.ShapeDtypeStruct of a batch of `model`'s inputs: int32 token ids and masks for text
  models, float32 otherwise (for eval_shape; nothing is allocated)."""
  dtype = jnp.int32 if model.family == 'text' else jnp.float32
  return jax.ShapeDtypeStruct((batch,) + tuple(model.input_shape), dtype)


def _check_text(name, family, input_shape, vocab_size, pretrained, init):
  """UserError unless the data are token sequences exactly when the model is a text model, and
  --pretrained applies."""
  if pretrained and name != 'distilbert':
    raise UserError(f'--pretrained applies to --model=distilbert, not --model={name}')
  if family != 'text':
    if vocab_size:
      text_models = [n for n, e in registry.entries('model').items() if e.info.family == 'text']
      raise UserError(f'--model={name} does not read token sequences; for text data use one '
                      f'of {", ".join(text_models)}')
    return
  if len(input_shape) != 2 or input_shape[0] != 2 or not vocab_size:
    raise UserError(f'--model={name} needs token sequences [2, L] (ids, attention mask) of a '
                    f'text --dataset; the data has shape {tuple(input_shape)}')
  if pretrained and init != 'default':
    raise UserError(f'--init={init} and --pretrained conflict: the checkpoint is the start')


def num_params(params):
  return int(sum(np.prod(p.shape) for p in jax.tree.leaves(params)))


def flatten_names(params):
  """{'dense/kernel': array, ...}: parameters named by their flax path."""
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  return {'/'.join(str(getattr(k, 'key', k)) for k in path): np.asarray(v) for path, v in flat}

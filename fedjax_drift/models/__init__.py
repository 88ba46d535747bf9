"""Flax models and the pure functions the engine needs from them."""
import inspect
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_drift.errors import UserError, did_you_mean
from fedjax_drift.models import layers, text
from fedjax_drift.models.zoo import MODELS, OUTPUT_LAYERS, WithProjection, takes_train


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


# Options a constructor in zoo.MODELS may take, with the value that means "the model's own".
OPTIONS = {'dropout': -1.0, 'gn_groups': 0, 'gn_group_size': 0}
_OPTION_WHAT = {'dropout': 'dropout layers', 'gn_groups': 'GroupNorm layers',
                'gn_group_size': 'GroupNorm layers'}


def _options(name, ctor, **given):
  """The keyword options to pass to model `name`'s constructor.

  An option left at its OPTIONS value is not passed (the model's own choice); one given to a
  model without such layers is a UserError naming the flag, except --dropout=0 (off is off).
  """
  accepted = inspect.signature(ctor).parameters
  out = {}
  for option, value in given.items():
    if value == OPTIONS[option]:
      continue
    if option in accepted:
      out[option] = value
    elif not (option == 'dropout' and value == 0):
      raise UserError(f'--{option}={value} does not apply: --model={name} has no '
                      f'{_OPTION_WHAT[option]}')
  return out


def get(name, num_classes, input_shape, init='default', projection_dim=0, conv_impl='auto',
        projection_hidden=0, dropout=-1.0, gn_groups=0, gn_group_size=0, vocab_size=0,
        pretrained=''):
  """Builds model `name` for inputs of `input_shape` (one example, no batch axis).

  projection_dim > 0 puts a projection head before the output layer (MOON, FedGKD+;
  zoo.WithProjection); `features` then returns (logits, projection). projection_hidden is its
  hidden width (0 = the base model's feature width). conv_impl (auto, im2col, lax, onednn; see
  models/layers.py) picks how convolutions are computed; auto resolves now, for the default
  backend: oneDNN on CPU where its extension builds (else im2col), lax.conv on GPU/TPU.
  dropout (-1 = the model's rates, 0 = off, p = every rate p), gn_groups and gn_group_size
  (GroupNorm groups, or channels per group; 0 = the model's rule) are --dropout, --gn_groups
  and --gn_group_size, refused by models without such layers. Models named *_bn have
  BatchNorm: their params are {'params', 'batch_stats'}. Text models (family 'text',
  models/text.py) take int32 [2, L] inputs (token ids, attention
  mask) and need the tokenizer's `vocab_size` (Dataset.vocab_size); `pretrained`
  (--pretrained, distilbert only) is a Hugging Face checkpoint folder whose weights init puts
  in place of the random ones.
  """
  if conv_impl not in layers.CONV_IMPLS:
    raise UserError(f'--conv_impl={conv_impl} is unknown; use one of '
                    f'{", ".join(layers.CONV_IMPLS)}')
  if name not in MODELS:
    raise UserError(f'--model={name} is unknown; use one of {", ".join(MODELS)}'
                    f'{did_you_mean(name, MODELS)}')
  if init not in ('default', 'zeros'):
    raise UserError(f'--init={init} is unknown; use default or zeros')
  if projection_hidden < 0:
    raise UserError(f'--projection_hidden={projection_hidden} must be >= 0')
  ctor, family = MODELS[name]
  # Only a model with convolutions builds or loads the oneDNN extension for `auto`.
  conv_impl = layers.resolve_conv_impl(conv_impl, convolves=family == 'conv')
  if family == 'conv' and len(input_shape) != 3:
    raise UserError(f'--model={name} needs images [H, W, C]; the data has shape {input_shape}')
  text_args = _text_args(name, family, input_shape, vocab_size, pretrained, init)
  module = ctor(num_classes, **text_args,
                **_options(name, ctor, dropout=dropout, gn_groups=gn_groups,
                           gn_group_size=gn_group_size))
  has_dropout = 'dropout' in inspect.signature(ctor).parameters and dropout != 0
  if projection_dim:
    module = WithProjection(module, projection_dim, projection_hidden)
  has_state = name.endswith('_bn')
  train_kwargs = {'train': True} if takes_train(module) else {}

  def scoped(fn):  # every trace of the module sees the chosen convolution
    def wrapped(*args, **kwargs):
      with layers.conv_impl(conv_impl):
        return fn(*args, **kwargs)
    return wrapped

  @scoped
  def init_fn(key):
    dtype = jnp.int32 if family == 'text' else jnp.float32  # token ids stay integers
    variables = module.init(key, jnp.zeros((1,) + tuple(input_shape), dtype),
                            return_features=True)
    params = dict(variables) if has_state else variables['params']
    if init == 'zeros':
      params = jax.tree.map(jnp.zeros_like, params)
    if pretrained:
      params = jax.tree.map(jnp.asarray, text.load_pretrained(params, pretrained))
    return params

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

  def train_apply(params, x, rng=None):
    return train_forward(params, x, rng)

  def train_features(params, x, rng=None):
    return train_forward(params, x, rng, return_features=True)

  def head_params_fn(params):
    tree = params['params'] if has_state else params
    sub = {layer: tree[layer] for layer in _output_layer(name, tree, projection_dim)}
    return {'params': sub} if has_state else sub

  def head_fn(params, z):
    tree = params['params'] if has_state else params
    (layer,) = _output_layer(name, tree, projection_dim)
    return z @ tree[layer]['kernel'] + tree[layer]['bias']

  if gn_groups or gn_group_size:  # a grouping that does not divide fails now, not mid-run
    jax.eval_shape(init_fn, jax.random.key(0))
  return Model(name, family, init_fn, apply_fn, tuple(input_shape), features_fn, train_apply,
               has_state, conv_impl, train_features, has_dropout,
               penultimate=lambda params, x: features_fn(params, x)[1], head=head_fn,
               head_params=head_params_fn)


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


def _text_args(name, family, input_shape, vocab_size, pretrained, init):
  """The extra keyword arguments of a text model's constructor ({} for other models), after
  checking that the data are token sequences and --pretrained applies."""
  if pretrained and name != 'distilbert':
    raise UserError(f'--pretrained applies to --model=distilbert, not --model={name}')
  if family != 'text':
    if vocab_size:
      raise UserError(f'--model={name} does not read token sequences; for text data use one '
                      f'of {", ".join(n for n, (_, f) in MODELS.items() if f == "text")}')
    return {}
  if len(input_shape) != 2 or input_shape[0] != 2 or not vocab_size:
    raise UserError(f'--model={name} needs token sequences [2, L] (ids, attention mask) of a '
                    f'text --dataset; the data has shape {tuple(input_shape)}')
  if pretrained and init != 'default':
    raise UserError(f'--init={init} and --pretrained conflict: the checkpoint is the start')
  args = {'vocab_size': int(vocab_size), 'seq_len': int(input_shape[1])}
  return dict(args, pretrained=pretrained) if pretrained else args


def num_params(params):
  return int(sum(np.prod(p.shape) for p in jax.tree.leaves(params)))


def flatten_names(params):
  """{'dense/kernel': array, ...}: parameters named by their flax path."""
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  return {'/'.join(str(getattr(k, 'key', k)) for k in path): np.asarray(v) for path, v in flat}

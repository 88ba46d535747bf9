"""Flax models and the pure functions the engine needs from them."""
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_drift.errors import UserError, did_you_mean
from fedjax_drift.models import layers
from fedjax_drift.models.zoo import MODELS, WithProjection


class Model(NamedTuple):
  """What the rest of the library knows of a model: init and apply, both pure."""
  name: str
  family: str                                # 'dense' or 'conv'
  init: Callable[[jax.Array], Any]           # key -> params
  apply: Callable[[Any, jax.Array], jax.Array]  # (params, x float32) -> logits
  input_shape: tuple
  features: Callable = None  # (params, x) -> (logits, representation); the projection if any
  # Training-mode forward: (params, x) -> (logits, new model state or None). Models with
  # BatchNorm carry {'params', 'batch_stats'} as their "params" pytree; the new state holds
  # the updated batch statistics, which local training writes back after each step.
  train_apply: Callable = None
  has_state: bool = False
  conv_impl: str = 'im2col'  # how its convolutions are computed (models/layers.py)


def get(name, num_classes, input_shape, init='default', projection_dim=0, conv_impl='auto'):
  """Builds model `name` for inputs of `input_shape` (one example, no batch axis).

  projection_dim > 0 puts a projection head before the output layer (MOON, FedGKD+;
  zoo.WithProjection); `features` then returns (logits, projection).
  conv_impl (auto, im2col, lax; see models/layers.py) picks how convolutions are computed;
  auto resolves now, for the default backend: im2col on CPU, lax.conv on GPU/TPU.
  """
  if conv_impl not in layers.CONV_IMPLS:
    raise UserError(f'--conv_impl={conv_impl} is unknown; use one of '
                    f'{", ".join(layers.CONV_IMPLS)}')
  conv_impl = layers.resolve_conv_impl(conv_impl)
  if name not in MODELS:
    raise UserError(f'--model={name} is unknown; use one of {", ".join(MODELS)}'
                    f'{did_you_mean(name, MODELS)}')
  if init not in ('default', 'zeros'):
    raise UserError(f'--init={init} is unknown; use default or zeros')
  ctor, family = MODELS[name]
  if family == 'conv' and len(input_shape) != 3:
    raise UserError(f'--model={name} needs images [H, W, C]; the data has shape {input_shape}')
  module = ctor(num_classes)
  if projection_dim:
    module = WithProjection(module, projection_dim)

  has_state = name.endswith('_bn')
  if has_state and projection_dim:
    raise UserError(f'--model={name} (BatchNorm) does not combine with a projection head yet')

  def scoped(fn):  # every trace of the module sees the chosen convolution
    def wrapped(*args, **kwargs):
      with layers.conv_impl(conv_impl):
        return fn(*args, **kwargs)
    return wrapped

  @scoped
  def init_fn(key):
    variables = module.init(key, jnp.zeros((1,) + tuple(input_shape), jnp.float32),
                            return_features=True)
    params = dict(variables) if has_state else variables['params']
    if init == 'zeros':
      params = jax.tree.map(jnp.zeros_like, params)
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
  def train_apply(params, x):
    if not has_state:
      return apply_fn(params, x), None
    logits, updates = module.apply(params, x, train=True, mutable=['batch_stats'])
    return logits, dict(updates)

  return Model(name, family, init_fn, apply_fn, tuple(input_shape), features_fn, train_apply,
               has_state, conv_impl)


def num_params(params):
  return int(sum(np.prod(p.shape) for p in jax.tree.leaves(params)))


def flatten_names(params):
  """{'dense/kernel': array, ...}: parameters named by their flax path."""
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  return {'/'.join(str(getattr(k, 'key', k)) for k in path): np.asarray(v) for path, v in flat}

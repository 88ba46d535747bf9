"""Algorithms by name, and composition from parts.

`get(name, config, model, server_data)` builds a FederatedAlgorithm. Each name is a recipe of
parts (see parts.py) plus a server optimizer:

  fedavg        no parts; averaging
  slowmo        averaging with server momentum --beta (alias fedavgm)
  fedadc        embedded momentum (--fedadc_variant, --beta_local, --beta_global)
  fedadc_dm     embedded momentum + local double momentum --phi
  fedadc_plus   embedded momentum + self-confidence KD (--kd_lambda, --kd_temperature)
  fedfor        rectified first-order term (--for_alpha)
  fedgkd        ensemble distillation from the last --gkd_buffer global models (--gkd_gamma)
  fedgkd_vote   per-model distillation weighted by server validation loss (--vote_lambda)
  igfl_c        group-aware local steps; averaging with 1/K
  igfl_s        attention aggregation (--attention, --attention_similarity, ...)
  igfl          igfl_c + igfl_s

Composition flags add parts to any recipe: --local_terms=for,gkd,gkd_vote,self_kd,igfl_c adds
local terms/corrections, --aggregator=mean|attention_self|attention_global|attention_time
replaces the aggregator, and --server_momentum=beta puts SlowMo momentum on the server (not for
the fedadc family, whose server momentum is part of the method).
"""
import dataclasses

import jax

from fedjax_drift.algorithms import fedadc, fedfor, fedgkd, igfl, local, server_optimizers
from fedjax_drift.algorithms.parts import Part, compose
from fedjax_drift.errors import UserError

NAMES = ('fedavg', 'slowmo', 'fedavgm', 'fedadc', 'fedadc_dm', 'fedadc_plus', 'fedfor',
         'fedgkd', 'fedgkd_vote', 'igfl_c', 'igfl_s', 'igfl')
LOCAL_TERMS = ('for', 'gkd', 'gkd_vote', 'self_kd', 'igfl_c')
AGGREGATORS = ('mean', 'attention_self', 'attention_global', 'attention_time')

# Recipes: (local parts, default aggregator).
_RECIPES = {
    'fedavg': ((), 'mean'),
    'slowmo': ((), 'mean'),
    'fedavgm': ((), 'mean'),
    'fedadc': (('fedadc',), 'mean'),
    'fedadc_dm': (('fedadc',), 'mean'),
    'fedadc_plus': (('fedadc', 'self_kd'), 'mean'),
    'fedfor': (('for',), 'mean'),
    'fedgkd': (('gkd',), 'mean'),
    'fedgkd_vote': (('gkd_vote',), 'mean'),
    'igfl_c': (('igfl_c',), 'attention_none'),
    'igfl_s': ((), 'attention'),
    'igfl': (('igfl_c',), 'attention'),
}


def needs_validation(config):
  """Whether the server holds out a validation split (FedGKD-Vote)."""
  return config.algo == 'fedgkd_vote' or 'gkd_vote' in _split(config.local_terms)


def _split(text):
  return [t for t in (text or '').split(',') if t]


def recipe(config):
  """(local part names, aggregator name) for config.algo plus the composition flags."""
  if config.algo not in _RECIPES:
    raise UserError(f'--algo={config.algo} is unknown; use one of {", ".join(NAMES)}')
  names, aggregator = _RECIPES[config.algo]
  extra = _split(config.local_terms)
  for t in extra:
    if t not in LOCAL_TERMS:
      raise UserError(f'--local_terms: {t!r} is unknown; use a comma list of '
                      f'{", ".join(LOCAL_TERMS)}')
  names = tuple(dict.fromkeys(names + tuple(extra)))
  if aggregator == 'attention':
    aggregator = f'attention_{config.attention}'
  if config.aggregator:
    if config.aggregator not in AGGREGATORS:
      raise UserError(f'--aggregator={config.aggregator} is unknown; use one of '
                      f'{", ".join(AGGREGATORS)}')
    aggregator = config.aggregator
  return names, aggregator


def get(name, config, model, server_data=None):
  """The algorithm `name` with hyperparameters from `config` (a fedjax_drift.Config)."""
  config = dataclasses.replace(config, algo=name)
  names, aggregator = recipe(config)
  lr = config.lr
  beta_local = config.beta if config.beta_local < 0 else config.beta_local
  beta_global = config.beta if config.beta_global < 0 else config.beta_global
  fedadc_family = 'fedadc' in names

  parts = []
  for part in names:
    if part == 'fedadc':
      parts.append(fedadc.embedded_momentum(beta_local, config.fedadc_variant == 'nesterov'))
    elif part == 'self_kd':
      parts.append(fedadc.self_confidence_kd(config.kd_lambda, config.kd_temperature))
    elif part == 'for':
      parts.append(fedfor.rectified_term(config.for_alpha))
    elif part == 'gkd':
      parts.append(fedgkd.ensemble_distillation(config.gkd_gamma, config.gkd_buffer,
                                                config.kd_temperature))
    elif part == 'gkd_vote':
      if server_data is None:
        raise UserError('fedgkd_vote needs a server validation split (--vote_val_size)')
      parts.append(fedgkd.vote_distillation(config.vote_lambda, config.gkd_buffer,
                                            config.kd_temperature, model.apply,
                                            server_data['x_val'], server_data['y_val']))
    elif part == 'igfl_c':
      parts.append(igfl.group_correction(config.igfl_group))
  if aggregator.startswith('attention_') and aggregator != 'attention_none':
    kind = aggregator[len('attention_'):]
    parts.append(igfl.attention(kind, config.attention_similarity, config.attention_temperature,
                                'igfl_c' if 'igfl_c' in names else None))
  elif aggregator == 'attention_none':  # IGFL-C alone averages with the paper's 1/K
    parts.append(Part('uniform_mean', aggregate=lambda d, w, c, b: _uniform_mean(d)))

  if fedadc_family:
    if config.server_momentum:
      raise UserError(f'--server_momentum does not combine with --algo={config.algo}: its '
                      'server momentum is --beta_global')
    if config.algo == 'fedadc_dm':
      beta_global = beta_local  # Algorithm 4: m_{t+1} = Delta_bar
    server_opt = fedadc.server_momentum(beta_local, beta_global, lr, config.server_lr)
  elif config.algo in ('slowmo', 'fedavgm'):
    if config.server_momentum:
      raise UserError(f'--algo={config.algo} takes its momentum from --beta, not '
                      '--server_momentum')
    server_opt = server_optimizers.slowmo(config.beta, lr, config.server_lr)
  elif config.server_momentum:
    server_opt = server_optimizers.slowmo(config.server_momentum, lr, config.server_lr)
  else:
    server_opt = server_optimizers.averaging(config.server_lr)

  if config.algo == 'fedadc_dm':
    local_opt = fedadc.double_momentum_optimizer(lr, config.phi, config.weight_decay)
  else:
    local_opt = local.sgd(lr, config.local_momentum, config.weight_decay)
  return compose(config.algo, model.apply, lr, local_opt, server_opt, parts,
                 config.clients_per_round)


def _uniform_mean(deltas):
  return jax.tree.map(lambda d: d.mean(axis=0), deltas)

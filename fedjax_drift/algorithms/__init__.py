"""Algorithms by name, and composition from parts.

`get(name, config, model, server_data)` builds a FederatedAlgorithm. Each name is a recipe:
local parts (see parts.py), an aggregator, a server optimizer, and the paper's aggregation
weighting (used when --weighting=auto).

Composition flags extend any recipe: --local_terms adds local parts (LOCAL_TERMS),
--aggregator replaces the aggregator (AGGREGATORS), --server_optimizer replaces the server
optimizer and --server_momentum puts SlowMo momentum on an averaging server.
"""
import dataclasses
from typing import NamedTuple

import jax

from fedjax_drift.algorithms import (fedadc, fedbn, fedcurv, feddistill, feddyn, fedfor,
                                     fedgen, fedgkd, fedntd, fedprox,
                                     fedrs, igfl, local, local_only, moon, scaffold,
                                     server_optimizers)
from fedjax_drift.algorithms.parts import compose
from fedjax_drift import models
from fedjax_drift.errors import UserError, did_you_mean


class Recipe(NamedTuple):
  parts: tuple = ()
  aggregator: str = 'mean'
  server: str = 'avg'          # avg, slowmo, fedadc, adam, yogi, adagrad
  weighting: str = 'examples'  # the paper's p_i: examples (n_i / n) or uniform (1/|S|)
  weighting_source: str = ''   # where the paper sets p_i
  summary: str = ''
  projection: bool = False     # the model gets a projection head before its output layer


_MCMAHAN = 'McMahan et al. 2017, FedAvg: n_k/n'
# The baselines, as the papers that compare against them run them.
_INHERITS = 'inherits FedAvg\'s n_k/n averaging'
_REDDI = 'Reddi et al. 2021, Alg. 2: (1/|S|) sum'

RECIPES = {
    'fedavg': Recipe(weighting_source=_MCMAHAN,
                     summary='local SGD, weighted mean (McMahan et al.)'),
    'slowmo': Recipe(server='slowmo', weighting='uniform',
                     weighting_source='FedADC paper (journal), Alg. 2 l.12',
                     summary='server momentum --beta (SlowMo)'),
    'fedavgm': Recipe(server='slowmo', weighting='uniform',
                      weighting_source='FedADC paper (journal), Alg. 2 l.12',
                      summary='alias of slowmo'),
    'fedadc': Recipe(('fedadc',), server='fedadc', weighting='uniform',
                     weighting_source='FedADC paper (journal), Alg. 3 l.16',
                     summary='embedded server momentum'),
    'fedadc_dm': Recipe(('fedadc',), server='fedadc', weighting='uniform',
                        weighting_source='FedADC paper (journal), Alg. 4 (as Alg. 3 l.16)',
                        summary='FedADC + local double momentum'),
    'fedadc_plus': Recipe(('fedadc', 'self_kd'), server='fedadc', weighting='uniform',
                          weighting_source='FedADC paper (journal), Alg. 3 l.16',
                          summary='FedADC + self-confidence distillation'),
    'fedfor': Recipe(('for',), weighting='uniform',
                     weighting_source='FedFOR paper, Alg. 1: W^t = (1/K) sum_k W_k^t',
                     summary='rectified first-order term (--for_alpha, --for_scale)'),
    'fedgkd': Recipe(('gkd',), weighting_source='FedGKD paper, Alg. 1 l.14',
                     summary='distillation from the buffered global models'),
    'fedgkd_vote': Recipe(('gkd_vote',), weighting_source='FedGKD paper, Alg. 1 l.14',
                          summary='per-model distillation, validation-weighted'),
    'fedgkd_plus': Recipe(('gkd',), weighting_source='FedGKD paper, Alg. 1 l.14',
                          summary='FedGKD with a projection head before the output layer '
                          '(FedGKD paper, §5.1 "FedGKD+")', projection=True),
    'feddistill_plus': Recipe(('feddistill',),
                              weighting_source='FedGen code, serverbase.aggregate_parameters: '
                              'n_k/n over the selected users',
                              summary='per-label logit distillation + parameter averaging '
                              '(FedGen paper, §5 "FedDistill+")'),
    'fedgen': Recipe(('fedgen',),
                     weighting_source='FedGen code, serverbase.aggregate_parameters: n_k/n '
                     'over the selected users',
                     summary='server-side conditional generator of penultimate features, '
                     'distilled into the clients\' heads (Zhu et al. 2021, FedGen)'),
    'igfl_c': Recipe(('igfl_c',), weighting='uniform',
                     weighting_source='IGFL paper, Alg. 3 l.1, l.7',
                     summary='group-aware local steps'),
    'igfl_s': Recipe((), 'attention', weighting='uniform',
                     weighting_source='IGFL paper, Alg. 3 l.1, l.7 (attention: §4)',
                     summary='attention aggregation'),
    'igfl': Recipe(('igfl_c',), 'attention', weighting='uniform',
                   weighting_source='IGFL paper, Alg. 3 l.1, l.7 (attention: §4)',
                   summary='IGFL-C + IGFL-S'),
    'fedprox': Recipe(('prox',),
                      weighting_source=_INHERITS + ' (Li et al. 2020 sample by n_k and '
                      'average 1/K: the same in expectation)',
                      summary='proximal term (--prox_mu)'),
    'scaffold': Recipe(('scaffold',), weighting='uniform',
                       weighting_source='Karimireddy et al. 2020, Alg. 1: (1/|S|) sum',
                       summary='control variates, option II'),
    'feddyn': Recipe(('dyn',), weighting='uniform',
                     weighting_source='Acar et al. 2021, Alg. 1: (1/|P_t|) sum',
                     summary='dynamic regularisation'),
    'fedcurv': Recipe(('curv',), weighting_source=_INHERITS,
                      summary='EWC penalty with client Fishers'),
    'fedcurv_stateless': Recipe(('curv_stateless',),
                                weighting_source=_INHERITS,
                                summary='EWC penalty with the previous cohort\'s Fishers '
                                '(FedFOR paper, eq. 9, Table 2)'),
    'fedntd': Recipe(('ntd',), weighting_source=_INHERITS,
                     summary='not-true distillation'),
    'fedrs': Recipe(('rs',), weighting_source=_INHERITS,
                    summary='restricted softmax'),
    'moon': Recipe(('moon',), weighting_source='Li et al. 2021 (MOON), Alg. 1: |D^i|/|D|',
                   summary='model-contrastive term on a projection head', projection=True),
    'fedbn': Recipe(('fedbn',), weighting_source=_INHERITS,
                    summary='BatchNorm layers stay local (use a *_bn model)'),
    'fedadam': Recipe(server='adam', weighting='uniform', weighting_source=_REDDI,
                      summary='adaptive server (Adam)'),
    'fedyogi': Recipe(server='yogi', weighting='uniform', weighting_source=_REDDI,
                      summary='adaptive server (Yogi)'),
    'fedadagrad': Recipe(server='adagrad', weighting='uniform', weighting_source=_REDDI,
                         summary='adaptive server (Adagrad)'),
    'local_only': Recipe(weighting_source='none: nothing is aggregated',
                         summary='each client trains alone on its own data, no communication '
                         '(needs --test_partition=like_train)'),
}
NAMES = tuple(RECIPES)
LOCAL_TERMS = ('fedadc', 'self_kd', 'for', 'gkd', 'gkd_vote', 'igfl_c', 'prox', 'scaffold',
               'dyn', 'curv', 'curv_stateless', 'ntd', 'rs', 'moon', 'fedbn', 'feddistill',
               'fedgen')
AGGREGATORS = ('mean',) + tuple(f'attention_{kind}' for kind in igfl.ATTENTIONS)
SERVER_OPTIMIZERS = ('avg', 'slowmo', 'adam', 'yogi', 'adagrad')


def _split(text):
  return [t for t in (text or '').split(',') if t]


def recipe(config) -> Recipe:
  """The recipe for config.algo with the composition flags applied; validates them."""
  if config.algo not in RECIPES:
    raise UserError(f'--algo={config.algo} is unknown; use one of {", ".join(NAMES)}'
                    f'{did_you_mean(config.algo, NAMES)}')
  base = RECIPES[config.algo]
  extra = _split(config.local_terms)
  for t in extra:
    if t not in LOCAL_TERMS:
      raise UserError(f'--local_terms: {t!r} is unknown; use a comma list of '
                      f'{", ".join(LOCAL_TERMS)}')
  parts = tuple(dict.fromkeys(base.parts + tuple(extra)))
  aggregator = base.aggregator
  if aggregator == 'attention':
    aggregator = f'attention_{config.attention}'
  if config.aggregator:
    if config.aggregator not in AGGREGATORS:
      raise UserError(f'--aggregator={config.aggregator} is unknown; use one of '
                      f'{", ".join(AGGREGATORS)}')
    aggregator = config.aggregator
  server = base.server
  if 'fedadc' in parts:
    if config.server_optimizer or config.server_momentum:
      raise UserError('--server_optimizer/--server_momentum do not combine with FedADC, whose '
                      'server momentum is part of the method (--beta_global)')
    server = 'fedadc'
  if config.server_optimizer:
    if config.server_optimizer not in SERVER_OPTIMIZERS:
      raise UserError(f'--server_optimizer={config.server_optimizer} is unknown; use one of '
                      f'{", ".join(SERVER_OPTIMIZERS)}')
    server = config.server_optimizer
  if config.algo == local_only.NAME:
    given = [f for f in ('local_terms', 'aggregator', 'server_optimizer', 'server_momentum')
             if getattr(config, f)]
    if given:
      raise UserError(f'--{given[0]} does not combine with --algo=local_only, which has no '
                      'server and no federated terms')
  if config.server_momentum:
    if server != 'avg':
      raise UserError(f'--server_momentum applies to an averaging server, not {server!r} '
                      '(slowmo takes --beta)')
    server = 'slowmo'
  return base._replace(parts=parts, aggregator=aggregator, server=server)


def weighting(config) -> str:
  """The aggregation weighting: --weighting, or the paper's own when it is 'auto'."""
  return recipe(config).weighting if config.weighting == 'auto' else config.weighting


def weighting_source(config) -> str:
  """Where the weighting of `weighting(config)` comes from, for the run summary."""
  if config.weighting != 'auto':
    return f'--weighting={config.weighting} (set by flag)'
  return RECIPES[config.algo].weighting_source if config.algo in RECIPES else ''


def projection_dim(config):
  """The projection head width (MOON, FedGKD+), or 0 when the recipe has none."""
  r = recipe(config)
  return config.moon_projection_dim if r.projection or 'moon' in r.parts else 0


def needs_validation(config):
  """Whether the server holds out a validation split (FedGKD-Vote)."""
  return 'gkd_vote' in recipe(config).parts


def _or_beta(value, beta):
  """--beta_local / --beta_global: -1 (a Python number) means 'the same as --beta'."""
  return beta if isinstance(value, (int, float)) and value < 0 else value


def _part(name, c, model, server_data, parts):
  beta_local = _or_beta(c.beta_local, c.beta)
  if name == 'fedadc':
    return fedadc.embedded_momentum(beta_local, c.fedadc_variant == 'nesterov')
  if name == 'self_kd':
    return fedadc.self_confidence_kd(c.kd_lambda, c.kd_temperature, c.kd_tau2)
  if name == 'for':
    return fedfor.rectified_term(c.for_alpha, c.for_scale)
  if name == 'gkd':
    return fedgkd.ensemble_distillation(c.gkd_gamma, c.gkd_buffer, c.kd_temperature,
                                        c.gkd_loss, c.kd_tau2, c.gkd_buffer_start)
  if name == 'gkd_vote':
    if server_data is None:
      raise UserError('FedGKD-Vote needs a server validation split (--vote_val_size)')
    return fedgkd.vote_distillation(c.vote_lambda, c.gkd_buffer, c.kd_temperature,
                                    model.apply, server_data['x_val'], server_data['y_val'],
                                    c.gkd_loss, c.kd_tau2, c.gkd_buffer_start)
  if name == 'feddistill':
    return feddistill.label_distillation(c.distill_lambda, c.kd_temperature,
                                         _num_classes(model), c.kd_tau2)
  if name == 'fedgen':
    return fedgen.generator_distillation(
        model, c.fedgen_alpha, c.fedgen_beta, c.fedgen_decay, c.fedgen_noise_dim,
        c.fedgen_hidden, c.fedgen_steps, c.fedgen_lr, c.fedgen_batch or c.batch_size or 32,
        c.fedgen_client_batch, c.fedgen_weight_decay, c.fedgen_diversity,
        teacher=c.fedgen_teacher)
  if name == 'igfl_c':
    return igfl.group_correction(c.igfl_group)
  if name == 'prox':
    return fedprox.proximal_term(c.prox_mu)
  if name == 'scaffold':
    return scaffold.control_variates()
  if name == 'dyn':
    return feddyn.dynamic_regularizer(c.dyn_alpha)
  if name == 'curv':
    return fedcurv.ewc_penalty(c.curv_lambda)
  if name == 'curv_stateless':
    return fedcurv.stateless_ewc_penalty(c.curv_lambda)
  if name == 'ntd':
    return fedntd.not_true_distillation(c.ntd_beta, c.ntd_temperature, c.kd_tau2)
  if name == 'rs':
    return fedrs.restricted_softmax(c.rs_alpha)
  if name == 'moon':
    # BatchNorm models: the local z in training mode (batch statistics), the others frozen.
    train_z = (lambda p, x: model.train_features(p, x)[0]) if model.has_state else None
    return moon.contrastive_term(c.moon_mu, c.moon_temperature, model.features, train_z)
  if name == 'fedbn':
    fedbn.check_has_norms(model)
    return fedbn.local_norms()
  if name.startswith('attention_'):
    return igfl.attention(name[len('attention_'):], c.attention_similarity,
                          c.attention_temperature, 'igfl_c' if 'igfl_c' in parts else None)
  raise AssertionError(name)


def _num_classes(model):
  """C, the width of the model's logits (from shapes only; nothing is computed)."""
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0))
  return int(jax.eval_shape(model.apply, params, models.example_input(model)).shape[-1])


def _server_optimizer(server, c):
  beta_local, beta_global = _or_beta(c.beta_local, c.beta), _or_beta(c.beta_global, c.beta)
  if server == 'fedadc':
    if c.algo == 'fedadc_dm':
      beta_global = beta_local  # Algorithm 4: m_{t+1} = Delta_bar
    return fedadc.server_momentum(beta_local, beta_global, c.lr, c.server_lr)
  if server == 'slowmo':
    beta = c.beta if local.is_off(c.server_momentum) else c.server_momentum
    return server_optimizers.slowmo(beta, c.lr, c.server_lr)
  if server in ('adam', 'yogi', 'adagrad'):
    return server_optimizers.adaptive(server, c.server_lr, c.server_beta1, c.server_beta2,
                                      c.server_tau)
  return server_optimizers.averaging(c.server_lr)


def get(name, config, model, server_data=None):
  """The algorithm `name` with hyperparameters from `config` (a fedjax_drift.Config)."""
  config = dataclasses.replace(config, algo=name)
  r = recipe(config)
  parts = [_part(p, config, model, server_data, r.parts) for p in r.parts]
  if r.aggregator != 'mean':
    parts.append(_part(r.aggregator, config, model, server_data, r.parts))
  # The training-mode forward only where it differs from apply: BatchNorm, dropout.
  train_apply = (model.train_apply if model.has_state or getattr(model, 'has_dropout', False)
                 else None)
  if name == local_only.NAME:
    return local_only.local_only(model.apply, config.lr, local_optimizer(config), train_apply,
                                 config.clip_grad_norm)
  return compose(config.algo, model.apply, config.lr, local_optimizer(config),
                 _server_optimizer(r.server, config), parts, config.clients_per_round,
                 train_apply, config.clip_grad_norm)


def local_optimizer(config):
  """The clients' optax optimizer: fedadc_dm's own, Adam, or SGD (momentum, L2)."""
  if config.algo == 'fedadc_dm':
    return fedadc.double_momentum_optimizer(config.lr, config.phi, config.weight_decay)
  if config.local_optimizer == 'adam':
    return local.adam(config.lr, config.adam_b1, config.adam_b2, config.adam_eps,
                      config.weight_decay)
  return local.sgd(config.lr, config.local_momentum, config.weight_decay)

"""Algorithms by name, and composition from parts.

`get(name, config, model, server_data)` builds a FederatedAlgorithm. Each name is a recipe
(recipes.py), registered by its paper's file: local parts (see parts.py), an aggregator, a
server optimizer, and the paper's aggregation weighting (used when --weighting=auto). Every
part, aggregator and optimizer registers once beside its code (fedjax_drift/registry.py), with
the Config fields it reads; this module only looks them up.

Composition flags extend any recipe: --local_terms adds local parts (registry kind 'part'),
--aggregator replaces the aggregator ('aggregator'), --server_optimizer replaces the server
optimizer ('server') and --server_momentum puts SlowMo momentum on an averaging server. The
lists of names are the registry's, read when asked (`names`, registry.names), so a method
registered after import is among them.
"""
import dataclasses

import optax

from fedjax_drift import registry
from fedjax_drift.errors import UserError
# The families, in --list order; importing each registers its recipes and parts.
from fedjax_drift.algorithms import (server_optimizers, local, fedadc, fedfor, fedgkd,
                                     feddistill, fedgen, igfl, fedprox, scaffold, feddyn,
                                     fedcurv, fedntd, fedrs, moon, fedbn, local_only, ditto,
                                     fedrep, pfedme, apfl, fednova)
from fedjax_drift.algorithms import robust, compression, dp  # aggregators, uploads, privacy
from fedjax_drift.algorithms.parts import PartNeeds, compose  # parts registers 'mean'
from fedjax_drift.algorithms import recipes
from fedjax_drift.algorithms.recipes import Recipe

# The projection head (MOON, FedGKD+) is part of the model: these fields size it.
PROJECTION_READS = ('moon_projection_dim', 'projection_hidden')


def names() -> tuple:
  """The --algo names registered now, in --list order (a method a script registers after
  import included)."""
  return registry.names('algorithm')


def _split(text):
  return [t for t in (text or '').split(',') if t]


def recipe(config) -> Recipe:
  """The recipe for config.algo with the composition flags applied; validates them."""
  base = recipes.get(config.algo)
  extra = _split(config.local_terms)
  for t in extra:
    if registry.find('part', t) is None:
      raise UserError(f'--local_terms: {t!r} is unknown; use a comma list of '
                      f'{", ".join(registry.names("part"))}')
  parts = tuple(dict.fromkeys(base.parts + tuple(extra)))
  aggregator = base.aggregator
  if base.aggregator_flag:  # a flag of the recipe's own picks it (IGFL's --attention)
    aggregator = f'{aggregator}_{getattr(config, base.aggregator_flag)}'
  if config.aggregator:
    registry.get('aggregator', config.aggregator)  # a one-line error naming the choices
    aggregator = config.aggregator
  server = base.server
  for needs in _needs(parts):
    if needs.server:  # the part brings its own server (FedADC's momentum)
      if config.server_optimizer or config.server_momentum:
        raise UserError('--server_optimizer/--server_momentum do not combine with '
                        f'{needs.server_note}')
      server = base.server if base.server in needs.servers else needs.server
  if config.server_optimizer:
    if config.server_optimizer not in registry.names('server', selectable=True):
      raise UserError(f'--server_optimizer={config.server_optimizer} is unknown; use one of '
                      f'{", ".join(registry.names("server", selectable=True))}')
    server = config.server_optimizer
  if not base.federated:
    given = [f for f in ('local_terms', 'aggregator', 'server_optimizer', 'server_momentum')
             if getattr(config, f)]
    if given:
      raise UserError(f'--{given[0]} does not combine with --algo={config.algo}, which has no '
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
  entry = registry.find('algorithm', config.algo)
  return entry.info.weighting_source if entry is not None else ''


def _needs(parts):
  """The PartNeeds of the registered parts named `parts` (PartNeeds() for one with none)."""
  return [registry.get('part', p).info or PartNeeds() for p in parts]


def projection_dim(config):
  """The projection head width (--moon_projection_dim) when the recipe or one of its parts
  asks for a head (MOON, FedGKD+), else 0."""
  r = recipe(config)
  wants = r.projection or any(n.projection for n in _needs(r.parts))
  return config.moon_projection_dim if wants else 0


def server_validation(config) -> str:
  """The Config field that sizes the server validation split a part of the run reads
  (FedGKD-Vote's 'vote_val_size'), or '' when no part reads one."""
  return next((n.validation_size for n in _needs(recipe(config).parts) if n.validation_size),
              '')


def train_apply(model):
  """The model's training-mode forward where it differs from apply (BatchNorm, dropout), or
  None: local training then uses apply."""
  return (model.train_apply if model.has_state or getattr(model, 'has_dropout', False)
          else None)


def get(name, config, model, server_data=None):
  """The algorithm `name` with hyperparameters from `config` (a fedjax_drift.Config): each
  registered component of its recipe built from the values it declares (registry.build)."""
  config = dataclasses.replace(config, algo=name)
  r = recipe(config)
  context = dict(model=model, server_data=server_data, parts=r.parts,
                 weighting=weighting(config))  # DP-FedAvg's fixed denominator needs uniform
  parts = [registry.build('part', p, config, **context) for p in r.parts]
  aggregator = registry.build('aggregator', r.aggregator, config, **context)
  if aggregator is not None:  # None: compose's own weighted mean
    parts.append(aggregator)
  algo = compose(config.algo, model.apply, config.lr, local_optimizer(config),
                 registry.build('server', r.server, config), parts, config.clients_per_round,
                 train_apply(model), config.clip_grad_norm)
  if registry.get('algorithm', name).build is None:
    return algo
  return registry.build('algorithm', name, config, **method_context(config, model, algo))


def method_context(config, model, algo):
  """What an algorithm entry's build receives besides its values: the recipe's composed
  `algo`, the `model`, the recipe's `parts`, and `trainer(parts, optimizer=None)`, which
  composes the same local training (local optimizer, clipping, training-mode forward) with
  other parts and no server: a FederatedAlgorithm whose client_update is a second local run
  (Ditto's personal model); and for methods with a local loop of their own (pFedMe, APFL,
  local_only) the task `objective` (local.task_objective), the local `optimizer`, `clip`
  (None or the --clip_grad_norm clipping) and `train_apply` (the training-mode forward, or
  None: apply)."""
  forward = train_apply(model)

  def trainer(parts, optimizer=None):
    return compose(config.algo, model.apply, config.lr, optimizer or local_optimizer(config),
                   optax.set_to_zero(), parts, config.clients_per_round, forward,
                   config.clip_grad_norm)

  clip = (None if local.is_off(config.clip_grad_norm)
          else local.clip_by_global_norm(config.clip_grad_norm))
  return dict(algo=algo, model=model, parts=recipe(config).parts, trainer=trainer,
              objective=local.task_objective(model.apply, forward),
              optimizer=local_optimizer(config), clip=clip, train_apply=forward)


def local_optimizer_name(config) -> str:
  """The registered local optimizer the run uses: its recipe's own (fedadc_dm), else
  --local_optimizer."""
  return recipes.get(config.algo).local_optimizer or config.local_optimizer


def local_optimizer(config):
  """The clients' optax optimizer: fedadc_dm's own, Adam, or SGD (momentum, L2)."""
  return registry.build('local_optimizer', local_optimizer_name(config), config)

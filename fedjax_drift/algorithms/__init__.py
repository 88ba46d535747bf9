"""Algorithms by name: `get(name, config, model)` builds a FederatedAlgorithm."""
from fedjax_drift.algorithms import local
from fedjax_drift.algorithms.fedavg import fedavg
from fedjax_drift.errors import UserError

NAMES = ('fedavg',)


def get(name, config, model):
  """The algorithm `name` with hyperparameters from `config` (a fedjax_drift.Config)."""
  local_opt = local.sgd(config.lr, config.local_momentum, config.weight_decay)
  common = dict(apply_fn=model.apply, lr=config.lr, local_optimizer=local_opt,
                cohort_size=config.clients_per_round)
  if name == 'fedavg':
    return fedavg(server_lr=config.server_lr, **common)
  raise UserError(f'--algo={name} is unknown; use one of {", ".join(NAMES)}')

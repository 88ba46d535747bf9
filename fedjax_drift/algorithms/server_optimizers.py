"""Server optimizers: optax transformations applied to the aggregated update (state.py's sign).

SlowMo / FedAvgM as FedADC's Algorithm 2 (FedADC paper); FedAdam, FedYogi, FedAdagrad as
Reddi et al., "Adaptive Federated Optimization" (ICLR 2021), Algorithm 2.

The pseudo-gradient is sum_i p_i delta_i with delta_i = theta_t - theta_i (a descent
direction), so `optax.sgd(server_lr)` gives FedAvg and momentum variants are ordinary optax
chains.
"""
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from fedjax_drift import registry
from fedjax_drift.algorithms.local import is_off
from fedjax_drift.algorithms.recipes import MCMAHAN, REDDI, Recipe, algorithm


def averaging(server_lr=1.0):
  """FedAvg's server: theta <- theta - server_lr * sum p_i delta_i."""
  return optax.sgd(server_lr)


def slowmo(beta, lr, server_lr=1.0):
  """SlowMo / FedAvgM (FedADC paper, Algorithm 2).

      g_bar = (1/eta) sum p_i delta_i;  m <- beta m + g_bar;  theta <- theta - alpha eta m
  """
  return optax.chain(optax.scale(1.0 / lr), optax.trace(decay=beta),
                     optax.scale(-server_lr * lr))


class AdaptiveState(NamedTuple):
  m: optax.Updates
  v: optax.Updates


def adaptive(kind, lr, beta1=0.9, beta2=0.99, tau=1e-3):
  """FedAdagrad / FedYogi / FedAdam (Reddi et al., 2021, Algorithm 2), no bias correction.

  With g the pseudo-gradient (= -Delta_t of the paper):
      m <- beta1 m + (1 - beta1) g
      v <- v + g^2                                   (adagrad)
      v <- v - (1 - beta2) g^2 sign(v - g^2)         (yogi)
      v <- beta2 v + (1 - beta2) g^2                 (adam)
      theta <- theta - lr m / (sqrt(v) + tau)
  with m_{-1} = 0 and v_{-1} = tau^2 (the paper asks v_{-1} >= tau^2).
  """
  if kind not in ('adagrad', 'yogi', 'adam'):
    raise ValueError(f'unknown adaptive server optimizer {kind}')

  def init(params):
    return AdaptiveState(jax.tree.map(jnp.zeros_like, params),
                         jax.tree.map(lambda p: jnp.full_like(p, tau * tau), params))

  def update(g, state, params=None):
    del params
    m = jax.tree.map(lambda m_, g_: beta1 * m_ + (1 - beta1) * g_, state.m, g)
    if kind == 'adagrad':
      v = jax.tree.map(lambda v_, g_: v_ + g_ * g_, state.v, g)
    elif kind == 'yogi':
      v = jax.tree.map(lambda v_, g_: v_ - (1 - beta2) * g_ * g_ * jnp.sign(v_ - g_ * g_),
                       state.v, g)
    else:
      v = jax.tree.map(lambda v_, g_: beta2 * v_ + (1 - beta2) * g_ * g_, state.v, g)
    updates = jax.tree.map(lambda m_, v_: -lr * m_ / (jnp.sqrt(v_) + tau), m, v)
    return updates, AdaptiveState(m, v)

  return optax.GradientTransformation(init, update)


# --- Registration -----------------------------------------------------------------------------
# Every server optimizer reads --server_lr (and --lr, SlowMo's and FedADC's step), as every run.

@registry.registers('server', 'avg', 'theta <- theta - server_lr * (weighted mean of the deltas)')
def _avg(v):
  return averaging(v.server_lr)


@registry.registers('server', 'slowmo', 'SlowMo server momentum --beta (or --server_momentum, '
                    'which replaces it)', reads=('beta',))
def _slowmo(v):
  beta = v.beta if is_off(v.server_momentum) else v.server_momentum
  return slowmo(beta, v.lr, v.server_lr)


for _kind, _reads in (('adam', ('server_beta1', 'server_beta2', 'server_tau')),
                      ('yogi', ('server_beta1', 'server_beta2', 'server_tau')),
                      # v <- v + g^2: no beta2 (Reddi et al., Alg. 2)
                      ('adagrad', ('server_beta1', 'server_tau'))):
  registry.register('server', _kind, f'adaptive server optimizer ({_kind.capitalize()}; '
                    'Reddi et al. 2021)', reads=_reads,
                    build=lambda v, kind=_kind: adaptive(
                        kind, v.server_lr, v.server_beta1,
                        v.server_beta2 if kind != 'adagrad' else 0.99, v.server_tau))

algorithm('fedavg', Recipe(weighting_source=MCMAHAN,
                           summary='local SGD, weighted mean (McMahan et al.)',
                           masks_cohort=True))
for _name, _summary in (('slowmo', 'server momentum --beta (SlowMo)'),
                        ('fedavgm', 'alias of slowmo')):
  algorithm(_name, Recipe(server='slowmo', weighting='uniform',
                          weighting_source='FedADC paper (journal), Alg. 2 l.12',
                          summary=_summary))
for _kind in ('adam', 'yogi', 'adagrad'):
  algorithm(f'fed{_kind}', Recipe(server=_kind, weighting='uniform', weighting_source=REDDI,
                                  summary=f'adaptive server ({_kind.capitalize()})'))

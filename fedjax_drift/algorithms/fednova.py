"""FedNova: normalised averaging for clients that run different numbers of local steps.

Paper: J. Wang, Q. Liu, H. Liang, G. Joshi and H. V. Poor, "Tackling the Objective
Inconsistency Problem in Heterogeneous Federated Optimization" (NeurIPS 2020), eqs. 6-7 and
§5 (local momentum):

    d_i = delta_i / ||a_i||_1                       (client i's normalised update)
    tau_eff = sum_i p_i ||a_i||_1
    theta^{t+1} = theta^t - tau_eff sum_i p_i d_i   = theta^t - sum_i (p_i tau_eff / ||a_i||_1) delta_i

With local SGD ||a_i||_1 = tau_i, the client's step count this round (H_i, fewer for a
straggler: --straggler_frac); with heavy-ball momentum rho (--local_momentum),
||a_i||_1 = (tau_i - rho (1 - rho^tau_i) / (1 - rho)) / (1 - rho). The engine sums the
clients' deltas with the factors p_i tau_eff / ||a_i||_1 (FederatedAlgorithm.
aggregation_weights) as they finish, so no [K, P] stack is kept; the server optimizer then
applies the sum (--server_lr scales it). When every reporting client ran the same number of
steps the factors are p_i themselves, so FedNova is then FedAvg bit for bit. A client that
dropped out (--dropout_prob) has p_i = 0 and no factor.
"""
import jax.numpy as jnp

from fedjax_drift.algorithms import local
from fedjax_drift.algorithms.recipes import MCMAHAN, Recipe, algorithm
from fedjax_drift.errors import UserError

NAME = 'fednova'


def a_norm(steps, momentum=0.0):
  """||a_i||_1 for tau_i = `steps` local steps of SGD with heavy-ball `momentum` rho."""
  tau = steps.astype(jnp.float32)
  if local.is_off(momentum):
    return tau
  return (tau - momentum * (1 - momentum ** tau) / (1 - momentum)) / (1 - momentum)


def normalized_weights(momentum=0.0):
  """(weights p [K], steps tau [K]) -> the factors p_i tau_eff / ||a_i||_1 of the deltas."""

  def aggregation_weights(weights, steps):
    a = a_norm(steps, momentum)
    tau_eff = jnp.sum(weights * a)
    factors = jnp.where(a > 0, weights * tau_eff / jnp.maximum(a, 1e-30), 0.0)
    reporting = weights > 0
    equal = jnp.all(~reporting | (steps == jnp.max(jnp.where(reporting, steps, 0))))
    return jnp.where(equal, weights, factors)

  return aggregation_weights


# --- Registration -----------------------------------------------------------------------------
def _build(v, algo, parts, **_):
  if v.local_optimizer != 'sgd':
    raise UserError(f'--algo=fednova normalises by local SGD\'s step coefficients; '
                    f'--local_optimizer={v.local_optimizer} has others (use sgd)')
  if parts:
    raise UserError(f'--local_terms={",".join(parts)}: FedNova\'s normalisation here is for '
                    'plain local SGD (with --local_momentum); other local objectives have other '
                    'coefficients')
  return algo._replace(aggregation_weights=normalized_weights(v.local_momentum))


algorithm(NAME, Recipe(weighting_source=MCMAHAN + ' (Wang et al. 2020: p_i = n_i / n)',
                       summary='normalised averaging of clients with unequal local steps '
                       '(stragglers)'),
          reads=('local_momentum',), build=_build)

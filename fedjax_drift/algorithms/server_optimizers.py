"""Server optimizers: optax transformations applied to the aggregated update (state.py's sign).

The pseudo-gradient is sum_i p_i delta_i with delta_i = theta_t - theta_i (a descent
direction), so `optax.sgd(server_lr)` gives FedAvg and momentum variants are ordinary optax
chains.
"""
import optax


def averaging(server_lr=1.0):
  """FedAvg's server: theta <- theta - server_lr * sum p_i delta_i."""
  return optax.sgd(server_lr)


def slowmo(beta, lr, server_lr=1.0):
  """SlowMo / FedAvgM (FedADC paper, Algorithm 2).

      g_bar = (1/eta) sum p_i delta_i;  m <- beta m + g_bar;  theta <- theta - alpha eta m
  """
  return optax.chain(optax.scale(1.0 / lr), optax.trace(decay=beta),
                     optax.scale(-server_lr * lr))

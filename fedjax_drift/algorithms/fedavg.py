"""FedAvg: local SGD, then the weighted mean of the local models.

Paper: McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized
Data" (AISTATS 2017), Algorithm 1 (FederatedAveraging; weights n_k/n).

    client:  theta <- theta - eta * g                        for H_i steps
    server:  theta_{t+1} = theta_t - server_lr * sum_i p_i delta_i
             (= sum_i p_i theta_i^H for server_lr = 1)
"""
import optax

from fedjax_drift.algorithms.parts import compose


def fedavg(apply_fn, lr, local_optimizer, server_lr=1.0, cohort_size=1, parts=()):
  return compose('fedavg', apply_fn, lr, local_optimizer, optax.sgd(server_lr), parts,
                 cohort_size)

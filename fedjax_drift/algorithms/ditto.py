"""Ditto: a personal model per client, pulled towards the global one; the global model is FedAvg.

Paper: T. Li, S. Hu, A. Beirami and V. Smith, "Ditto: Fair and Robust Federated Learning
Through Personalization" (ICML 2021), Algorithm 1 and eq. 2:

    client k in S_t:  w_k <- local SGD on F_k from w^t                  (FedAvg's update)
                      v_k <- v_k - eta (grad F_k(v_k) + lambda (v_k - w^t))   for the same H_k
                                                                        steps and minibatches
    server:           w^{t+1} = FedAvg of the w_k                       (the recipe's server)

v_k starts at the initial model w^0 and is per-client state stacked [N, ...] (like SCAFFOLD's
c_i); it changes only in the rounds that sample client k. The global part is the recipe's
composed algorithm untouched (--local_terms, --aggregator and --server_optimizer apply to it),
so the global model is FedAvg's exactly. The personal steps use the same local optimizer,
clipping and minibatch sequence as the global ones (the paper's code draws one batch for both).
--eval_protocol=local tests each client's v_k on its own test split.
"""
import jax
import jax.numpy as jnp

from fedjax_drift.algorithms.fedprox import sq_distance
from fedjax_drift.algorithms.parts import Part
from fedjax_drift.algorithms.recipes import MCMAHAN, Recipe, algorithm

NAME = 'ditto'


def personal_objective(lam):
  """The Part that trains v_k: it starts from the client's own v_k, adds the pull
  (lambda / 2) ||v_k - w^t||^2 to the loss, and stores the final v_k."""

  def start(ctx):
    return ctx.state[NAME]['params']

  def loss(params, logits, batch, ctx):
    del logits, batch
    return 0.5 * lam * sq_distance(params, ctx.global_params)

  def client_final(ctx, delta):  # delta = w^t - v_k^H
    return {'params': jax.tree.map(jnp.subtract, ctx.global_params, delta)}

  return Part(NAME, init_client=lambda params: {'params': params}, start=start, loss=loss,
              client_final=client_final)


def ditto(algo, trainer, lam):
  """The FederatedAlgorithm: `algo` (the global FedAvg update) with each client's personal
  model trained alongside it by `trainer([personal_objective(lam)])`."""
  personal = trainer([personal_objective(lam)])

  def init_client(params):
    return {**algo.init_client(params), **personal.init_client(params)}

  def client_update(params, payload, client_state, client, key):
    result = algo.client_update(params, payload, client_state, client, key)
    own = personal.client_update(params, {}, client_state, client, key)
    return result._replace(client_state={**result.client_state,
                                         NAME: own.client_state[NAME]})

  return algo._replace(init_client=init_client, client_update=client_update,
                       personal=lambda params, client_state: client_state[NAME]['params'])


# --- Registration -----------------------------------------------------------------------------
def _build(v, algo, trainer, **_):
  return ditto(algo, trainer, v.ditto_lambda)


algorithm(NAME, Recipe(weighting_source=MCMAHAN + ' (Li et al. 2021, Alg. 1: FedAvg\'s global '
                       'update)', personal=True,
                       summary='personal model v_k with the pull (--ditto_lambda/2)||v_k - w||^2;'
                       ' the global model is FedAvg'),
          reads=('ditto_lambda',), build=_build)

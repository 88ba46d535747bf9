"""pFedMe: personalised models through Moreau envelopes.

Paper: C. T. Dinh, N. H. Tran and T. D. Nguyen, "Personalized Federated Learning with Moreau
Envelopes" (NeurIPS 2020), Algorithm 1 and eqs. 7-9:

    client i in S_t, w_{i,0} = theta_i = w^t; for each local step r = 0 .. H_i - 1 on batch D:
        theta_i <- theta_i - p (grad f(theta_i; D) + lambda (theta_i - w_{i,r}))   K times
                                                   (approximately solves eq. 7 for theta~_i)
        w_{i,r+1} = w_{i,r} - eta lambda (w_{i,r} - theta_i)                        (eq. 8)
    server: w^{t+1} = (1 - beta) w^t + beta sum_i p_i w_{i,H}                       (eq. 9)

p is --pfedme_personal_lr, K --pfedme_inner_steps, eta --lr and lambda --pfedme_lambda. As in
the authors' code (pFedMeOptimizer, userpFedMe.train), theta_i starts at w^t each round and
carries over from one local step to the next, the K inner steps reuse the step's minibatch,
--weight_decay adds the code's mu * theta to the inner gradient, and the server averages by
training examples. beta is --server_lr: the averaging server applies w^t - beta sum p_i
delta_i, which is eq. 9 (beta = 1: plain averaging). The personalised model of a client is its
last theta_i (the code's persionalized_model_bar), kept as per-client state [N, ...] and tested
by --eval_protocol=local.

Reduction: with K = 1 and p = 1 / lambda, the first local step is w - eta grad f(w), FedAvg's
step; with one local step per round (--local_steps=1) a round is FedAvg's round with the same
eta (to float rounding: eq. 8 computes eta lambda (w - theta) rather than eta grad f).
--local_optimizer's momentum and Adam do not apply: the steps are the paper's plain ones.
"""
import jax
import jax.numpy as jnp

from fedjax_drift.algorithms.parts import ClientContext
from fedjax_drift.algorithms.recipes import MCMAHAN, Recipe, algorithm
from fedjax_drift.errors import UserError
from fedjax_drift.state import ClientResult

NAME = 'pfedme'


def pfedme(algo, objective, lr, lam, inner_steps, personal_lr, mu=0.0, clip=None,
           apply_fn=None, cohort_size=1):
  """The FederatedAlgorithm: `algo`'s server (eq. 9 with beta = its server lr) and pFedMe's
  local update (eqs. 7-8) with `objective` the task loss (local.task_objective)."""
  grad_fn = jax.value_and_grad(objective, has_aux=True)

  def client_update(params, payload, client_state, client, key):
    ctx = ClientContext(params, payload, client_state, lr, client.num_steps,
                        client.num_examples, client.label_hist, cohort_size, apply_fn,
                        client.batch, key)

    def local_step(s, carry):
      w, theta, loss_sum = carry
      batch = client.batch(s)

      def inner(k, carry):
        theta, _ = carry
        (loss, _), g = grad_fn(theta, batch, ctx._replace(step=s))
        if clip is not None:
          g = clip(g)
        theta = jax.tree.map(lambda t, gi, wi: t - personal_lr * (gi + lam * (t - wi) + mu * t),
                             theta, g, w)
        return theta, loss

      theta, loss = jax.lax.fori_loop(0, inner_steps, inner, (theta, jnp.zeros((), jnp.float32)))
      w = jax.tree.map(lambda wi, t: wi - lr * lam * (wi - t), w, theta)
      return w, theta, loss_sum + loss

    w, theta, loss_sum = jax.lax.fori_loop(
        0, client.num_steps, local_step, (params, params, jnp.zeros((), jnp.float32)))
    delta = jax.tree.map(jnp.subtract, params, w)
    return ClientResult(delta, {**client_state, NAME: {'params': theta}},
                        loss_sum / jnp.maximum(client.num_steps, 1))

  def init_client(params):
    return {**algo.init_client(params), NAME: {'params': params}}

  return algo._replace(init_client=init_client, client_update=client_update,
                       personal=lambda params, client_state: client_state[NAME]['params'])


# --- Registration -----------------------------------------------------------------------------
def _build(v, algo, model, parts, objective, clip, **_):
  if parts:
    raise UserError(f'--local_terms={",".join(parts)} does not combine with --algo=pfedme, '
                    'whose local update is its own (eqs. 7-8)')
  if model.has_state:
    raise UserError(f'--algo=pfedme takes a model without BatchNorm statistics; --model='
                    f'{model.name} has them')
  return pfedme(algo, objective, v.lr, v.pfedme_lambda, v.pfedme_inner_steps,
                v.pfedme_personal_lr, v.weight_decay, clip, model.apply, v.clients_per_round)


algorithm(NAME, Recipe(weighting_source=MCMAHAN + ' (the pFedMe code averages by training '
                       'examples; Dinh et al. 2020, eq. 9 writes 1/S)', personal=True,
                       summary='Moreau-envelope personalisation (--pfedme_lambda, '
                       '--pfedme_inner_steps, --pfedme_personal_lr; beta = --server_lr)'),
          reads=('pfedme_lambda', 'pfedme_inner_steps', 'pfedme_personal_lr'), build=_build)

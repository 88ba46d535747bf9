"""APFL: adaptive personalised federated learning, a personal model mixed with the global one.

Paper: Y. Deng, M. M. Kamani and M. Mahdavi, "Adaptive Personalized Federated Learning"
(arXiv:2003.13461, 2020), Algorithm 1 and the alpha update of §3.2 (eq. 10):

    client i in S_t, w_i = w^t; for each local step on minibatch xi, from the step's values:
        v_bar = alpha_i v_i + (1 - alpha_i) w_i
        w_i     <- w_i - eta grad f(w_i; xi)                            (FedAvg's local step)
        v_i     <- v_i - eta alpha_i grad f(v_bar; xi)                  (grad_v f(v_bar))
        alpha_i <- clip(alpha_i - eta_alpha <v_i - w_i, grad f(v_bar; xi)>, 0, 1)  (eq. 10)
    server: w^{t+1} = the recipe's aggregation of the w_i (FedAvg)

The w and v steps go through the local optimizer (--local_optimizer, each its own state; plain
SGD gives the lines above). v_i starts at the initial model and alpha_i at --apfl_alpha; both are
per-client state [N, ...]. --apfl_alpha_lr is eta_alpha (0 = alpha fixed, the paper's
non-adaptive APFL); the alpha update is eq. 10 without the authors' code's extra 0.02 alpha.
The w part is FedAvg's local training, so the global model is FedAvg's; each client's model is
the mixture alpha_i v_i + (1 - alpha_i) w^t with the current global w^t (tested by
--eval_protocol=local), which with alpha = 0 is the global model itself.
"""
import jax
import jax.numpy as jnp
import optax
from optax.tree_utils import tree_vdot

from fedjax_drift.algorithms.parts import ClientContext
from fedjax_drift.algorithms.recipes import MCMAHAN, Recipe, algorithm
from fedjax_drift.errors import UserError
from fedjax_drift.state import ClientResult

NAME = 'apfl'


def mixture(alpha, v, w):
  """alpha v + (1 - alpha) w, leaf by leaf."""
  return jax.tree.map(lambda vi, wi: alpha * vi + (1 - alpha) * wi, v, w)


def apfl(algo, objective, optimizer, alpha, alpha_lr, lr=0.0, clip=None, apply_fn=None,
         cohort_size=1):
  """The FederatedAlgorithm: `algo`'s server (FedAvg's aggregation of the w_i) with APFL's
  client update; `objective` is the task loss (local.task_objective), `optimizer` the local
  optimizer of both w and v, alpha the initial mixing weight, alpha_lr its learning rate."""
  grad_fn = jax.value_and_grad(objective, has_aux=True)

  def client_update(params, payload, client_state, client, key):
    ctx = ClientContext(params, payload, client_state, lr, client.num_steps,
                        client.num_examples, client.label_hist, cohort_size, apply_fn,
                        client.batch, key)
    own = client_state[NAME]

    def step(s, carry):
      w, v, a, w_opt, v_opt, loss_sum = carry
      batch, at = client.batch(s), ctx._replace(step=s)
      (loss, _), g_w = grad_fn(w, batch, at)
      _, g_bar = grad_fn(mixture(a, v, w), batch, at)
      if clip is not None:
        g_w, g_bar = clip(g_w), clip(g_bar)
      grad_alpha = tree_vdot(jax.tree.map(jnp.subtract, v, w), g_bar)
      updates, w_opt = optimizer.update(g_w, w_opt, w)
      new_w = optax.apply_updates(w, updates)
      updates, v_opt = optimizer.update(jax.tree.map(lambda g: a * g, g_bar), v_opt, v)
      new_v = optax.apply_updates(v, updates)
      new_a = jnp.clip(a - alpha_lr * grad_alpha, 0.0, 1.0)
      return new_w, new_v, new_a, w_opt, v_opt, loss_sum + loss

    init = (params, own['params'], own['alpha'], optimizer.init(params),
            optimizer.init(own['params']), jnp.zeros((), jnp.float32))
    w, v, a, _, _, loss_sum = jax.lax.fori_loop(0, client.num_steps, step, init)
    delta = jax.tree.map(jnp.subtract, params, w)
    return ClientResult(delta, {**client_state, NAME: {'params': v, 'alpha': a}},
                        loss_sum / jnp.maximum(client.num_steps, 1))

  def init_client(params):
    return {**algo.init_client(params),
            NAME: {'params': params, 'alpha': jnp.asarray(alpha, jnp.float32)}}

  def personal(params, client_state):
    return mixture(client_state[NAME]['alpha'], client_state[NAME]['params'], params)

  return algo._replace(init_client=init_client, client_update=client_update, personal=personal)


# --- Registration -----------------------------------------------------------------------------
def _build(v, algo, model, parts, objective, optimizer, clip, **_):
  if parts:
    raise UserError(f'--local_terms={",".join(parts)} does not combine with --algo=apfl, '
                    'whose local update is its own (Deng et al. 2020, Alg. 1)')
  if model.has_state:
    raise UserError(f'--algo=apfl takes a model without BatchNorm statistics; --model='
                    f'{model.name} has them')
  return apfl(algo, objective, optimizer, v.apfl_alpha, v.apfl_alpha_lr, v.lr, clip,
              model.apply, v.clients_per_round)


algorithm(NAME, Recipe(weighting_source=MCMAHAN + ' (Deng et al. 2020, Alg. 1: FedAvg\'s '
                       'global model)', personal=True,
                       summary='personal model mixed with the global one, alpha v + (1-alpha) w '
                       '(--apfl_alpha, adaptive with --apfl_alpha_lr)'),
          reads=('apfl_alpha', 'apfl_alpha_lr'), build=_build)

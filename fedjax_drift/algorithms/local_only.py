"""Local-only training: every client trains alone on its own data; nothing is communicated.

The baseline personalised-FL benchmarks compare against (PFLlib's "Local", FL-bench's
"Local-only"): what a client reaches without federation.

    every client i:         theta_i = theta_0                  (the run's initial model)
    round t, i in S_t:      theta_i <- theta_i - eta_t g_i     for H_i steps on its own data
    server:                 nothing (no aggregation; theta stays theta_0)

A client trains only in the rounds that sample it, for the same H_i local steps (and with the
same local optimizer, clipping and pipeline) as any algorithm's clients, so with the same
--clients_per_round it gets the same local compute as the federated methods it is compared
with; --clients_per_round=--num_clients trains every client every round. theta_i is
per-client state stacked [N, ...] (like SCAFFOLD's c_i). The client update the engine sees is
this round's own step, delta_i = theta_i^start - theta_i^H, which its drift diagnostics read.

Evaluation (evaluation.py, --eval_protocol=local): each client's own model on its own test
split (--test_partition=like_train or --partition=domains is required), the run's accuracy
the mean over clients; metrics.csv also gives each model's accuracy on the whole test set,
averaged over clients (global_test_mean_accuracy).
"""
import jax
import optax

from fedjax_drift.algorithms.parts import Part, compose
from fedjax_drift.algorithms.recipes import Recipe, algorithm

NAME = 'local_only'


def own_model():
  """The client's model as per-client state: training starts from it and stores its end."""

  def init_client(params):
    return {'params': params}

  def client_final(ctx, delta):
    # ctx.global_params is the client's own model here (see local_only's client_update).
    return {'params': jax.tree.map(lambda p, d: p - d, ctx.global_params, delta)}

  return Part(NAME, init_client=init_client, client_final=client_final)


def local_only(apply_fn, lr, local_optimizer, train_apply=None, clip_grad_norm=0.0):
  """The FederatedAlgorithm: local training as every algorithm's (compose), started from and
  stored into the client's own model; the server keeps its parameters and sends nothing."""
  trainer = compose(NAME, apply_fn, lr, local_optimizer, optax.set_to_zero(), [own_model()],
                    1, train_apply, clip_grad_norm)

  def client_update(params, payload, client_state, client, key):
    del params  # the global model is never sent
    own = client_state[NAME]['params']
    return trainer.client_update(own, payload, client_state, client, key)

  def server_update(params, server, cohort):
    del cohort  # no aggregation
    return params, server

  return trainer._replace(client_update=client_update, server_update=server_update,
                          communication=lambda params: {'down': 0, 'up': 0},
                          needs_client_deltas=False,
                          personal=lambda params, client_state: client_state[NAME]['params'])


# --- Registration -----------------------------------------------------------------------------
def _build(v, model, optimizer, train_apply, **_):
  """The method in place of the recipe's composed algorithm (algorithms.method_context)."""
  return local_only(model.apply, v.lr, optimizer, train_apply, v.clip_grad_norm)


algorithm(NAME, Recipe(weighting_source='none: nothing is aggregated', personal=True,
                       federated=False,
                       summary='each client trains alone on its own data, no communication '
                       '(needs --test_partition=like_train)'), build=_build)

"""FedRep: a shared body (representation) and a personal head per client.

Paper: L. Collins, H. Hassani, A. Mokhtari and S. Shakkottai, "Exploiting Shared
Representations for Personalized Federated Learning" (ICML 2021), Algorithm 1:

    client i in S_t:  h_i <- tau_h steps on the head, body phi^t frozen, from h_i's last value
                      phi_i <- tau_phi steps on the body, head h_i frozen, from phi^t
    server:           phi^{t+1} = the recipe's aggregation of the phi_i (FedAvg's weighted mean)

The head is the model's last layer (the classifier; personalize.head_labels), the body
everything else. Each client's H_i local steps are split as the authors' code splits local
epochs (fedrep's head_eps = local_ep - local_rep_ep, head first): the first
round(--fedrep_head_fraction * H_i) steps train the head, the remaining ones the body, each
phase with a fresh state of the local optimizer whose updates of the frozen group are zero.
The steps of the two phases read consecutive minibatches of the client's epochs. The heads are
per-client state stacked [N, ...]; a client starts with the initial model's head. The uploaded
update is the body's (the head's delta is zero, so the global model keeps its initial head,
which no client uses). --eval_protocol=local tests body phi^t with each client's head h_i.
"""
import jax
import jax.numpy as jnp
import optax

from fedjax_drift.algorithms import local
from fedjax_drift.algorithms.parts import ClientContext
from fedjax_drift.algorithms.recipes import MCMAHAN, Recipe, algorithm
from fedjax_drift.errors import UserError
from fedjax_drift.state import ClientResult

NAME = 'fedrep'


def head_labels(params):
  """'train' for the last layer's leaves (the classifier), 'freeze' for the rest."""
  if 'batch_stats' in params:  # a BatchNorm model: {'params': ..., 'batch_stats': ...}
    return {'params': head_labels(params['params']),
            'batch_stats': jax.tree.map(lambda _: 'freeze', params['batch_stats'])}
  keys = list(params)
  if 'classifier' in params:  # zoo.WithProjection: the output layer after the projection
    return {k: jax.tree.map(lambda _, k=k: 'train' if k == 'classifier' else 'freeze', v)
            for k, v in params.items()}
  return {k: jax.tree.map(lambda _, k=k: 'train' if k == keys[-1] else 'freeze', v)
          for k, v in params.items()}


def _is_head(params):
  return [label == 'train' for label in jax.tree.leaves(head_labels(params))]


def head_leaves(params):
  """The head's leaves, in tree order (the per-client state)."""
  return [x for x, h in zip(jax.tree.leaves(params), _is_head(params)) if h]


def with_head(params, head):
  """params with its head leaves replaced, in tree order, by `head`."""
  leaves, treedef = jax.tree.flatten(params)
  it = iter(head)
  return jax.tree.unflatten(treedef, [next(it) if h else x
                                      for x, h in zip(leaves, _is_head(params))])


def only(optimizer, params, group):
  """`optimizer` on the leaves of `group` ('head' or 'body'); the others' updates are zero."""
  labels = jax.tree.map(lambda h: 'train' if h == (group == 'head') else 'freeze',
                        jax.tree.unflatten(jax.tree.structure(params), _is_head(params)))
  return optax.multi_transform({'train': optimizer, 'freeze': optax.set_to_zero()}, labels)


def fedrep(algo, objective, optimizer, lr, head_fraction, clip=None, apply_fn=None,
           cohort_size=1):
  """The FederatedAlgorithm: `algo`'s server (the body's aggregation), with FedRep's client
  update: head steps, then body steps (`optimizer`, the local one, on each group in turn)."""

  def client_update(params, payload, client_state, client, key):
    ctx = ClientContext(params, payload, client_state, lr, client.num_steps,
                        client.num_examples, client.label_hist, cohort_size, apply_fn,
                        client.batch, key)
    head_steps = jnp.round(head_fraction * client.num_steps).astype(jnp.int32)
    start = with_head(params, client_state[NAME]['head'])
    theta, head_loss = local.train(start, client._replace(num_steps=head_steps), ctx,
                                   objective, only(optimizer, params, 'head'), clip=clip)
    body = client._replace(num_steps=client.num_steps - head_steps,
                           batch=lambda s: client.batch(s + head_steps))
    theta, body_loss = local.train(theta, body, ctx, objective, only(optimizer, params, 'body'),
                                   clip=clip)
    # The head never leaves the client: its delta is zero.
    delta = with_head(jax.tree.map(jnp.subtract, params, theta),
                      [jnp.zeros_like(h) for h in head_leaves(params)])
    loss = ((head_loss * head_steps + body_loss * (client.num_steps - head_steps))
            / jnp.maximum(client.num_steps, 1))
    return ClientResult(delta, {**client_state, NAME: {'head': head_leaves(theta)}}, loss)

  def init_client(params):
    return {**algo.init_client(params), NAME: {'head': head_leaves(params)}}

  return algo._replace(init_client=init_client, client_update=client_update,
                       personal=lambda params, client_state: with_head(
                           params, client_state[NAME]['head']))


# --- Registration -----------------------------------------------------------------------------
def _build(v, algo, model, parts, objective, optimizer, clip, **_):
  if parts:
    raise UserError(f'--local_terms={",".join(parts)} does not combine with --algo=fedrep, '
                    'whose local training is its own (head steps, then body steps)')
  return fedrep(algo, objective, optimizer, v.lr, v.fedrep_head_fraction, clip, model.apply,
                v.clients_per_round)


algorithm(NAME, Recipe(weighting_source=MCMAHAN + ' (Collins et al. 2021, Alg. 1: the body\'s '
                       'average)', personal=True,
                       summary='shared body, personal head: head steps then body steps '
                       '(--fedrep_head_fraction)'),
          reads=('fedrep_head_fraction',), build=_build)

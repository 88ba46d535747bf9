"""Drift-control mechanisms as composable parts, and `compose`, which builds an algorithm.

A `Part` is a NamedTuple of optional pure hooks (in the spirit of optax's (init, update)
pairs). Each part owns one slot, keyed by its name, in the server buffers, in each client's
state and in the payload broadcast to clients. An algorithm is a list of parts, an aggregator
and an optax server optimizer; `compose` wires them into the engine's `FederatedAlgorithm`:

  client:  objective = task loss + sum of part.loss
           g = grad objective(lookahead(theta));  g <- clip(g) (--clip_grad_norm)
           g <- part.correct(g) for each part
           theta <- theta + local_optimizer(g)                     for H_i steps
           delta = theta_t - theta;   client state <- part.client_final(ctx, delta)
           upload <- part.client_upload(ctx, delta)               (read this round, not kept)
           delta <- part.send(ctx, delta)            (DP clipping, compression; in order)
  server:  pseudo_gradient = aggregator(deltas, weights)           (default: sum p_i delta_i)
           theta <- theta + server_optimizer(pseudo_gradient)
           (theta, buffer) <- part.server_update(...)              for each part, in order
"""
from typing import Any, Callable, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import optax

from fedjax_drift import registry
from fedjax_drift.algorithms import local
from fedjax_drift.state import ClientResult, FederatedAlgorithm, PyTree


class ClientContext(NamedTuple):
  """What a client's hooks can read during local training."""
  global_params: PyTree  # theta_t as received
  payload: dict          # part name -> what that part broadcast
  state: dict            # part name -> this client's per-client state
  lr: float              # local learning rate eta
  num_steps: jax.Array   # H_i
  num_examples: jax.Array
  label_hist: jax.Array  # [C] counts of this client's labels
  cohort_size: int       # K
  apply: Callable        # model apply (params, x) -> logits
  batch: Callable        # step -> Batch: the client's minibatches (FedCurv's Fisher)
  key: Any = None        # this client's key for the round (the engine's), for parts that draw
  step: Any = None       # the local step being taken (local.train sets it), None outside it


class ServerContext(NamedTuple):
  """What server hooks can read: the round before and after the server optimizer."""
  old_params: PyTree
  pseudo_gradient: PyTree  # the aggregated update
  cohort: Any              # state.Cohort
  lr: float                # local learning rate eta (several papers scale by it)
  apply: Callable


class Part(NamedTuple):
  """One drift-control mechanism. Every hook is optional.

  init(params) -> server buffer            payload(buffer, params, server) -> broadcast pytree
  init_client(params) -> per-client state  client_final(ctx, delta) -> new per-client state
  loss(params, logits, batch, ctx) -> scalar added to the local objective
  logits(logits, batch, ctx) -> logits used by the task loss (FedRS)
  correct(grads, ctx) -> grads             lookahead(params, ctx) -> gradient point
  aggregate(deltas, weights, cohort, buffer) -> (pseudo-gradient, buffer), or (pseudo-gradient,
    buffer, aux) with aux per-round values that are no state (IGFL's attention matrix),
    returned by server_update as its third output (at most one part aggregates)
  server_update(params, buffer, sctx) -> (params, buffer)
  start(ctx) -> params where local training starts (default theta_t; FedBN's local norms)
  upload(params) -> extra floats a client sends (beyond its delta)
  client_upload(ctx, delta) -> pytree the server reads this round as cohort.uploads[name]
    ([K, ...]) and nobody keeps (stateless FedCurv's Fisher)
  diagnostics(buffer) -> {name: float32 scalar} merged into the round's metrics
  needs_client_deltas: server_update reads cohort.deltas, the [K, ...] stack (aggregators
    always get it); otherwise the engine streams the aggregation and keeps only the mean
  send(ctx, delta) -> (sent, state): what the client uploads in place of its delta (DP
    clipping, compression) and this part's new per-client state (None: keep the old one or
    client_final's); several run in order, each on the one before's output
  aggregate_streams: the aggregate hook reads only cohort.mean_delta (the streamed sum of
    the sent deltas), so the engine need not stack the [K, ...] deltas for it
  """
  name: str
  init: Optional[Callable] = None
  payload: Optional[Callable] = None
  init_client: Optional[Callable] = None
  client_final: Optional[Callable] = None
  loss: Optional[Callable] = None
  logits: Optional[Callable] = None
  correct: Optional[Callable] = None
  lookahead: Optional[Callable] = None
  aggregate: Optional[Callable] = None
  server_update: Optional[Callable] = None
  upload: Optional[Callable] = None
  client_upload: Optional[Callable] = None
  start: Optional[Callable] = None
  diagnostics: Optional[Callable] = None
  needs_client_deltas: bool = False
  send: Optional[Callable] = None
  aggregate_streams: bool = False


class PartNeeds(NamedTuple):
  """What a registered part asks of the rest of the run: a 'part' entry's info (None: nothing).
  Generic code (algorithms.recipe, projection_dim, server_validation) reads these, never the
  part's name."""
  # The server entry the part needs ('' = any): the recipe's server, unless it is one of
  # `servers`; --server_optimizer and --server_momentum are refused, naming `server_note`.
  server: str = ''
  servers: tuple = ()
  server_note: str = ''
  # The model gets a projection head before its output layer (MOON's contrastive term).
  projection: bool = False
  # The Config field that sizes the server validation split the part reads (server_data),
  # carved from the training set before the clients' partition ('' = none).
  validation_size: str = ''
  # Each client keeps its own normalisation layers (FedBN): evaluation scores client models.
  local_norms: bool = False


def tree_size(tree):
  return sum(int(x.size) for x in jax.tree.leaves(tree))


def compose(name: str, apply_fn: Callable, lr: float, local_optimizer: optax.GradientTransformation,
            server_optimizer: optax.GradientTransformation, parts: Sequence[Part] = (),
            cohort_size: int = 1, train_apply: Optional[Callable] = None,
            clip_grad_norm: float = 0.0) -> FederatedAlgorithm:
  """Builds a FederatedAlgorithm from parts (see the module docstring for the order).

  train_apply(params, x, rng=None) -> (logits, model state or None) is the training-mode
  forward (BatchNorm statistics, dropout from the batch's rng); default: apply_fn.
  clip_grad_norm > 0 rescales the local objective's gradient to at most that global norm
  before any step correction and the local optimizer (local.clip_by_global_norm).
  """
  parts = tuple(parts)
  names = [p.name for p in parts]
  if len(set(names)) != len(names):
    raise ValueError(f'parts must have distinct names, got {names}')
  aggregator, lookahead_part, start_part = (_at_most_one(parts, hook)
                                            for hook in ('aggregate', 'lookahead', 'start'))

  def init(params):
    return {'opt': server_optimizer.init(params),
            **{p.name: p.init(params) for p in parts if p.init}}

  def init_client(params):
    return {p.name: p.init_client(params) for p in parts if p.init_client}

  def broadcast(params, server):
    return {p.name: p.payload(server.get(p.name), params, server) for p in parts if p.payload}

  objective = _objective(parts, train_apply or (
      lambda params, x, rng=None: (apply_fn(params, x), None)))

  def correct(grads, ctx):
    for p in parts:
      if p.correct:
        grads = p.correct(grads, ctx)
    return grads

  lookahead = lookahead_part.lookahead if lookahead_part else None
  clip = None if local.is_off(clip_grad_norm) else local.clip_by_global_norm(clip_grad_norm)
  has_correction = any(p.correct for p in parts)
  senders = [p for p in parts if p.send]

  def client_update(params, payload, client_state, client, key):
    # Batches draw from `key` through client.batch; parts that draw (FedGen's generator
    # noise) fold their own tag into it with the step.
    ctx = ClientContext(params, payload, client_state, lr, client.num_steps,
                        client.num_examples, client.label_hist, cohort_size, apply_fn,
                        client.batch, key)
    return _client_update(ctx, client)

  def _client_update(ctx, client):
    theta0 = start_part.start(ctx) if start_part else ctx.global_params
    theta, loss = local.train(theta0, client, ctx, objective, local_optimizer,
                              lookahead, correct if has_correction else None, clip)
    delta = jax.tree.map(jnp.subtract, ctx.global_params, theta)
    new_state = {p.name: p.client_final(ctx, delta) for p in parts if p.client_final}
    upload = {p.name: p.client_upload(ctx, delta) for p in parts if p.client_upload}
    for p in senders:  # after client_final: other parts' state sees the model's own change
      delta, state = p.send(ctx, delta)
      if state is not None:
        new_state[p.name] = state
    return ClientResult(delta, {**ctx.state, **new_state}, loss, upload if upload else ())

  server_update = _server_update(parts, aggregator, server_optimizer, lr, apply_fn)

  def communication(params):
    server = jax.eval_shape(init, params)
    payload = jax.eval_shape(broadcast, params, server)
    up = tree_size(params) + sum(p.upload(params) for p in parts if p.upload)
    return {'down': tree_size(params) + tree_size(payload), 'up': up}

  def diagnostics(server):
    out = {}
    for p in parts:
      if p.diagnostics:
        out.update(p.diagnostics(server[p.name]))
    return out

  needs_deltas = ((aggregator is not None and not aggregator.aggregate_streams)
                  or any(p.needs_client_deltas for p in parts))
  return FederatedAlgorithm(name, init, init_client, broadcast, client_update, server_update,
                            communication, needs_deltas, diagnostics)


def _at_most_one(parts, hook):
  """The one part with `hook` set (None if none); two are a mistake in the recipe."""
  having = [p for p in parts if getattr(p, hook)]
  if len(having) > 1:
    raise ValueError(f'at most one {hook} hook, got {[p.name for p in having]}')
  return having[0] if having else None


def _objective(parts, forward):
  """The local objective: cross-entropy on the task logits (after the parts' logit
  adjustments) plus every part's loss term; returns (total, (cross-entropy, model state))."""
  def objective(params, batch, ctx):
    if batch.rng is None:  # no dropout key: the forward as before the rng argument existed
      logits, model_state = forward(params, batch.x)
    else:
      logits, model_state = forward(params, batch.x, batch.rng)
    task_logits = logits
    for p in parts:
      if p.logits:
        task_logits = p.logits(task_logits, batch, ctx)
    ce = local.masked_mean(local.cross_entropy(task_logits, batch.y), batch.mask)
    total = ce
    for p in parts:
      if p.loss:
        total = total + p.loss(params, logits, batch, ctx)
    return total, (ce, model_state)
  return objective


def _server_update(parts, aggregator, server_optimizer, lr, apply_fn):
  """The server step: the aggregator's pseudo-gradient (the weighted mean without one), the
  server optimizer, then each part's server hook; returns (params, server[, aux])."""
  def server_update(params, server, cohort):
    new_server, aux = dict(server), ()
    if aggregator is not None:
      pseudo_gradient, buffer, *aux = aggregator.aggregate(
          cohort.deltas, cohort.weights, cohort, server.get(aggregator.name))
      if aggregator.init:
        new_server[aggregator.name] = buffer
    else:
      pseudo_gradient = cohort.mean_delta
    updates, new_server['opt'] = server_optimizer.update(pseudo_gradient, server['opt'], params)
    new_params = optax.apply_updates(params, updates)
    sctx = ServerContext(params, pseudo_gradient, cohort, lr, apply_fn)
    for p in parts:
      if p.server_update:
        new_params, new_server[p.name] = p.server_update(new_params, server.get(p.name), sctx)
    return (new_params, new_server, *aux)
  return server_update



# The default aggregator: compose's own weighted mean, so it builds no part.
registry.register('aggregator', 'mean', 'weighted mean of the updates, sum_i p_i delta_i',
                  build=lambda v, **_: None)

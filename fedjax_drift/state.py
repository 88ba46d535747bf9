"""The pytrees and function signatures shared by the engine and the algorithms.

Sign convention, used everywhere: a client update is the descent direction

    delta_i = theta_t - theta_i^H          (FedADC's Delta_i; FedAvg: theta_{t+1} = theta_t - sum p_i delta_i)

and the server's pseudo-gradient is built from these deltas, so server optimizers are ordinary
optax transformations: `updates = opt.update(pseudo_gradient)`, `theta_{t+1} = theta_t + updates`.
"""
from typing import Any, Callable, NamedTuple, Optional

import jax

PyTree = Any


class ServerState(NamedTuple):
  """Everything a run needs to continue exactly; checkpoints are this pytree."""
  params: PyTree    # global model theta_t
  server: PyTree    # the algorithm's server buffers (momentum, teacher buffer, ...)
  clients: PyTree   # per-client state, every leaf stacked [num_clients, ...]
  round: jax.Array  # int32, rounds completed
  key: jax.Array    # the run's key; round t uses fold_in(key, t)
  scenario: PyTree = ()  # the data scenario's state (e.g. concept shift's label map)
  # 0 while the run is healthy; else the round whose model or update became non-finite. From
  # then on the engine freezes the run at its last finite state (see engine.make_round).
  diverged_at: jax.Array = 0


class Batch(NamedTuple):
  x: jax.Array     # [B, ...] float32
  y: jax.Array     # [B] int32
  mask: jax.Array  # [B] float32, 0 for padding (partial last batch, masked steps)
  rng: Any = None  # this step's dropout key (data/pipeline.step_keys), or None: no dropout


class Client(NamedTuple):
  """One client as its local training sees it (built inside the compiled round)."""
  id: jax.Array            # int32
  num_examples: jax.Array  # int32, n_i
  num_steps: jax.Array     # int32, H_i: this client's own local step count
  max_steps: int           # static: the cohort's maximum; steps >= num_steps are no-ops
  label_hist: jax.Array    # [num_classes] float32 counts of the client's labels
  batch: Callable[[jax.Array], Batch]  # step -> that step's minibatch


class ClientResult(NamedTuple):
  delta: PyTree         # theta_t - theta_i^H
  client_state: PyTree  # this client's new per-client state
  loss: jax.Array       # mean training objective over its local steps
  upload: PyTree = ()   # what the server reads this round and nobody keeps (stateless
                        # FedCurv's Fisher); the engine stacks it into Cohort.uploads


class Cohort(NamedTuple):
  """The round's clients, stacked on a leading [K] axis, as the server sees them."""
  ids: jax.Array          # [K] int32
  weights: jax.Array      # [K] aggregation weights p_i, summing to 1
  num_examples: jax.Array  # [K]
  num_steps: jax.Array     # [K]
  mean_delta: PyTree       # sum_i p_i delta_i, accumulated as clients finish
  deltas: PyTree           # [K, ...], or None unless the algorithm needs_client_deltas
  old_states: PyTree       # [K, ...] per-client state before the round
  new_states: PyTree       # [K, ...] per-client state after the round
  num_clients: int         # N, static
  uploads: PyTree = ()     # [K, ...] the clients' ClientResult.upload, stacked
  key: Any = None          # the server's key for this round, for aggregators that draw (DP)


class FederatedAlgorithm(NamedTuple):
  """A federated algorithm as pure functions (after FedJAX's `FederatedAlgorithm`).

  init(params) -> server buffers
  init_client(params) -> one client's state (the engine stacks N of them)
  broadcast(params, server) -> payload every cohort client receives
  client_update(params, payload, client_state, client: Client, key) -> ClientResult
  server_update(params, server, cohort: Cohort) -> (params, server), or (params, server, aux)
    with aux a pytree of per-round values that are no state (IGFL's attention matrix); the
    engine passes it on only when a diagnostic asks for it (engine.make_round's keep_aux)
  communication(params) -> {'down': floats, 'up': floats} per participating client per round
  needs_client_deltas: False lets the engine stream the aggregation: clients' deltas are
    summed as they finish and never stacked to [K, P] (bounded memory for large cohorts);
    the server then sees only cohort.mean_delta.
  diagnostics(server) -> {name: float32 scalar}: read from the server buffers after
    server_update, merged into the round's metrics (e.g. IGFL's sum of time-attention
    weights, which §4.3 leaves unnormalised).
  personal(params, client_state) -> client i's own model (a personalised algorithm: Ditto's
    v_i, APFL's mixture), from the global model and one client's state row; None: the
    algorithm has no per-client models (--eval_protocol=local tests these).
  aggregation_weights(weights [K], num_steps [K]) -> [K]: the factors a_i of the aggregated
    sum sum_i a_i delta_i (FedNova's normalised averaging); None: a_i = weights.
  """
  name: str
  init: Callable
  init_client: Callable
  broadcast: Callable
  client_update: Callable
  server_update: Callable
  communication: Callable
  needs_client_deltas: bool = True
  diagnostics: Callable = lambda server: {}
  personal: Optional[Callable] = None
  aggregation_weights: Optional[Callable] = None

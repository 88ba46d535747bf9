"""The compiled simulator: rounds as pure functions, segments of rounds in one `lax.scan`.

The engine knows nothing about any algorithm: it samples a cohort, gathers each client's
state and data, maps `algo.client_update` over the cohort, hands the results to
`algo.server_update`, and scatters the new per-client state back. `make_round` reads as those
steps, each a function of its own: `sample` (who takes part: sampling.py), the broadcast,
`assign` (each client's steps and weight), `local_work` (the sums over clients:
client_sums.py), `aggregate`, the server update, `round_metrics` and `freeze_if_diverged`.
One compiled program runs a whole segment of rounds; the host wakes only between segments.

Client parallelism: the cohort is processed `cohort_chunk` clients at a time. Inside a chunk
clients are vmapped; chunks run one after another in a `lax.scan` that adds each chunk's
weighted deltas to a running sum, so the aggregate never needs the [K, P] stack of deltas
(unless the algorithm asks for it: `needs_client_deltas`). chunk=1 is fully sequential,
chunk=K fully vmapped. On this CPU, vmapped clients were slower than sequential ones for every
model measured (conv layers several times; logreg and the MLP too, see benchmarks/), so
`auto` picks sequential on CPU and vmap on accelerators.

Randomness is derived: round t uses fold_in(run_key, t); the cohort uses fold_in(., 0) and
client i's batches fold_in(fold_in(., 1), i), so results do not depend on the strategy, the
chunk width or the client's position in the cohort.
"""
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

from fedjax_drift import client_sums, sampling
from fedjax_drift import unreliable as unreliable_clients
from fedjax_drift.data import pipeline as input_pipeline
from fedjax_drift.data import scenarios
from fedjax_drift.data import shuffle
from fedjax_drift.data.federated import FederatedData, to_float
from fedjax_drift.state import Batch, Client, Cohort, FederatedAlgorithm, ServerState


class Schedule(NamedTuple):
  """Local work: exactly one of local_steps / local_epochs is set. Static Python ints for a
  lone run; in a study whose runs differ in them (--grid over local_steps / local_epochs) each
  run's value is an int32 scalar traced on the run axis (0 = not set), and the static loop
  bound (max_local_steps) is the largest run's."""
  batch_size: int            # 0 = the client's full data every step (always static)
  local_steps: Any = 0       # H, the same for every client
  local_epochs: Any = 0      # E: client i runs E * ceil(n_i / B) steps


def is_static(value) -> bool:
  """Whether a Schedule value is a Python (or numpy) int, not a traced per-run value."""
  return isinstance(value, (int, np.integer))


def steps_per_epoch(counts, batch_size):
  """ceil(n_i / B), or 1 with full-batch steps (works on numpy and jax arrays)."""
  if batch_size == 0:
    return counts * 0 + 1
  return (counts + batch_size - 1) // batch_size


def client_steps(counts, schedule: Schedule):
  """H_i for every client (works on numpy and jax arrays). A traced local_steps (a per-run
  value) picks per run: H where it is > 0, else E * ceil(n_i / B)."""
  if not is_static(schedule.local_steps):
    per_epoch = steps_per_epoch(counts, schedule.batch_size) * schedule.local_epochs
    return jnp.where(schedule.local_steps > 0, counts * 0 + schedule.local_steps, per_epoch)
  if schedule.local_steps:
    return counts * 0 + schedule.local_steps
  return steps_per_epoch(counts, schedule.batch_size) * schedule.local_epochs


def max_steps(counts: np.ndarray, schedule: Schedule) -> int:
  return int(np.max(client_steps(np.asarray(counts), schedule)))


def choose_parallelism(requested, family, backend, cohort_size, chunk=0):
  """Returns (chunk width, reason) for `backend` ('cpu', 'gpu', 'cuda', 'rocm', 'tpu': the
  platform the program is built for, which need not be present). See the module docstring and
  benchmarks/ for the numbers."""
  if chunk:
    return min(chunk, cohort_size), f'--cohort_chunk={chunk}'
  if requested == 'vmap':
    return cohort_size, '--client_parallelism=vmap'
  if requested == 'sequential':
    return 1, '--client_parallelism=sequential'
  if backend == 'cpu':
    return 1, (f'auto: {family} model on CPU, where clients one after another beat vmapped '
               'clients (benchmarks/)')
  return cohort_size, f'auto: {family} model on {backend}, vmap over the cohort'


def make_batch_fn(data: FederatedData, row, count, key, batch_size, spe, relabel=None,
                  pipeline=None):
  """step -> Batch for the client whose examples are row[:count]: every epoch visits each
  example once in a fresh shuffled order, the last partial batch masked. The order is read
  at the batch's B positions only (data/shuffle.py), never sorted. relabel maps labels (a
  scenario's current concept). pipeline (data/pipeline.Pipeline; None = plain to_float)
  augments and normalises the inputs and gives each step a dropout key, all from
  pipeline.step_keys(key, step)."""
  max_n = row.shape[0]
  relabel = relabel or (lambda y: y)

  def make(x, y, mask, step):
    if pipeline is None or pipeline.is_identity:
      return Batch(to_float(x), y, mask)
    aug_key, dropout_key = input_pipeline.step_keys(key, step)
    return Batch(input_pipeline.train_inputs(x, aug_key, pipeline), y, mask,
                 dropout_key if pipeline.dropout else None)

  if batch_size == 0:
    def full_batch(step):
      mask = (jnp.arange(max_n) < count).astype(jnp.float32)
      return make(data.x[row], relabel(data.y[row]), mask, step)
    return full_batch

  seed = jax.random.bits(key, (), jnp.uint32)

  def batch(step):
    epoch, b = step // spe, step % spe
    position = b * batch_size + jnp.arange(batch_size)  # in this epoch's shuffled order
    idx = row[shuffle.index_shuffle(position, count, shuffle.derive_seed(seed, epoch))]
    mask = (position < count).astype(jnp.float32)  # the epoch's last batch may be partial
    return make(data.x[idx], relabel(data.y[idx]), mask, step)

  return batch


def _gather(tree, ids):
  return jax.tree.map(lambda a: a[ids], tree)


def _scatter(tree, ids, values):
  return jax.tree.map(lambda a, v: a.at[ids].set(v), tree, values)


def client_mesh(devices: int):
  """A 1-D mesh over the first `devices` devices; the cohort axis is split along it."""
  return Mesh(np.array(jax.devices()[:devices]), ('clients',))


class RoundSpec(NamedTuple):
  """make_round's settings, fixed when the round is traced (make_round says what each is)."""
  algo: FederatedAlgorithm
  schedule: Schedule
  max_local_steps: int
  cohort_size: int
  weighting: str
  chunk: int
  sampler: str
  devices: int
  scenario: Any
  pipeline: Any
  client_probe: Any
  keep_aux: bool
  cohorts: Any
  unreliable: Any
  cohort_rows: bool
  cohort_k: Any

  @property
  def steps_differ(self) -> bool:
    """Whether the cohort's clients may own different step counts (static): epochs of unequal
    data, stragglers or masked clients; with equal steps the clients run in the order sampled
    and the program is as without the reordering."""
    return (not is_static(self.schedule.local_steps) or not self.schedule.local_steps
            or self.unreliable is not None or self.cohort_k is not None)


class Drawn(NamedTuple):
  """The round's draw (`sample`)."""
  rkey: Any     # fold_in(run key, round): every key of the round derives from it
  concept: Any  # the scenario's concept for this round
  ids: Any      # int32 [K] client ids
  rows: Any     # [K, max n] the clients' example rows into data
  counts: Any   # [K] their example counts
  hists: Any    # [K, C] their label histograms (of the round's concept)


class Work(NamedTuple):
  """What each cohort client is to do and weighs (`assign`), in sampling order."""
  slots: Any       # the rows of state.clients the cohort reads and writes
  old_states: Any  # those rows before the round
  num_steps: Any   # int32 [K] local steps H_i (0: a masked client)
  spe: Any         # [K] steps per epoch
  weights: Any     # float32 [K] aggregation weights p_i
  factors: Any     # the factors of the aggregated sum: the weights, or the algorithm's own
  reports: Any     # bool [K]: the clients that report (None: all)


class Done(NamedTuple):
  """The clients' results (`local_work`), in sampling order."""
  sums: dict       # client_sums.client_summands summed over the cohort
  new_states: Any  # [K, ...] client states after the round (an unreported client's kept)
  losses: Any      # [K]
  norms: Any       # [K] |delta_i|
  finite: Any      # bool [K]: whether each client's delta is finite
  deltas: Any      # [K, ...] the deltas (algo.needs_client_deltas), or None
  uploads: Any     # [K, ...] what each client uploads besides its delta
  probes: Any      # [K, ...] client_probe's outputs, or None


def make_round(algo: FederatedAlgorithm, schedule: Schedule, max_local_steps: int,
               cohort_size: int, weighting: str = 'examples', chunk: int = 1,
               sampler: str = 'uniform', devices: int = 1, scenario=None, pipeline=None,
               client_probe=None, keep_aux=False, cohorts=None, unreliable=None,
               cohort_rows=False, cohort_k=None):
  """Returns round_fn(state, data) -> (state, metrics), pure and jittable: the round's steps,
  in order (sample, broadcast, assign, local work, aggregate, server update, diagnostics,
  freeze), each a function below taking the settings as one RoundSpec.

  cohort_rows (--client_state=host): state.clients holds only this round's cohort's rows,
  [K, ...] in cohort order (the host gathered them at `sampling.cohort_ids`), so they are read
  and written by position; the full [N, ...] table stays outside the program (host_state.py).

  unreliable (fedjax_drift/unreliable.py; None = every client reports and runs its H_i):
  dropped clients and stragglers, drawn from fold_in(round key, 5) and each client's id.

  cohorts (None = sample them): an int array [rounds, cohort_size] of client ids; round t
  takes row t (state.round) instead of sampling, so a run can replay another code's cohorts
  (--cohorts=file:PATH). The rest of the round's randomness is derived as without.

  Diagnostics (off by default; off, the round's program is exactly what it is without them):
  client_probe(local_params, concept) -> pytree is applied to every cohort client's model
  after its local training (theta_t - delta_i), before aggregation; keep_aux keeps the
  third, optional output of algo.server_update (its per-round "aux", whatever it holds).
  Either puts metrics['diag'] = {'ids': cohort [K], 'client': probes [K, ...], 'server':
  aux}, which the host pops before reading the scalars.

  pipeline (data/pipeline.Pipeline, None = plain to_float) augments and normalises the
  clients' training batches and gives their steps dropout keys (make_batch_fn).

  devices > 1 splits the cohort over a device mesh (jax.shard_map): each device runs its
  K/devices clients with the same chunking; the aggregation over the sharded cohort axis
  becomes an all-reduce. Params, payload and data are replicated.

  scenario (data/scenarios.py) may change labels before each round (concept shift) or draw
  fresh, stateless clients every round; the default leaves the partition as it is.

  cohort_k (None: every one of the cohort_size clients takes part): an int32 scalar k <=
  cohort_size, a run's own cohort size in a study whose runs differ in it (--grid over
  --clients_per_round). The cohort is drawn at cohort_size, whose first k are the k a lone
  run draws; the rest are masked: no step, weight 0, state kept, out of the diagnostics.
  """
  spec = RoundSpec(algo, schedule, max_local_steps, cohort_size, weighting, chunk, sampler,
                   devices, scenario or scenarios.static(), pipeline, client_probe, keep_aux,
                   cohorts, unreliable, cohort_rows, cohort_k)

  def round_fn(state: ServerState, data: FederatedData):
    drawn = sample(spec, state, data)
    payload = algo.broadcast(state.params, state.server)
    work = assign(spec, state, drawn)
    done = local_work(spec, state.params, payload, data, drawn, work)
    # server_update returns (params, server) or (params, server, aux) (state.py).
    params, server, *aux = algo.server_update(state.params, state.server,
                                              aggregate(data, drawn, work, done))
    metrics = round_metrics(spec, state, drawn, work, done, server, aux)
    finite = client_sums.tree_all_finite(params) & jnp.all(done.finite)
    return freeze_if_diverged(state, finite, params, server, work.slots, done.new_states,
                              work.old_states, drawn.concept), metrics

  return round_fn


def sample(spec: RoundSpec, state: ServerState, data: FederatedData) -> Drawn:
  """Who takes part: the round's key, the scenario's concept for the round (drawn from
  fold_in(key, 2) before anything else), and the cohort (sampling.draw_cohort)."""
  rkey = jax.random.fold_in(state.key, state.round)
  concept = spec.scenario.before_round(state.scenario, jax.random.fold_in(rkey, 2),
                                       state.round)
  return Drawn(rkey, concept, *sampling.draw_cohort(state, data, rkey, concept, spec.scenario,
                                                   spec.cohort_size, spec.sampler,
                                                   spec.cohorts))


def assign(spec: RoundSpec, state: ServerState, drawn: Drawn) -> Work:
  """Each cohort client's state, local steps and weight: H_i from the schedule (0 past the
  run's own cohort_k), the aggregation weights (sampling.cohort_weights), then the
  unreliable clients' draw (fold_in(key, 5)), which drops or shortens some and renormalises
  the weights over those that report."""
  slots = jnp.arange(spec.cohort_size, dtype=jnp.int32) if spec.cohort_rows else drawn.ids
  old_states = _gather(state.clients, slots)
  members = None if spec.cohort_k is None else jnp.arange(spec.cohort_size) < spec.cohort_k
  num_steps = client_steps(drawn.counts, spec.schedule).astype(jnp.int32)
  if members is not None:
    num_steps = jnp.where(members, num_steps, 0)
  spe = steps_per_epoch(drawn.counts, spec.schedule.batch_size)
  weights = sampling.cohort_weights(drawn.counts, spec.weighting, spec.cohort_size, members)
  reports = members
  if spec.unreliable is not None:
    reporting, num_steps = unreliable_clients.draw(
        spec.unreliable, jax.random.fold_in(drawn.rkey, 5), drawn.ids, num_steps)
    # A masked client counts as reporting here: its weight is 0 and the members' weights
    # are renormalised exactly as a lone run's.
    weights = unreliable_clients.renormalize(
        weights, reporting if members is None else reporting | ~members)
    reports = reporting if members is None else reporting & members
  # The factors of the aggregated sum: the weights, or the algorithm's own (FedNova's).
  factors = (weights if spec.algo.aggregation_weights is None
             else spec.algo.aggregation_weights(weights, num_steps))
  return Work(slots, old_states, num_steps, spe, weights, factors, reports)


def local_work(spec: RoundSpec, params, payload, data: FederatedData, drawn: Drawn,
               work: Work) -> Done:
  """The cohort's local training, every client from `params` with the broadcast `payload`
  (`_one_client`), `spec.chunk` at a time and over the device mesh (`_run_clients`). The
  clients run largest H_i first (a stable order: equal steps keep the sampling order), so
  that a vmapped chunk, or one position across vmapped runs, holds clients of like work
  (benchmarks/step_ratio.py); their outputs come back in sampling order."""
  client_key = jax.random.fold_in(drawn.rkey, 1)
  order = sampling.largest_first(work.num_steps) if spec.steps_differ else None
  args = _permuted((drawn.ids, drawn.rows, drawn.counts, drawn.hists, work.num_steps, work.spe,
                    work.factors, work.old_states, work.reports), order)
  sums, outputs = _run_clients(spec)(params, payload, data, client_key, drawn.concept, args)
  new_states, losses, norms, finite, deltas, uploads, probes = _permuted(
      outputs, None if order is None else jnp.argsort(order))
  if work.reports is not None:  # a client that never reported keeps its state
    new_states = unreliable_clients.keep_unreported(work.reports, new_states, work.old_states)
  return Done(sums, new_states, losses, norms, finite, deltas, uploads, probes)


def _run_clients(spec: RoundSpec):
  """(params, payload, data, client_key, concept, args [K, ...]) -> (sums, outputs [K, ...]):
  client_sums.map_reduce_clients over the cohort; with devices > 1 each device runs its share
  of it (jax.shard_map) and the sums are all-reduced."""

  def run_clients(params, payload, data, client_key, concept, args):
    sums, outputs = client_sums.map_reduce_clients(
        lambda a: _one_client(spec, params, payload, data, client_key, concept, a), args,
        spec.chunk)
    if spec.devices > 1:  # each device summed its share of the cohort
      sums = jax.lax.psum(sums, 'clients')
    return sums, outputs

  if spec.devices == 1:
    return run_clients
  return jax.shard_map(run_clients, mesh=client_mesh(spec.devices),
                       in_specs=(P(), P(), P(), P(), P(), P('clients')),
                       out_specs=(P(), P('clients')), check_vma=False)


def _one_client(spec: RoundSpec, params, payload, data, client_key, concept, args):
  """One client's round: its batches (make_batch_fn, keyed by fold_in(client_key, id)), its
  update (algo.client_update), and (summands, outputs) for map_reduce_clients."""
  cid, row, count, hist, steps, spe_i, weight, cstate, reported = args
  key = jax.random.fold_in(client_key, cid)
  client = Client(cid, count, steps, spec.max_local_steps, hist,
                  make_batch_fn(data, row, count, key, spec.schedule.batch_size, spe_i,
                                lambda y: spec.scenario.relabel(concept, y), spec.pipeline))
  result = spec.algo.client_update(params, payload, cstate, client, key)
  summands, norm = client_sums.client_summands(result.delta, weight, reported)
  outputs = (result.client_state, result.loss, norm, client_sums.tree_all_finite(result.delta),
             result.delta if spec.algo.needs_client_deltas else None, result.upload,
             None if spec.client_probe is None else spec.client_probe(
                 jax.tree.map(jnp.subtract, params, result.delta), concept))
  return summands, outputs


def aggregate(data: FederatedData, drawn: Drawn, work: Work, done: Done) -> Cohort:
  """What the server update reads (state.Cohort): the cohort, its weights and steps, the
  weighted sum of the deltas (summed during local work), the deltas when the algorithm asks
  for them, the clients' states before and after, their uploads, and the key fold_in(key, 4)."""
  return Cohort(drawn.ids, work.weights, drawn.counts, work.num_steps, done.sums['weighted'],
                done.deltas, work.old_states, done.new_states, data.client_count.shape[0],
                done.uploads, key=jax.random.fold_in(drawn.rkey, 4))


def round_metrics(spec: RoundSpec, state: ServerState, drawn: Drawn, work: Work, done: Done,
                  server, aux) -> dict:
  """The round's metrics: the drift measures (client_sums.drift_diagnostics), the unreliable
  clients' counts, the algorithm's and the scenario's own scalars, metrics['diag'] (the
  probes and the server's aux, when asked for), and bad_client, the first cohort member whose
  update is non-finite (-1 if none), for the error message."""
  metrics = client_sums.drift_diagnostics(done.sums, done.norms, done.losses, work.weights,
                                          work.reports)
  if spec.unreliable is not None:
    metrics.update(unreliable_clients.diagnostics(work.reports, work.num_steps))
  metrics.update(_diagnostics(spec.algo, server))
  metrics.update(_diagnostics(spec.scenario, state.scenario, drawn.concept))
  if spec.client_probe is not None or spec.keep_aux:
    metrics['diag'] = {'ids': drawn.ids, 'client': done.probes,
                       'server': (aux[0] if aux else {}) if spec.keep_aux else {}}
  metrics['bad_client'] = jnp.where(jnp.all(done.finite), -1,
                                    drawn.ids[jnp.argmin(done.finite)])
  return metrics


def _permuted(tree, order):
  """tree's arrays taken in `order` along their leading (cohort) axis; None: as they are."""
  if order is None:
    return tree
  return jax.tree.map(lambda a: a[order], tree)


def _diagnostics(owner, *args):
  """An algorithm's or scenario's optional per-round scalars (`diagnostics` hook), or {}."""
  hook = getattr(owner, 'diagnostics', None)
  return dict(hook(*args)) if hook is not None else {}


def freeze_if_diverged(state, finite, params, server, ids, new_states, old_states, concept):
  """The next ServerState, or the current one unchanged when this round (or an earlier one)
  made the run non-finite. A frozen run keeps its last finite model, so in a batch of runs
  the others go on and the frozen one is reported as diverged at `diverged_at`."""
  ok = finite & (state.diverged_at == 0)

  def pick(new, old):
    return jax.tree.map(lambda n, o: jnp.where(ok, n, o), new, old)

  clients = _scatter(state.clients, ids, pick(new_states, old_states))
  diverged_at = jnp.where((state.diverged_at == 0) & ~finite, state.round + 1,
                          state.diverged_at).astype(jnp.int32)
  return ServerState(pick(params, state.params), pick(server, state.server), clients,
                     state.round + 1, state.key, pick(concept, state.scenario), diverged_at)


def over_runs(fn, args, width):
  """fn(*args_r) for every run r on the leading (run) axis of args, `width` runs vmapped at a
  time and the groups run one after another. The run count must be a multiple of width.

  One run (or width 1) calls fn unbatched: a lone run compiles exactly like a plain run.
  """
  runs = jax.tree.leaves(args)[0].shape[0]
  if runs == 1:
    out = fn(*jax.tree.map(lambda a: a[0], args))
    return jax.tree.map(lambda a: a[None], out)
  if width == 1:
    return jax.lax.map(lambda a: fn(*a), args)
  if width >= runs:
    return jax.vmap(fn)(*args)
  groups = jax.tree.map(lambda a: a.reshape((runs // width, width) + a.shape[1:]), args)
  out = jax.lax.map(lambda a: jax.vmap(fn)(*a), groups)
  return jax.tree.map(lambda a: a.reshape((runs,) + a.shape[2:]), out)


# XLA:CPU's MLIR fusion emitters (its default since 2025) need far more memory to compile a
# CNN round than the legacy emitters: peak RSS during compilation rose 380 MB for the CIFAR CNN
# at K=20 against 50 MB, which put the whole run's peak at 1.9-2x the torch loop's (issue 23).
# Measured on this CPU, both ways gave bit-identical parameters after 10-16 rounds and equal
# CPU seconds per round with --conv_impl=onednn (im2col: 3% fewer). Dense models keep the
# default: the MLP ran 15% slower without the new emitters.
_CONV_CPU_OPTIONS = {'xla_cpu_use_fusion_emitters': False}


def compiler_options(convolves: bool, platform=None) -> dict:
  """XLA compile options for a round or segment program (jax.jit's compiler_options).

  convolves: the model has convolutions (models.Model.family == 'conv'); platform: the one the
  program is compiled for (None: jax.default_backend()). Returns the legacy fusion emitters
  for a CNN on CPU, where this XLA knows the option, else {} (the defaults): the option is
  XLA:CPU's, so it never reaches a GPU or TPU program.
  """
  if not convolves or (platform or jax.default_backend()) != 'cpu':
    return {}
  return dict(_CONV_CPU_OPTIONS) if _xla_accepts(tuple(_CONV_CPU_OPTIONS.items())) else {}


@functools.lru_cache(maxsize=None)
def _xla_accepts(options: tuple) -> bool:
  """Whether this jaxlib's XLA compiles with `options` ((name, value) pairs): an older one
  refuses an option it does not know, so the caller keeps the defaults there."""
  try:
    jax.jit(lambda x: x, compiler_options=dict(options)).lower(jnp.zeros(())).compile()
  except getattr(jax.errors, 'JaxRuntimeError', RuntimeError):  # older jaxlib: RuntimeError's
    return False
  return True


def make_segment(step_fn, length: int, out_shardings=None, compiler_options=None):
  """A compiled program running `num_rounds` (traced, <= length) calls of
  step_fn(state, data, inputs) -> (state, metrics); metrics come back stacked on [length].

  out_shardings: None lets XLA choose; a run over several processes pins (state, metrics) so
  that each call's state comes back sharded as it went in (the next call's input).
  compiler_options: XLA options for the program (engine.compiler_options), None = defaults.

  The trip count is traced, so one compilation serves segments of any length up to `length`:
  the host can run one round at a time for feedback, or whole evaluation intervals, with the
  same program and bit-identical results.
  """

  def segment(state, data, inputs, num_rounds):
    # A nested jit is traced once, for the history's shapes here and for the loop's body
    # (eval_shape, then the loop, traced the whole round twice); XLA inlines it.
    step = jax.jit(step_fn)
    shapes = jax.eval_shape(step, state, data, inputs)[1]
    history = jax.tree.map(lambda m: jnp.zeros((length,) + m.shape, m.dtype), shapes)

    def body(i, carry):
      s, hist = carry
      s, m = step(s, data, inputs)
      return s, jax.tree.map(lambda h, v: h.at[i].set(v), hist, m)

    return jax.lax.fori_loop(0, num_rounds, body, (state, history))

  options = compiler_options or None
  if out_shardings is None:
    return jax.jit(segment, donate_argnums=0, compiler_options=options)
  return jax.jit(segment, donate_argnums=0, out_shardings=out_shardings,
                 compiler_options=options)


def init_state(algo: FederatedAlgorithm, params, num_clients: int, key,
               scenario=None, host_table=False) -> ServerState:
  """The state before round 0: every client's state is algo.init_client(params), stacked
  [num_clients, ...] on the device, or in host memory as numpy with host_table=True
  (--client_state=host: the table never enters the device)."""
  one = algo.init_client(params)
  xp = np if host_table else jnp
  clients = jax.tree.map(
      lambda a: xp.broadcast_to(xp.asarray(a), (num_clients,) + a.shape).copy(), one)
  scenario_state = scenario.init(jax.random.fold_in(key, 7)) if scenario is not None else ()
  return ServerState(params, algo.init(params), clients, jnp.zeros((), jnp.int32), key,
                     scenario_state, jnp.zeros((), jnp.int32))


def make_evaluator(apply_fn, batch_size: int = 1000, norm=None):
  """Jitted (params, x, y) -> (mean loss, accuracy) over a whole split, batched with masks.
  Inputs go through data/pipeline.preprocess(x, norm), as training batches do (no
  augmentation)."""

  @jax.jit
  def evaluate(params, x, y):
    n = x.shape[0]
    b = min(batch_size, n)
    padded = -(-n // b) * b
    xp = jnp.pad(x, [(0, padded - n)] + [(0, 0)] * (x.ndim - 1)).reshape((-1, b) + x.shape[1:])
    yp = jnp.pad(y, (0, padded - n)).reshape(-1, b)
    mp = (jnp.arange(padded) < n).reshape(-1, b).astype(jnp.float32)

    def one(args):
      xb, yb, mb = args
      logits = apply_fn(params, input_pipeline.preprocess(xb, norm))
      losses = -jnp.take_along_axis(jax.nn.log_softmax(logits), yb[:, None], 1)[:, 0]
      correct = (jnp.argmax(logits, -1) == yb).astype(jnp.float32)
      return jnp.sum(losses * mb), jnp.sum(correct * mb)

    loss_sum, correct_sum = jax.lax.map(one, (xp, yp, mp))
    return jnp.sum(loss_sum) / n, jnp.sum(correct_sum) / n

  return evaluate

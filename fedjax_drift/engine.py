"""The compiled simulator: rounds as pure functions, segments of rounds in one `lax.scan`.

The engine knows nothing about any algorithm: it samples a cohort, gathers each client's
state and data, maps `algo.client_update` over the cohort, hands the results to
`algo.server_update`, and scatters the new per-client state back. One compiled program runs a
whole segment of rounds; the host wakes only between segments.

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
from optax.tree_utils import tree_norm, tree_vdot

from fedjax_drift.data import pipeline as input_pipeline
from fedjax_drift.data import scenarios
from fedjax_drift.data import shuffle
from fedjax_drift.data.federated import FederatedData, to_float
from fedjax_drift.state import Batch, Client, Cohort, FederatedAlgorithm, ServerState
from fedjax_drift import unreliable as unreliable_clients


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


def sample_cohort(key, num_clients, cohort_size):
  """Uniform without replacement, in-jit."""
  return jax.random.choice(key, num_clients, (cohort_size,), replace=False).astype(jnp.int32)


def covers_all_classes(ids, label_hist):
  present = jnp.any(label_hist > 0, axis=0)  # classes that exist in the federation
  return jnp.all(jnp.any(label_hist[ids] > 0, axis=0) | ~present)


def sample_covering_cohort(key, label_hist, cohort_size, max_tries=64):
  """A uniform cohort conditioned on its labels covering every class (FedADC §IV-E).

  Rejection sampling: up to `max_tries` uniform draws, keeping the first that covers all
  classes (exactly uniform over covering cohorts). If none does, a randomised greedy cover:
  each pick takes, at random among the clients adding the most uncovered classes, one client.
  """
  num_clients = label_hist.shape[0]

  def draw(i):
    return sample_cohort(jax.random.fold_in(key, i), num_clients, cohort_size)

  def cond(carry):
    i, ids = carry
    return (i < max_tries) & ~covers_all_classes(ids, label_hist)

  tries, ids = jax.lax.while_loop(cond, lambda c: (c[0] + 1, draw(c[0] + 1)), (0, draw(0)))

  def greedy(_):
    has = label_hist > 0

    def pick(j, carry):
      chosen, covered = carry
      gain = jnp.sum(has & ~covered[None, :], axis=1).astype(jnp.float32)
      noise = jax.random.uniform(jax.random.fold_in(key, 1000 + j), (num_clients,))
      taken = jnp.zeros(num_clients, bool).at[chosen].set(jnp.arange(cohort_size) < j)
      score = jnp.where(taken, -1.0, gain + noise)  # noise < 1 breaks ties only
      c = jnp.argmax(score).astype(jnp.int32)
      return chosen.at[j].set(c), covered | has[c]

    chosen, _ = jax.lax.fori_loop(0, cohort_size, pick,
                                  (jnp.zeros(cohort_size, jnp.int32),
                                   jnp.zeros(label_hist.shape[1], bool)))
    return chosen

  return jax.lax.cond(covers_all_classes(ids, label_hist), lambda _: ids, greedy, None)


def _gather(tree, ids):
  return jax.tree.map(lambda a: a[ids], tree)


def _scatter(tree, ids, values):
  return jax.tree.map(lambda a, v: a.at[ids].set(v), tree, values)


def tree_all_finite(tree):
  """True when every value of every leaf is finite (checked on the values, so a finite update
  can never count as diverged because a norm of it overflows)."""
  return jnp.all(jnp.stack([jnp.all(jnp.isfinite(a)) for a in jax.tree.leaves(tree)]))


def safe_norm(tree):
  """The global L2 norm, scaled by the largest magnitude before squaring so that it cannot
  overflow for any finite tree (a plain sum of squares overflows float32 above ~1.8e19)."""
  scale = jnp.max(jnp.stack([jnp.max(jnp.abs(a)) for a in jax.tree.leaves(tree)]))
  safe = jnp.where(scale > 0, scale, 1.0)
  return safe * tree_norm(jax.tree.map(lambda a: a / safe, tree))


def client_summands(delta, weight, reported=None):
  """What the round sums over clients: the weighted delta (the aggregate), the plain delta
  and the unit-norm delta (for the drift diagnostics). Returns (summands, |delta|).
  reported (--dropout_prob; None: every client reports): False leaves this client out of the
  diagnostics' sums (a dropped client's delta is zero, or its compressor's residual)."""
  norm = safe_norm(delta)
  inv_norm = 1.0 / jnp.maximum(norm, 1e-30)
  plain = delta if reported is None else jax.tree.map(
      lambda d: jnp.where(reported, d, 0.0), delta)
  summands = {'weighted': jax.tree.map(lambda d: weight * d, delta), 'plain': plain,
              'unit': jax.tree.map(lambda d: inv_norm * d, plain)}
  return summands, norm


def drift_diagnostics(sums, norms, losses, weights, reports=None):
  """Per-round measures of client drift, from sums over the cohort (one pass, no [K, P]).

  client_update_norm_mean = mean_i |d_i|; mean_update_norm = |m|, with m the plain mean of
  the deltas; update_cosine = mean_i <d_i, m> / (|d_i| |m|) = <sum_i d_i / |d_i|, m> / (K |m|).
  reports [K] bool (--dropout_prob): the means and the loss std over the clients that
  reported only (sums from client_summands with their `reported`); NaN when none did.
  """
  if reports is not None:
    return _reported_diagnostics(sums, norms, losses, weights, reports)
  k = norms.shape[0]
  mean = jax.tree.map(lambda s: s / k, sums['plain'])
  mean_norm = safe_norm(mean)
  return {
      'client_update_norm_mean': jnp.mean(norms),
      'mean_update_norm': mean_norm,
      'update_cosine': tree_vdot(sums['unit'], mean) / jnp.maximum(k * mean_norm, 1e-30),
      'client_loss_std': jnp.std(losses),
      'train_loss': jnp.sum(weights * losses),
  }


def _reported_diagnostics(sums, norms, losses, weights, reports):
  """drift_diagnostics over the m clients that reported (the rest masked out)."""
  m = jnp.sum(reports.astype(jnp.float32))
  safe_m = jnp.maximum(m, 1.0)
  mean = jax.tree.map(lambda s: s / safe_m, sums['plain'])
  mean_norm = safe_norm(mean)
  loss_mean = jnp.sum(jnp.where(reports, losses, 0.0)) / safe_m
  loss_var = jnp.sum(jnp.where(reports, (losses - loss_mean) ** 2, 0.0)) / safe_m
  nan_if_none = lambda v: jnp.where(m > 0, v, jnp.nan)
  return {
      'client_update_norm_mean': nan_if_none(jnp.sum(jnp.where(reports, norms, 0.0)) / safe_m),
      'mean_update_norm': nan_if_none(mean_norm),
      'update_cosine': nan_if_none(tree_vdot(sums['unit'], mean)
                                   / jnp.maximum(m * mean_norm, 1e-30)),
      'client_loss_std': nan_if_none(jnp.sqrt(loss_var)),
      'train_loss': jnp.sum(jnp.where(reports, weights * losses, 0.0)),
  }


def map_reduce_clients(fn, args, chunk):
  """fn(args_i) -> (summand_i, output_i) over the leading (cohort) axis of args.

  Returns (sum_i summand_i, outputs stacked on [K]). Chunks of `chunk` clients are vmapped
  and run one after another; each chunk's summands are added to a running total as it ends,
  so K model-sized summands never exist at once (memory is bounded by the chunk, not K).
  """
  size = jax.tree.leaves(args)[0].shape[0]
  if chunk >= size:
    return _sum_leading(jax.vmap(fn)(args))
  fn = jax.jit(fn)  # traced once, for the total's shapes here and for the loop's body below
  # chunk 1 is plain sequential: no vmap of width 1, so convs stay unbatched.
  run = fn if chunk == 1 else lambda a: _sum_leading(jax.vmap(fn)(a))
  first = jax.tree.map(lambda a: a[0], args)
  zero = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(fn, first)[0])
  full = size // chunk * chunk

  def body(total, chunk_args):
    summand, outputs = run(chunk_args)
    return jax.tree.map(jnp.add, total, summand), outputs

  if chunk == 1:
    total, outputs = jax.lax.scan(body, zero, args)
  else:
    chunks = jax.tree.map(lambda a: a[:full].reshape((size // chunk, chunk) + a.shape[1:]),
                          args)
    total, outputs = jax.lax.scan(body, zero, chunks)
    outputs = jax.tree.map(lambda o: o.reshape((full,) + o.shape[2:]), outputs)
  if full < size:  # the last, narrower chunk
    rest_sum, rest_out = _sum_leading(jax.vmap(fn)(jax.tree.map(lambda a: a[full:], args)))
    total = jax.tree.map(jnp.add, total, rest_sum)
    outputs = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), outputs, rest_out)
  return total, outputs


def _sum_leading(result):
  summands, outputs = result
  return jax.tree.map(lambda s: jnp.sum(s, axis=0), summands), outputs


def client_mesh(devices: int):
  """A 1-D mesh over the first `devices` devices; the cohort axis is split along it."""
  return Mesh(np.array(jax.devices()[:devices]), ('clients',))


def cohort_ids(state: ServerState, data: FederatedData, cohort_size: int,
               sampler: str = 'uniform', cohorts=None):
  """Round state.round's cohort [K] (int32 client ids), as make_round draws it: row
  state.round of `cohorts` if given, else sampled from fold_in(fold_in(key, round), 0).
  Reads only the state's key and round, so the host can ask for it before the round
  (--client_state=host gathers those clients' rows)."""
  if cohorts is not None:
    return jnp.asarray(cohorts, jnp.int32)[state.round]
  key = jax.random.fold_in(jax.random.fold_in(state.key, state.round), 0)
  if sampler == 'cover_classes':
    return sample_covering_cohort(key, data.label_hist, cohort_size)
  return sample_cohort(key, data.client_count.shape[0], cohort_size)


def make_round(algo: FederatedAlgorithm, schedule: Schedule, max_local_steps: int,
               cohort_size: int, weighting: str = 'examples', chunk: int = 1,
               sampler: str = 'uniform', devices: int = 1, scenario=None, pipeline=None,
               client_probe=None, keep_aux=False, cohorts=None, unreliable=None,
               cohort_rows=False, cohort_k=None):
  """Returns round_fn(state, data) -> (state, metrics), pure and jittable. (Its code runs
  past 80 lines on purpose: one traced round, its steps in the order the round takes them.)

  cohort_rows (--client_state=host): state.clients holds only this round's cohort's rows,
  [K, ...] in cohort order (the host gathered them at `cohort_ids`), so they are read and
  written by position; the full [N, ...] table stays outside the program (host_state.py).

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
  scenario = scenario or scenarios.static()
  # Whether the cohort's clients may own different step counts (static): epochs of unequal
  # data, or stragglers; with equal steps the order stays as sampled and the program as is.
  steps_differ = (not is_static(schedule.local_steps) or not schedule.local_steps
                  or unreliable is not None or cohort_k is not None)

  def round_fn(state: ServerState, data: FederatedData):
    num_clients = data.client_count.shape[0]
    rkey = jax.random.fold_in(state.key, state.round)
    concept = scenario.before_round(state.scenario, jax.random.fold_in(rkey, 2), state.round)
    ids, rows, counts, hists = draw_cohort(state, data, rkey, concept, scenario, cohort_size,
                                           sampler, cohorts)
    client_key = jax.random.fold_in(rkey, 1)
    payload = algo.broadcast(state.params, state.server)
    slots = jnp.arange(cohort_size, dtype=jnp.int32) if cohort_rows else ids
    old_states = _gather(state.clients, slots)
    members = None if cohort_k is None else jnp.arange(cohort_size) < cohort_k
    num_steps = client_steps(counts, schedule).astype(jnp.int32)
    if members is not None:
      num_steps = jnp.where(members, num_steps, 0)
    spe = steps_per_epoch(counts, schedule.batch_size)

    weights = cohort_weights(counts, weighting, cohort_size, members)
    reports = members
    if unreliable is not None:
      drawn, num_steps = unreliable_clients.draw(unreliable, jax.random.fold_in(rkey, 5),
                                                 ids, num_steps)
      # A masked client counts as reporting here: its weight is 0 and the members' weights
      # are renormalised exactly as a lone run's.
      weights = unreliable_clients.renormalize(
          weights, drawn if members is None else drawn | ~members)
      reports = drawn if members is None else drawn & members
    # The factors of the aggregated sum: the weights, or the algorithm's own (FedNova's).
    factors = (weights if algo.aggregation_weights is None
               else algo.aggregation_weights(weights, num_steps))

    def one_client(params, payload, data, client_key, concept, args):
      cid, row, count, hist, steps, spe_i, weight, cstate, reported = args
      key = jax.random.fold_in(client_key, cid)
      client = Client(cid, count, steps, max_local_steps, hist,
                      make_batch_fn(data, row, count, key, schedule.batch_size, spe_i,
                                    lambda y: scenario.relabel(concept, y), pipeline))
      result = algo.client_update(params, payload, cstate, client, key)
      summands, norm = client_summands(result.delta, weight, reported)
      outputs = (result.client_state, result.loss, norm, tree_all_finite(result.delta),
                 result.delta if algo.needs_client_deltas else None, result.upload,
                 None if client_probe is None else client_probe(
                     jax.tree.map(jnp.subtract, params, result.delta), concept))
      return summands, outputs

    def run_clients(params, payload, data, client_key, concept, args):
      sums, outputs = map_reduce_clients(
          lambda a: one_client(params, payload, data, client_key, concept, a), args, chunk)
      if devices > 1:  # each device summed its share of the cohort
        sums = jax.lax.psum(sums, 'clients')
      return sums, outputs

    if devices > 1:
      run_clients = jax.shard_map(run_clients, mesh=client_mesh(devices),
                                  in_specs=(P(), P(), P(), P(), P(), P('clients')),
                                  out_specs=(P(), P('clients')), check_vma=False)
    # Largest H_i first (a stable order: equal steps keep the sampling order), so that a
    # vmapped chunk, or one position across vmapped runs, holds clients of like work
    # (benchmarks/step_ratio.py); outputs come back in sampling order.
    order = largest_first(num_steps) if steps_differ else None
    args = _permuted((ids, rows, counts, hists, num_steps, spe, factors, old_states, reports),
                     order)
    sums, outputs = run_clients(state.params, payload, data, client_key, concept, args)
    new_states, losses, norms, client_finite, deltas, uploads, probes = _permuted(
        outputs, None if order is None else jnp.argsort(order))
    if reports is not None:  # a client that never reported keeps its state
      new_states = unreliable_clients.keep_unreported(reports, new_states, old_states)

    cohort = Cohort(ids, weights, counts, num_steps, sums['weighted'], deltas, old_states,
                    new_states, num_clients, uploads, key=jax.random.fold_in(rkey, 4))
    # server_update returns (params, server) or (params, server, aux) (state.py).
    params, server, *aux = algo.server_update(state.params, state.server, cohort)
    metrics = drift_diagnostics(sums, norms, losses, weights, reports)
    if unreliable is not None:
      metrics.update(unreliable_clients.diagnostics(reports, num_steps))
    metrics.update(_diagnostics(algo, server))
    metrics.update(_diagnostics(scenario, state.scenario, concept))
    if client_probe is not None or keep_aux:
      metrics['diag'] = {'ids': ids, 'client': probes,
                         'server': (aux[0] if aux else {}) if keep_aux else {}}
    finite = tree_all_finite(params) & jnp.all(client_finite)
    # The first cohort member whose update is non-finite (-1 if none), for the error message.
    metrics['bad_client'] = jnp.where(jnp.all(client_finite), -1,
                                      ids[jnp.argmin(client_finite)])
    return freeze_if_diverged(state, finite, params, server, slots, new_states, old_states,
                              concept), metrics

  return round_fn


def cohort_weights(counts, weighting, cohort_size, members=None):
  """The aggregation weights p_i [K] of a cohort: n_i / sum_j n_j ('examples') or 1/K
  (otherwise). members (None: all K take part): bool [K], the first k of a cohort masked up
  to K (make_round's cohort_k); the others weigh 0 and the members' weights are, bit for bit,
  those of the lone cohort of k."""
  if members is None:
    if weighting == 'examples':
      return counts.astype(jnp.float32) / jnp.sum(counts)
    return jnp.full((cohort_size,), 1.0 / cohort_size, jnp.float32)
  if weighting == 'examples':
    kept = jnp.where(members, counts, 0)
    return kept.astype(jnp.float32) / jnp.sum(kept)
  k = jnp.sum(members.astype(jnp.int32)).astype(jnp.float32)
  return jnp.where(members, 1.0 / k, 0.0).astype(jnp.float32)


def draw_cohort(state, data, rkey, concept, scenario, cohort_size, sampler, cohorts):
  """This round's cohort: (ids [K], rows [K, max n] into data, counts [K], label
  histograms [K, C]). A stateless scenario draws fresh clients (ids 0..K-1); else the clients
  are sampled (or read from `cohorts`) as cohort_ids says. Under concept shift the
  histograms count the relabelled classes."""
  if scenario.fresh_cohort is not None:  # stateless: new clients every round
    rows, counts = scenario.fresh_cohort(data, jax.random.fold_in(rkey, 3), cohort_size)
    ids = jnp.arange(cohort_size, dtype=jnp.int32)
    valid = jnp.arange(rows.shape[1])[None, :] < counts[:, None]
    num_classes = data.label_hist.shape[1]
    hists = jax.vmap(lambda r, v: jnp.zeros(num_classes).at[data.y[r]].add(v))(
        rows, valid.astype(jnp.float32))
  else:
    ids = cohort_ids(state, data, cohort_size, sampler, cohorts)
    rows, counts, hists = data.client_index[ids], data.client_count[ids], data.label_hist[ids]
  if scenario.name == 'concept_shift':  # histograms of the relabelled classes
    classes = jnp.arange(hists.shape[1], dtype=jnp.int32)
    hists = hists @ jax.nn.one_hot(scenario.relabel(concept, classes), hists.shape[1])
  return ids, rows, counts, hists


def largest_first(num_steps):
  """The permutation that orders a cohort by local steps, largest first; clients with equal
  steps keep their order (stable), so equal steps give the identity."""
  return jnp.argsort(-num_steps, stable=True)


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

"""The compiled simulator: rounds as pure functions, segments of rounds in one `lax.scan`.

The engine knows nothing about any algorithm: it samples a cohort, gathers each client's
state and data, maps `algo.client_update` over the cohort, hands the stacked results to
`algo.server_update`, and scatters the new per-client state back. One compiled program runs a
whole segment of rounds; the host wakes only between segments.

Client parallelism: the cohort is processed `cohort_chunk` clients at a time. Inside a chunk
clients are vmapped; chunks run one after another (`lax.map` with `batch_size`). chunk=1 is
fully sequential, chunk=K fully vmapped. On this CPU, vmapping conv layers over clients is
several times slower than running them one by one (benchmarks/), so `auto` picks sequential
for conv models on CPU and vmap otherwise.

Randomness is derived: round t uses fold_in(run_key, t); the cohort uses fold_in(., 0) and
client i's batches fold_in(fold_in(., 1), i), so results do not depend on the strategy, the
chunk width or the client's position in the cohort.
"""
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_drift.data.federated import FederatedData, to_float
from fedjax_drift.data import shuffle
from fedjax_drift.state import Batch, Client, Cohort, FederatedAlgorithm, ServerState


class Schedule(NamedTuple):
  """Local work: exactly one of local_steps / local_epochs is set (static)."""
  batch_size: int            # 0 = the client's full data every step
  local_steps: int = 0       # H, the same for every client
  local_epochs: int = 0      # E: client i runs E * ceil(n_i / B) steps


def steps_per_epoch(counts, batch_size):
  """ceil(n_i / B), or 1 with full-batch steps (works on numpy and jax arrays)."""
  if batch_size == 0:
    return counts * 0 + 1
  return (counts + batch_size - 1) // batch_size


def client_steps(counts, schedule: Schedule):
  """H_i for every client (works on numpy and jax arrays)."""
  if schedule.local_steps:
    return counts * 0 + schedule.local_steps
  return steps_per_epoch(counts, schedule.batch_size) * schedule.local_epochs


def max_steps(counts: np.ndarray, schedule: Schedule) -> int:
  return int(np.max(client_steps(np.asarray(counts), schedule)))


def choose_parallelism(requested, family, backend, cohort_size, chunk=0):
  """Returns (chunk width, reason). See the module docstring and benchmarks/ for the numbers."""
  if chunk:
    return min(chunk, cohort_size), f'--cohort_chunk={chunk}'
  if requested == 'vmap':
    return cohort_size, '--client_parallelism=vmap'
  if requested == 'sequential':
    return 1, '--client_parallelism=sequential'
  if backend == 'cpu' and family == 'conv':
    return 1, 'auto: conv model on CPU, where vmapped convs are slower than sequential'
  return cohort_size, f'auto: {family} model on {backend}, vmap over the cohort'


def make_batch_fn(data: FederatedData, row, count, key, batch_size, spe, relabel=None):
  """step -> Batch for the client whose examples are row[:count]: every epoch visits each
  example once in a fresh shuffled order, the last partial batch masked. The order is read
  at the batch's B positions only (data/shuffle.py), never sorted. relabel maps labels (a
  scenario's current concept)."""
  max_n = row.shape[0]
  relabel = relabel or (lambda y: y)
  if batch_size == 0:
    def full_batch(step):
      del step
      mask = (jnp.arange(max_n) < count).astype(jnp.float32)
      return Batch(to_float(data.x[row]), relabel(data.y[row]), mask)
    return full_batch

  seed = jax.random.bits(key, (), jnp.uint32)

  def batch(step):
    epoch, b = step // spe, step % spe
    position = b * batch_size + jnp.arange(batch_size)  # in this epoch's shuffled order
    idx = row[shuffle.index_shuffle(position, count, shuffle.derive_seed(seed, epoch))]
    mask = (position < count).astype(jnp.float32)  # the epoch's last batch may be partial
    return Batch(to_float(data.x[idx]), relabel(data.y[idx]), mask)

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


def _per_client_dot(a, b):
  """sum over parameters of a_i * b_i, per client; leaves are [K, ...]."""
  return sum(jnp.sum((x * y).reshape(x.shape[0], -1), axis=1)
             for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def drift_diagnostics(deltas, losses, weights):
  """Per-round measures of client drift, leaf by leaf (no [K, P] concatenation in memory)."""
  sq_norms = _per_client_dot(deltas, deltas)
  mean = jax.tree.map(lambda d: jnp.mean(d, axis=0), deltas)
  mean_norm = jnp.sqrt(sum(jnp.sum(m * m) for m in jax.tree.leaves(mean)))
  dots = sum(jnp.sum((d * m[None]).reshape(d.shape[0], -1), axis=1)
             for d, m in zip(jax.tree.leaves(deltas), jax.tree.leaves(mean)))
  norms = jnp.sqrt(sq_norms)
  return {
      'update_norm': jnp.mean(norms),
      'mean_update_norm': mean_norm,
      'update_cosine': jnp.mean(dots / jnp.maximum(norms * mean_norm, 1e-30)),
      'client_loss_std': jnp.std(losses),
      'train_loss': jnp.sum(weights * losses),
  }, sq_norms


def map_clients(fn, args, chunk):
  """fn over the leading (cohort) axis of args: vmapped in chunks of `chunk`, chunks in turn."""
  size = jax.tree.leaves(args)[0].shape[0]
  if chunk >= size:
    return jax.vmap(fn)(args)
  return jax.lax.map(fn, args, batch_size=chunk if chunk > 1 else None)


def client_mesh(devices: int):
  """A 1-D mesh over the first `devices` devices; the cohort axis is split along it."""
  from jax.sharding import Mesh  # pylint: disable=g-import-not-at-top
  return Mesh(np.array(jax.devices()[:devices]), ('clients',))


def make_round(algo: FederatedAlgorithm, schedule: Schedule, max_local_steps: int,
               cohort_size: int, weighting: str = 'examples', chunk: int = 1,
               sampler: str = 'uniform', devices: int = 1, scenario=None):
  """Returns round_fn(state, data) -> (state, metrics), pure and jittable.

  devices > 1 splits the cohort over a device mesh (jax.shard_map): each device runs its
  K/devices clients with the same chunking; the aggregation over the sharded cohort axis
  becomes an all-reduce. Params, payload and data are replicated.

  scenario (data/scenarios.py) may change labels before each round (concept shift) or draw
  fresh, stateless clients every round; the default leaves the partition as it is.
  """
  from fedjax_drift.data import scenarios  # pylint: disable=g-import-not-at-top
  scenario = scenario or scenarios.static()

  def round_fn(state: ServerState, data: FederatedData):
    num_clients = data.client_count.shape[0]
    rkey = jax.random.fold_in(state.key, state.round)
    concept = scenario.before_round(state.scenario, jax.random.fold_in(rkey, 2))
    if scenario.fresh_cohort is not None:  # stateless: new clients every round
      rows, counts = scenario.fresh_cohort(data, jax.random.fold_in(rkey, 3), cohort_size)
      ids = jnp.arange(cohort_size, dtype=jnp.int32)
      valid = jnp.arange(rows.shape[1])[None, :] < counts[:, None]
      num_classes = data.label_hist.shape[1]
      hists = jax.vmap(lambda r, v: jnp.zeros(num_classes).at[data.y[r]].add(v))(
          rows, valid.astype(jnp.float32))
    else:
      if sampler == 'cover_classes':
        ids = sample_covering_cohort(jax.random.fold_in(rkey, 0), data.label_hist, cohort_size)
      else:
        ids = sample_cohort(jax.random.fold_in(rkey, 0), num_clients, cohort_size)
      rows, counts, hists = data.client_index[ids], data.client_count[ids], data.label_hist[ids]
    if scenario.name == 'concept_shift':  # histograms of the relabelled classes
      hists = hists @ jax.nn.one_hot(concept, hists.shape[1])
    client_key = jax.random.fold_in(rkey, 1)
    payload = algo.broadcast(state.params, state.server)
    old_states = _gather(state.clients, ids)
    num_steps = client_steps(counts, schedule).astype(jnp.int32)
    spe = steps_per_epoch(counts, schedule.batch_size)

    def one_client(params, payload, data, client_key, concept, args):
      cid, row, count, hist, steps, spe_i, cstate = args
      key = jax.random.fold_in(client_key, cid)
      client = Client(cid, count, steps, max_local_steps, hist,
                      make_batch_fn(data, row, count, key, schedule.batch_size, spe_i,
                                    lambda y: scenario.relabel(concept, y)))
      return algo.client_update(params, payload, cstate, client, key)

    def run_clients(params, payload, data, client_key, concept, args):
      return map_clients(lambda a: one_client(params, payload, data, client_key, concept, a),
                         args, chunk)

    args = (ids, rows, counts, hists, num_steps, spe, old_states)
    if devices > 1:
      from jax.sharding import PartitionSpec as P  # pylint: disable=g-import-not-at-top
      results = jax.shard_map(run_clients, mesh=client_mesh(devices),
                              in_specs=(P(), P(), P(), P(), P(), P('clients')),
                              out_specs=P('clients'), check_vma=False)(
                                  state.params, payload, data, client_key, concept, args)
    else:
      results = run_clients(state.params, payload, data, client_key, concept, args)

    if weighting == 'examples':
      weights = counts.astype(jnp.float32) / jnp.sum(counts)
    else:
      weights = jnp.full((cohort_size,), 1.0 / cohort_size, jnp.float32)
    cohort = Cohort(ids, weights, counts, num_steps, results.delta, old_states,
                    results.client_state, num_clients)
    params, server = algo.server_update(state.params, state.server, cohort)
    clients = _scatter(state.clients, ids, results.client_state)
    metrics, sq_norms = drift_diagnostics(results.delta, results.loss, weights)
    finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(a)) for a in jax.tree.leaves(params)]))
    client_finite = jnp.isfinite(sq_norms)
    metrics['finite'] = finite & jnp.all(client_finite)
    # The first cohort member whose update is non-finite (-1 if none), for the error message.
    metrics['bad_client'] = jnp.where(jnp.all(client_finite), -1,
                                      ids[jnp.argmin(client_finite)])
    return ServerState(params, server, clients, state.round + 1, state.key, concept), metrics

  return round_fn


def make_segment(round_fn, length: int):
  """A compiled program running up to `length` rounds; `num_rounds` (traced) says how many.

  Every segment has the same static length, so the final, shorter segment reuses the same
  compiled program (its extra iterations are skipped by `lax.cond`): one compilation per run.
  """

  def segment(state, data, num_rounds):
    metric_shapes = jax.eval_shape(round_fn, state, data)[1]

    def body(s, i):
      def run(s):
        return round_fn(s, data)

      def skip(s):
        return s, jax.tree.map(lambda m: jnp.zeros(m.shape, m.dtype), metric_shapes)

      return jax.lax.cond(i < num_rounds, run, skip, s)

    return jax.lax.scan(body, state, jnp.arange(length))

  return jax.jit(segment, donate_argnums=0)


def init_state(algo: FederatedAlgorithm, params, num_clients: int, key,
               scenario=None) -> ServerState:
  one = algo.init_client(params)
  clients = jax.tree.map(lambda a: jnp.broadcast_to(a, (num_clients,) + a.shape).copy(), one)
  scenario_state = scenario.init(jax.random.fold_in(key, 7)) if scenario is not None else ()
  return ServerState(params, algo.init(params), clients, jnp.zeros((), jnp.int32), key,
                     scenario_state)


def make_evaluator(apply_fn, batch_size: int = 1000):
  """Jitted (params, x, y) -> (mean loss, accuracy) over a whole split, batched with masks."""

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
      logits = apply_fn(params, to_float(xb))
      losses = -jnp.take_along_axis(jax.nn.log_softmax(logits), yb[:, None], 1)[:, 0]
      correct = (jnp.argmax(logits, -1) == yb).astype(jnp.float32)
      return jnp.sum(losses * mb), jnp.sum(correct * mb)

    loss_sum, correct_sum = jax.lax.map(one, (xp, yp, mp))
    return jnp.sum(loss_sum) / n, jnp.sum(correct_sum) / n

  return evaluate

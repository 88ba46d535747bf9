"""The per-client state table in host memory (--client_state=host), the cohort's rows copied
to the device and back each round.

At paper scale the per-client table is what cannot fit on a device: SCAFFOLD's c_i and
FedDyn's gradients are one model per client (FedDyn on ResNet-18 with 1,000 clients: 44.7
GB). With --client_state=host the study keeps the table as numpy arrays [R, N, ...]
(ServerState.clients, R runs). Before each round the host asks a small compiled program for
every run's cohort (sampling.cohort_ids: the very draw the round makes), gathers those K rows,
and the round program (engine.make_round with cohort_rows) reads and writes them by
position; after the round the host scatters them back. The device holds K rows per run, not
N, and a round moves 2 x K rows per run (in and out): `bytes_per_round`. Everything else is
as with the table on the device (the same round program but for the gather's index), so
results are bit-identical, and checkpoints hold the whole table as before (resume, sweeps).
The host runs one round per call, as it must copy rows between rounds.
"""
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_drift import sampling
from fedjax_drift.data.federated import nbytes as federated_nbytes
from fedjax_drift.state import ServerState


def enabled(client_state) -> bool:
  """Whether --client_state (its value) keeps the per-client table in host memory."""
  return client_state == 'host'


def bytes_per_round(table, cohort_size: int) -> int:
  """Bytes copied each round for a table [R, N, ...]: K rows of every run in, and out."""
  leaves = jax.tree.leaves(table)
  if not leaves:
    return 0
  num_clients = leaves[0].shape[1]
  return 2 * federated_nbytes(table) * cohort_size // max(num_clients, 1)


def device_state(state: ServerState, cohort_size: int) -> ServerState:
  """`state` as the round program takes it: clients [R, K, ...] shapes, the table's rows
  (for lowering: jax.ShapeDtypeStruct leaves)."""
  return state._replace(clients=jax.tree.map(
      lambda a: jax.ShapeDtypeStruct((a.shape[0], cohort_size) + a.shape[2:], a.dtype),
      state.clients))


def on_host(state: ServerState) -> ServerState:
  """`state` with its client table as writable numpy arrays (a restored checkpoint's may be
  device arrays or read-only)."""
  return state._replace(clients=jax.tree.map(
      lambda a: a if isinstance(a, np.ndarray) and a.flags.writeable else np.array(a),
      state.clients))


def cohort_program(clients_per_round, cohort_sampler):
  """Jitted (state without its table, data, inputs) -> int32 [R, K]: the cohort of every
  run's next round, drawn as engine.make_round draws it (study.Study's data and inputs) with
  --clients_per_round and --cohort_sampler."""

  def ids(state, data, inputs):
    cohorts = inputs.get('cohorts')  # --cohorts=file:, shared by every run

    def one(key, rnd, count, hist):
      return sampling.cohort_ids(ServerState((), (), (), rnd, key), data._replace(
          client_count=count, label_hist=hist), clients_per_round, cohort_sampler, cohorts)

    return jax.vmap(one)(state.key, state.round, data.client_count, data.label_hist)

  return jax.jit(ids)


def gather(table, ids: np.ndarray):
  """Rows ids [R, K] of a table [R, N, ...]: numpy [R, K, ...]."""
  runs = np.arange(ids.shape[0])[:, None]
  return jax.tree.map(lambda a: a[runs, ids], table)


def scatter(table, ids: np.ndarray, rows) -> None:
  """Writes rows [R, K, ...] into the table [R, N, ...] at ids [R, K], in place."""
  runs = np.arange(ids.shape[0])[:, None]
  for a, r in zip(jax.tree.leaves(table), jax.tree.leaves(rows)):
    a[runs, ids] = np.asarray(r)


def run_round(segment, cohort_fn, state: ServerState, data, inputs, num_rounds=1):
  """One round of a compiled segment with the table in host memory: gathers the cohort's
  rows, runs the round on them, scatters the new rows back. Called as the segment is
  (num_rounds must be 1: the next cohort's rows are gathered after this round's are back).
  Returns (state with the whole, updated table, the segment's metrics)."""
  if int(num_rounds) != 1:
    raise ValueError(f'--client_state=host runs one round per call, not {int(num_rounds)}')
  table = state.clients
  light = state._replace(clients=())
  ids = np.asarray(cohort_fn(light, data, inputs))
  rows = jax.device_put(gather(table, ids))
  new, metrics = segment(light._replace(clients=rows), data, inputs, jnp.int32(1))
  scatter(table, ids, jax.device_get(new.clients))
  return new._replace(clients=table), metrics

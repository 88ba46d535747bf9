"""A round's cohort: who takes part, how much each weighs, and in which order they run.

The clients are sampled uniformly without replacement in-jit (`sample_cohort`), or so that
their labels cover every class (`sample_covering_cohort`, --cohort_sampler=cover_classes), or
read from --cohorts' file, row `state.round` (`cohort_ids`); a stateless scenario draws fresh
clients instead (`draw_cohort`). The draw reads only the state's key and round, so the host
can make the very same draw before the round (host_state.py). engine.make_round calls these.
"""
import jax
import jax.numpy as jnp

from fedjax_drift.data.federated import FederatedData
from fedjax_drift.state import ServerState


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
  if scenario.relabels:  # histograms of the relabelled classes (concept shift)
    classes = jnp.arange(hists.shape[1], dtype=jnp.int32)
    hists = hists @ jax.nn.one_hot(scenario.relabel(concept, classes), hists.shape[1])
  return ids, rows, counts, hists


def largest_first(num_steps):
  """The permutation that orders a cohort by local steps, largest first; clients with equal
  steps keep their order (stable), so equal steps give the identity."""
  return jnp.argsort(-num_steps, stable=True)

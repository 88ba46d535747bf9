"""Unreliable clients: sampled clients that never report, and stragglers that do part of the work.

Both are drawn inside the compiled round from the round's key and each client's id, so a run
repeats exactly, a resumed run equals an uninterrupted one, and the draws do not depend on the
cohort order or on how clients are run:

dropout (--dropout_prob q): each sampled client independently never reports, with probability
  q. It runs no local step, its per-client state stays as it was, and the aggregation ignores
  it: the weights p_i of the clients that report are renormalised to sum to 1 (all zero when
  none reports, so the model does not move, beyond a server optimizer's own momentum).
  Algorithms that read every client's delta see a zero delta for it.
stragglers (--straggler_frac f, --straggler_min_steps m): each sampled client independently
  straggles with probability f and then runs s_i steps, uniform over {min(m, H_i), ..., H_i},
  instead of its H_i. The aggregation weighs its update as any other (FedAvg); FedNova
  (algorithms/fednova.py) normalises by the steps each client ran.

With both probabilities at a static 0 the round is built without either (`from_values` gives
None), so the program and its results are exactly those without these flags. Gridded, they
are traced, and a zero changes no weight and no step count. With either flag, rounds.csv has
each round's reported_clients and mean_local_steps (`diagnostics`).
"""
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp

from fedjax_drift.algorithms import local


class Unreliable(NamedTuple):
  dropout_prob: Any = 0.0     # q, a float or a traced scalar
  straggler_frac: Any = 0.0   # f, a float or a traced scalar
  straggler_min_steps: int = 1  # m, static


def from_values(dropout_prob, straggler_frac, straggler_min_steps=1) -> Optional[Unreliable]:
  """The round's Unreliable, or None when both probabilities are a static 0."""
  if local.is_off(dropout_prob) and local.is_off(straggler_frac):
    return None
  return Unreliable(dropout_prob, straggler_frac, straggler_min_steps)


def draw(unreliable: Unreliable, key, ids, num_steps):
  """(reports [K] bool, steps [K] int32) for the cohort `ids`: who reports this round and how
  many local steps each client runs (0 for one that does not report). key: the round's key for
  these draws; client i's come from fold_in(key, id_i)."""

  def one(cid, steps):
    k_drop, k_slow, k_steps = jax.random.split(jax.random.fold_in(key, cid), 3)
    reports = jax.random.uniform(k_drop) >= unreliable.dropout_prob
    low = jnp.minimum(unreliable.straggler_min_steps, steps)
    slow = jax.random.randint(k_steps, (), low, steps + 1)
    straggles = jax.random.uniform(k_slow) < unreliable.straggler_frac
    steps = jnp.where(straggles, slow, steps)
    return reports, jnp.where(reports, steps, 0).astype(jnp.int32)

  return jax.vmap(one)(ids, num_steps)


def renormalize(weights, reports):
  """The weights of the reporting clients, renormalised to sum to 1 (all zero if none
  reports); `weights` unchanged when every client reports."""
  kept = jnp.where(reports, weights, 0.0)
  total = jnp.sum(kept)
  scaled = jnp.where(total > 0, kept / jnp.where(total > 0, total, 1.0), 0.0)
  return jnp.where(jnp.all(reports), weights, scaled)


def keep_unreported(reports, new_states, old_states):
  """Per-client state [K, ...]: the new rows of the clients that report, the old of the rest."""
  def pick(new, old):
    mask = reports.reshape(reports.shape + (1,) * (new.ndim - 1))
    return jnp.where(mask, new, old)
  return jax.tree.map(pick, new_states, old_states)


def diagnostics(reports, num_steps) -> dict:
  """The round's rounds.csv columns of unreliable clients, from reports [K] bool (who
  reported) and num_steps [K] int (the local steps each ran, 0 for one that did not):
  reported_clients, how many sampled clients reported, and mean_local_steps, the mean steps
  of those that did (NaN when none did), which stragglers pull below H."""
  m = jnp.sum(reports.astype(jnp.int32))
  steps = jnp.sum(jnp.where(reports, num_steps, 0)).astype(jnp.float32)
  return {'reported_clients': m,
          'mean_local_steps': jnp.where(m > 0, steps / jnp.maximum(m, 1), jnp.nan)}

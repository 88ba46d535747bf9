"""Scenarios: how a federation's data changes from round to round (FedFOR's shifts).

A Scenario is a NamedTuple of pure functions that the engine calls inside the compiled round;
its state lives in ServerState.scenario and is checkpointed with everything else.

  init(key) -> state
  before_round(state, key, done) -> state      e.g. concept shift's label remapping; done =
                                               rounds completed (the round about to run is
                                               done + 1)
  relabel(state, y) -> y                       labels as the current concept defines them
  fresh_cohort(data, key, K) -> (rows, counts) stateless clients drawn anew every round, or None
  diagnostics(state_before, state_after) -> {name: int32 scalar} for the round's metrics
  relabels                                     True where relabel changes labels (the cohort's
                                               label histograms are then relabelled too)

Scenarios:
  static             the partition's clients, labels as given
  concept_shift      FedFOR §4.4: at the start of each round, with probability p (5% in the
                     paper), one class chosen uniformly gets a new label drawn uniformly from
                     the other C - 1 labels, for all clients, permanently (until that class
                     is changed again); train and test labels follow the same map. Its
                     diagnostics name the round's shift: shift_class, shift_label (-1: none).
                     kind='swap': two classes exchange labels instead (shift_other names the
                     second class). count=N: exactly N shifts, at N distinct rounds drawn
                     once at init from 2..R (Table 5: "10 randomly constructed concept
                     shifts" in 200 rounds) and carried in the state, so resume replays them
  longtail_stateless every selected client is a fresh sample: each training example is kept
                     with probability fraction * ratio^(rank_c / (C - 1)), with a random class
                     ranking per client (FedFOR's Imbalanced CIFAR-10 prior shift: 10% of the
                     data trimmed to a long tail, ~2.5% per client for ratio 0.01, C = 10);
                     no client returns, so no per-client state survives
"""
import math
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_drift import registry


class Scenario(NamedTuple):
  name: str
  init: Callable
  before_round: Callable
  relabel: Callable
  fresh_cohort: Optional[Callable] = None
  max_examples: int = 0  # static row width of fresh clients
  diagnostics: Callable = lambda before, after: {}
  relabels: bool = False  # relabel changes labels: the cohort's label histograms follow it


class ScenarioInfo(NamedTuple):
  """A scenario entry's info (None: ScenarioInfo()). fresh_clients: every round's clients are
  drawn afresh from the whole training set and none returns (its Scenario has a fresh_cohort),
  so no flag can name, keep or hold out a client."""
  fresh_clients: bool = False


def fresh_clients(name) -> bool:
  """Whether --scenario=name draws new clients every round (False for a name no entry has:
  the flag checks refuse it)."""
  entry = registry.find('scenario', name)
  return entry is not None and entry.info is not None and entry.info.fresh_clients


def static():
  return Scenario('static', init=lambda key: (), before_round=lambda s, key, done: s,
                  relabel=lambda s, y: y)


KINDS = ('relabel', 'swap')


class ShiftSchedule(NamedTuple):
  """Concept shift's state with an exact shift count: the label map and the (1-based) rounds
  at whose start a shift happens. Without a count the state is the bare label map."""
  label_map: jax.Array    # int32 [C]: class c's current label
  shift_rounds: jax.Array  # int32 [N], distinct, each in 2..R


def label_map_of(state):
  """The int32 [C] label map of a concept-shift state (bare map or ShiftSchedule)."""
  return state.label_map if isinstance(state, ShiftSchedule) else state


def relabel_map(label_map, k_class, k_to, num_classes):
  """FedFOR §4.4's shift: one class chosen uniformly gets a label uniform over the C - 1
  labels other than its current one ("changed to a different one"). Two classes then share a
  label (a merge) unless the new label was already vacated by an earlier shift."""
  c = jax.random.randint(k_class, (), 0, num_classes)
  new_label = (label_map[c] + jax.random.randint(k_to, (), 1, num_classes)) % num_classes
  return label_map.at[c].set(new_label)


def swap_map(label_map, k_class, k_other, num_classes):
  """Two distinct classes, drawn uniformly, exchange their current labels (a permutation
  stays a permutation: no class is merged with another)."""
  c = jax.random.randint(k_class, (), 0, num_classes)
  d = (c + jax.random.randint(k_other, (), 1, num_classes)) % num_classes
  return label_map.at[c].set(label_map[d]).at[d].set(label_map[c])


def draw_shift_rounds(key, count, rounds):
  """`count` distinct rounds from 2..rounds, sorted (round 1 is left out so that the first
  concept is trained at least one round and a shift has a pre-shift accuracy to regain)."""
  picked = jax.random.choice(key, rounds - 1, (count,), replace=False) + 2
  return jnp.sort(picked).astype(jnp.int32)


def concept_shift(num_classes, prob, kind='relabel', count=0, rounds=0):
  """FedFOR §4.4. prob: chance of a shift before each round (used when count == 0); kind:
  'relabel' (one class to another label) or 'swap' (two classes exchange labels); count > 0:
  exactly that many shifts at rounds drawn at init from 2..rounds (see draw_shift_rounds)."""
  if kind not in KINDS:
    raise ValueError(kind)
  if count and not 0 < count <= rounds - 1:
    raise ValueError(f'count {count} needs 2..{rounds} to hold it')
  shift_fn = relabel_map if kind == 'relabel' else swap_map

  def init(key):
    label_map = jnp.arange(num_classes, dtype=jnp.int32)
    if not count:
      return label_map
    return ShiftSchedule(label_map, draw_shift_rounds(key, count, rounds))

  def before_round(state, key, done):
    label_map = jnp.asarray(label_map_of(state))
    k_shift, k_class, k_to = jax.random.split(key, 3)  # the keys of the first version
    if count:
      shift = jnp.any(state.shift_rounds == done + 1)
    else:
      shift = jax.random.uniform(k_shift) < prob
    new = jnp.where(shift, shift_fn(label_map, k_class, k_to, num_classes), label_map)
    return state._replace(label_map=new) if count else new

  def diagnostics(before, after):
    changed = label_map_of(before) != label_map_of(after)
    any_change = jnp.any(changed)
    c = jnp.where(any_change, jnp.argmax(changed), -1).astype(jnp.int32)
    out = {'shift_class': c,
           'shift_label': jnp.where(c >= 0, label_map_of(after)[c], -1).astype(jnp.int32)}
    if kind == 'swap':  # the second class (the last changed one); relabel rows keep 2 columns
      last = num_classes - 1 - jnp.argmax(changed[::-1])
      out['shift_other'] = jnp.where(any_change, last, -1).astype(jnp.int32)
    return out

  return Scenario('concept_shift', init=init, before_round=before_round,
                  relabel=lambda state, y: label_map_of(state)[y], diagnostics=diagnostics,
                  relabels=True)


def longtail_stateless(y_train, num_classes, fraction=0.1, ratio=0.01):
  """Fresh long-tailed clients every round (see the module docstring)."""
  y_np = np.asarray(y_train)
  class_max = np.bincount(y_np, minlength=num_classes).max()
  shares = ratio ** (np.arange(num_classes) / max(num_classes - 1, 1))
  expected = fraction * class_max * shares.sum()  # an upper bound on the mean client size
  width = int(math.ceil(expected + 6 * math.sqrt(expected) + 16))

  def fresh_cohort(data, key, cohort_size):
    n = data.y.shape[0]

    def one(k):
      k_order, k_keep = jax.random.split(k)
      rank = jnp.argsort(jax.random.permutation(k_order, num_classes))  # rank of each class
      keep_p = fraction * ratio ** (rank[data.y] / max(num_classes - 1, 1))
      keep = jax.random.uniform(k_keep, (n,)) < keep_p
      row = jnp.nonzero(keep, size=width, fill_value=0)[0].astype(jnp.int32)
      return row, jnp.minimum(jnp.sum(keep), width).astype(jnp.int32)

    return jax.vmap(one)(jax.random.split(key, cohort_size))

  return Scenario('longtail_stateless', init=lambda key: (), before_round=lambda s, key, done: s,
                  relabel=lambda s, y: y, fresh_cohort=fresh_cohort, max_examples=width)


# --- Registration -----------------------------------------------------------------------------
registry.register('scenario', 'static', 'the partition\'s clients, labels as given',
                  build=lambda v, **_: static())


@registry.registers('scenario', 'concept_shift', 'each class is remapped to another label with '
                    '--concept_shift_prob before each round',
                    reads=('concept_shift_prob', 'concept_shift_kind', 'concept_shift_count'))
def _concept_shift(v, num_classes, **_):
  # With an exact count of shifts, concept_shift ignores the per-round chance.
  return concept_shift(num_classes, v.concept_shift_prob, v.concept_shift_kind,
                       v.concept_shift_count, v.rounds)


@registry.registers('scenario', 'longtail_stateless', 'every selected client is a fresh '
                    'long-tailed sample; none returns', reads=('imbalance_ratio',
                                                               'client_fraction'),
                    info=ScenarioInfo(fresh_clients=True))
def _longtail(v, num_classes, y_train, **_):
  return longtail_stateless(y_train, num_classes, v.client_fraction, v.imbalance_ratio)



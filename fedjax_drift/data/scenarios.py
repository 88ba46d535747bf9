"""Scenarios: how a federation's data changes from round to round (FedFOR's shifts).

A Scenario is a NamedTuple of pure functions that the engine calls inside the compiled round;
its state lives in ServerState.scenario and is checkpointed with everything else.

  init(key) -> state
  before_round(state, key) -> state            e.g. concept shift's label remapping
  relabel(state, y) -> y                       labels as the current concept defines them
  fresh_cohort(data, key, K) -> (rows, counts) stateless clients drawn anew every round, or None
  diagnostics(state_before, state_after) -> {name: int32 scalar} for the round's metrics

Scenarios:
  static             the partition's clients, labels as given
  concept_shift      FedFOR §4.4: at the start of each round, with probability p (5% in the
                     paper), one class chosen uniformly gets a new label drawn uniformly from
                     the other C - 1 labels, for all clients, permanently (until that class
                     is changed again); train and test labels follow the same map. Its
                     diagnostics name the round's shift: shift_class, shift_label (-1: none)
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

NAMES = ('static', 'concept_shift', 'longtail_stateless')


class Scenario(NamedTuple):
  name: str
  init: Callable
  before_round: Callable
  relabel: Callable
  fresh_cohort: Optional[Callable] = None
  max_examples: int = 0  # static row width of fresh clients
  diagnostics: Callable = lambda before, after: {}


def static():
  return Scenario('static', init=lambda key: (), before_round=lambda s, key: s,
                  relabel=lambda s, y: y)


def concept_shift(num_classes, prob):
  """FedFOR §4.4; the state label_map[c] is class c's current label."""

  def before_round(label_map, key):
    label_map = jnp.asarray(label_map)
    k_shift, k_class, k_to = jax.random.split(key, 3)
    shift = jax.random.uniform(k_shift) < prob
    c = jax.random.randint(k_class, (), 0, num_classes)
    # "changed to a different one": uniform over the C - 1 labels other than its current one.
    new_label = (label_map[c] + jax.random.randint(k_to, (), 1, num_classes)) % num_classes
    return jnp.where(shift, label_map.at[c].set(new_label), label_map)

  def diagnostics(before, after):
    changed = before != after
    c = jnp.where(jnp.any(changed), jnp.argmax(changed), -1).astype(jnp.int32)
    return {'shift_class': c, 'shift_label': jnp.where(c >= 0, after[c], -1).astype(jnp.int32)}

  return Scenario('concept_shift', init=lambda key: jnp.arange(num_classes, dtype=jnp.int32),
                  before_round=before_round, relabel=lambda label_map, y: label_map[y],
                  diagnostics=diagnostics)


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

  return Scenario('longtail_stateless', init=lambda key: (), before_round=lambda s, key: s,
                  relabel=lambda s, y: y, fresh_cohort=fresh_cohort, max_examples=width)


def from_config(config, dataset):
  """The scenario a run's flags ask for, over its training labels."""
  return get(config.scenario, dataset.num_classes, dataset.y_train, config.concept_shift_prob,
             config.client_fraction, config.imbalance_ratio)


def get(name, num_classes, y_train, concept_shift_prob=0.05, fraction=0.1, ratio=0.01):
  if name == 'static':
    return static()
  if name == 'concept_shift':
    return concept_shift(num_classes, concept_shift_prob)
  if name == 'longtail_stateless':
    return longtail_stateless(y_train, num_classes, fraction, ratio)
  raise ValueError(name)

"""Scenarios: how a federation's data changes from round to round (FedFOR's shifts).

A Scenario is a NamedTuple of pure functions that the engine calls inside the compiled round;
its state lives in ServerState.scenario and is checkpointed with everything else.

  init(key) -> state
  before_round(state, key) -> state            e.g. concept shift's label remapping
  relabel(state, y) -> y                       labels as the current concept defines them
  fresh_cohort(data, key, K) -> (rows, counts) stateless clients drawn anew every round, or None

Scenarios:
  static             the partition's clients, labels as given
  concept_shift      before each round, each class is remapped, globally and permanently,
                     with probability p to another label (FedFOR, concept shift); train and
                     test labels follow the same map
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


def static():
  return Scenario('static', init=lambda key: (), before_round=lambda s, key: s,
                  relabel=lambda s, y: y)


def concept_shift(num_classes, prob):
  """label_map[c] is class c's current label; each round each class moves with prob p."""

  def before_round(label_map, key):
    k_move, k_to = jax.random.split(key)
    move = jax.random.uniform(k_move, (num_classes,)) < prob
    # "Another label": uniform over the C - 1 labels other than the current one.
    offset = jax.random.randint(k_to, (num_classes,), 1, num_classes)
    return jnp.where(move, (label_map + offset) % num_classes, label_map)

  return Scenario('concept_shift', init=lambda key: jnp.arange(num_classes, dtype=jnp.int32),
                  before_round=before_round, relabel=lambda label_map, y: label_map[y])


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

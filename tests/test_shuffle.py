"""The O(B) index shuffle behind local minibatches (data/shuffle.py) and its use per epoch."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_drift import engine
from fedjax_drift.data import federated, shuffle

_orders = jax.jit(jax.vmap(lambda s, n: shuffle.index_shuffle(jnp.arange(12), n, s),
                           in_axes=(0, None)))


@pytest.mark.parametrize('n', [1, 2, 3, 7, 64, 100, 1001])
def test_is_a_permutation_for_every_seed(n):
  fn = jax.jit(lambda s: shuffle.index_shuffle(jnp.arange(n), n, s))
  for seed in range(5):
    np.testing.assert_array_equal(np.sort(np.asarray(fn(jnp.uint32(seed)))), np.arange(n))


def test_orders_are_uniform():
  """Where each element lands, over 40k seeds: the chi-square per cell is 1 +- noise for a
  uniform shuffle (numpy's own permutations give 1.08 +- 0.05 on this statistic)."""
  n = 5
  seeds = jax.random.bits(jax.random.key(0), (40000,), jnp.uint32)
  orders = np.asarray(jax.jit(jax.vmap(
      lambda s: shuffle.index_shuffle(jnp.arange(n), n, s)))(seeds))
  counts = np.stack([(orders == v).sum(0) for v in range(n)])
  expected = len(seeds) / n
  stat = ((counts - expected) ** 2 / expected).sum() / (n * (n - 1))
  assert 0.5 < stat < 2.0, stat
  # every one of the 120 orders occurs, roughly equally often
  _, freq = np.unique(orders, axis=0, return_counts=True)
  assert len(freq) == 120 and freq.min() > 0.6 * len(seeds) / 120


def test_seeds_and_epochs_give_different_orders():
  a = np.asarray(shuffle.index_shuffle(jnp.arange(50), 50, shuffle.derive_seed(7, 0)))
  b = np.asarray(shuffle.index_shuffle(jnp.arange(50), 50, shuffle.derive_seed(7, 1)))
  assert not np.array_equal(a, b)


def test_batches_cover_each_example_once_per_epoch():
  """A client of 10 examples, batch 4: steps 0-2 are epoch 0 (last batch masked to 2)."""
  x = np.arange(30, dtype=np.uint8).reshape(30, 1)
  y = np.arange(30, dtype=np.int32) % 10
  data = federated.build(x, y, [np.arange(5, 15), np.arange(15, 30)], 10)
  batch = engine.make_batch_fn(data, data.client_index[0], 10, jax.random.key(3), 4, 3)
  for epoch in range(3):
    seen = []
    for b in range(3):
      got = batch(epoch * 3 + b)
      values = np.round(np.asarray(got.x)[:, 0] * 255).astype(int)
      seen += list(values[np.asarray(got.mask) > 0])
    assert sorted(seen) == list(range(5, 15)), (epoch, seen)

"""Random access to a shuffled order: the i-th element of a keyed permutation of [0, n).

Local training needs, at each step, the B positions of the current batch in this epoch's
shuffled order. Sorting the client's n examples every step (jax.random.permutation) costs
O(n log n) per step and dominated dense-model rounds on CPU. A keyed permutation evaluated
only at the B positions costs O(B) instead (the index-shuffle idea of Grain and of TF's
`random_index_shuffle`).

The permutation is the swap-or-not shuffle (Hoang, Morris and Rogaway, CRYPTO 2012). Each
round draws an offset K in [0, n) and pairs x with K - x (mod n); a keyed hash of the pair
decides whether to swap. Every round is a bijection of [0, n) itself, so any n works (also a
traced one) without cycle-walking, and the rounds are elementwise, so XLA fuses them.
"""
import functools

import jax
import jax.numpy as jnp

ROUNDS = 32  # uniformity measured in tests/test_shuffle.py
_GOLDEN = 0x9E3779B9
# Rounds run in a loop of 16-round blocks: fully unrolled, 32 rounds made one fusion that
# ran ~30x slower under a 2-device shard_map (measured; 16 were fine).
_UNROLL = 16


def _mix(x):
  """lowbias32 (C. Wellons' integer hash): full avalanche on uint32 in five operations."""
  x = x ^ (x >> 16)
  x = x * jnp.uint32(0x7FEB352D)
  x = x ^ (x >> 15)
  x = x * jnp.uint32(0x846CA68B)
  return x ^ (x >> 16)


def derive_seed(seed, i):
  """A new uint32 seed from `seed` and an int (e.g. the epoch), by hashing."""
  salt = _mix(jnp.asarray(i, jnp.uint32) + jnp.uint32(_GOLDEN))
  return _mix(jnp.asarray(seed, jnp.uint32) ^ salt)


# A jit: traced once per process and shape, not at every trace of a local step (a round's
# trace called it per step and client function: 15 s of a preset's 44 s of tracing).
@functools.partial(jax.jit, static_argnames='rounds')
def index_shuffle(index, n, seed, rounds=ROUNDS):
  """Element `index` (int array, values in [0, n)) of a permutation of [0, n) keyed by the
  uint32 `seed` (derive one from a PRNG key with jax.random.bits). Each seed gives exactly a
  bijection; different seeds give independent-looking ones. Indices outside [0, n) are
  clipped into it (callers mask them). Everything is integer hashing, so a call is a few
  fused elementwise loops, cheap enough to run at every local step."""
  if rounds % _UNROLL:
    raise ValueError(f'rounds must be a multiple of {_UNROLL}, got {rounds}')
  # The barrier keeps XLA from constant-folding a literal n (a folding bug at n=1).
  n = jax.lax.optimization_barrier(jnp.maximum(jnp.asarray(n, jnp.uint32), 1))
  r = jnp.arange(rounds, dtype=jnp.uint32)
  offsets = derive_seed(seed, 2 * r) % n    # K_r in [0, n); modulo bias < n / 2^32
  swap_keys = derive_seed(seed, 2 * r + 1)
  x = jnp.minimum(jnp.asarray(index).astype(jnp.uint32), n - 1)

  def block(j, x):
    for k in j * _UNROLL + jnp.arange(_UNROLL):
      partner = jnp.where(offsets[k] >= x, offsets[k] - x, offsets[k] + n - x)  # K - x mod n
      pair_id = jnp.maximum(x, partner)  # the same for both members of the pair
      swap = (_mix(pair_id ^ swap_keys[k]) >> 31) == 1
      x = jnp.where(swap, partner, x)
    return x

  x = jax.lax.fori_loop(0, rounds // _UNROLL, block, x)
  return x.astype(jnp.int32)

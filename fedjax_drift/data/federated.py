"""The federated dataset as it lives on the device: one copy of the examples plus an index.

x stays in its compact dtype (uint8 images are scaled inside the compiled step); clients are
rows of a padded index table. Everything here is a pytree of arrays, passed to the compiled
segment as an argument (not closed over, so it is not baked into the program as a constant).
"""
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class FederatedData(NamedTuple):
  x: jax.Array             # [n, ...] uint8 or float32 (int32 [n, 2, L] for text)
  y: jax.Array             # [n] int32
  client_index: jax.Array  # [N, max_n] int32, rows padded with 0
  client_count: jax.Array  # [N] int32
  label_hist: jax.Array    # [N, C] float32


def build(x, y, parts, num_classes) -> FederatedData:
  counts = np.array([len(p) for p in parts], np.int32)
  table = np.zeros((len(parts), max(int(counts.max()), 1)), np.int32)
  for i, p in enumerate(parts):
    table[i, :len(p)] = p
  hist = np.stack([np.bincount(y[p], minlength=num_classes) for p in parts]).astype(np.float32)
  return FederatedData(jnp.asarray(x), jnp.asarray(y, jnp.int32), jnp.asarray(table),
                       jnp.asarray(counts), jnp.asarray(hist))


def to_float(x):
  """uint8 images -> float32 in [0, 1]; float features -> float32; other integer arrays
  (text: token ids and attention mask, int32 [..., 2, L]) unchanged, since the model looks
  the ids up in an embedding table."""
  if x.dtype == jnp.uint8:
    return x.astype(jnp.float32) * (1.0 / 255.0)
  if jnp.issubdtype(x.dtype, jnp.integer):
    return x
  return x.astype(jnp.float32)


def nbytes(tree):
  return int(sum(a.size * a.dtype.itemsize for a in jax.tree.leaves(tree)))

"""Global parameters saved by --save_params, read back (--init_params; `study.load_params` builds on it).

The file (simulation.save_params) holds one array per parameter, named by its flax path
('params/Dense_0/kernel', as models.flatten_names), each with a leading run axis in runs.csv
order. Reading picks one run and checks every name and shape against the model's own
parameters, so a file from another model or dataset is refused in one line.
"""
import os
import zipfile

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_drift.errors import UserError


def read(path, run=0) -> dict:
  """{name: array} of run `run` of a --save_params file (the leading run axis removed)."""
  if not os.path.isfile(path):
    raise UserError(f'--init_params: {path} does not exist')
  try:
    with np.load(path, allow_pickle=False) as f:
      arrays = {name: f[name] for name in f.files}
  except (OSError, ValueError, zipfile.BadZipFile) as e:
    raise UserError(f'--init_params: cannot read {path} as npz ({e})') from None
  if not arrays:
    raise UserError(f'--init_params: {path} holds no arrays')
  runs = {a.shape[0] if a.ndim else 0 for a in arrays.values()}
  if len(runs) != 1 or 0 in runs:
    raise UserError(f'--init_params: {path} is not a --save_params file (its arrays do not '
                    'share a leading run axis)')
  count = runs.pop()
  if not 0 <= run < count:
    raise UserError(f'--init_params_run={run}: {path} holds runs 0..{count - 1}')
  return {name: a[run] for name, a in arrays.items()}


def into(template, arrays: dict, path):
  """`template`'s pytree (a model's params) with each leaf replaced by arrays[its name].

  Raises UserError naming `path` and the first array that is missing, extra, of another
  shape, not floating point (int32 is not cast silently) or not finite; float dtypes follow
  the template (the file holds what the run trained in).
  """
  flat, treedef = jax.tree_util.tree_flatten_with_path(template)
  names = ['/'.join(str(getattr(k, 'key', k)) for k in p) for p, _ in flat]  # flatten_names'
  expected = {n: leaf for n, (_, leaf) in zip(names, flat)}
  for name, want in expected.items():
    if name not in arrays:
      raise UserError(f'--init_params: {path} has no array {name!r} of --model\'s parameters '
                      '(saved from another --model or options?)')
    if tuple(arrays[name].shape) != tuple(want.shape):
      raise UserError(f'--init_params: {path} array {name!r} has shape '
                      f'{tuple(arrays[name].shape)}, the model\'s is {tuple(want.shape)} '
                      '(another --model, dataset or class count?)')
    kind = np.asarray(arrays[name]).dtype
    if kind.kind in 'biuOSUcM':  # a cast would hide that this is not a parameter file
      raise UserError(f'--init_params: {path} array {name!r} holds {kind} values; parameters '
                      'are floats (not a --save_params file?)')
    if not np.isfinite(np.asarray(arrays[name], np.float32)).all():
      raise UserError(f'--init_params: {path} array {name!r} holds NaN or infinite values '
                      '(saved from a run that diverged?)')
  extra = sorted(set(arrays) - set(expected))
  if extra:
    raise UserError(f'--init_params: {path} array {extra[0]!r} is not a parameter of this '
                    '--model (saved from another --model or options?)')
  leaves = [jnp.asarray(arrays[n], dtype=leaf.dtype) for n, (_, leaf) in zip(names, flat)]
  return jax.tree_util.tree_unflatten(treedef, leaves)

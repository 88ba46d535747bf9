"""study.py: the runs a config stands for (`plan`), their sentinels resolved and grid points
validated, and what `build` stacks on the run axis; each run as a lone run of its seed would be.

End to end (a sweep against single runs, divergence, resume): test_sweep.py."""
import dataclasses

import jax
import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import config as config_lib
from fedjax_drift import study as study_lib
from helpers import sweep_config


def test_plan_is_grid_points_outer_seeds_inner():
  runs = study_lib.plan(fedjax_drift.Config(seed=5, seeds=2, grid='lr:0.1,0.2'))
  assert [(r.index, r.seed, r.point) for r in runs] == [
      (0, 5, {'lr': 0.1}), (1, 6, {'lr': 0.1}), (2, 5, {'lr': 0.2}), (3, 6, {'lr': 0.2})]
  assert [(r.config.seed, r.config.lr, r.config.seeds) for r in runs] == [
      (5, 0.1, 2), (6, 0.1, 2), (5, 0.2, 2), (6, 0.2, 2)]
  lone = study_lib.plan(fedjax_drift.Config(seed=5))
  assert len(lone) == 1 and lone[0].point == {} and lone[0].config == study_lib.resolve(
      fedjax_drift.Config(seed=5))


def test_resolve_replaces_the_beta_sentinels_only_when_unset():
  resolved = study_lib.resolve(fedjax_drift.Config(beta=0.7))
  assert (resolved.beta_local, resolved.beta_global) == (0.7, 0.7)
  kept = study_lib.resolve(fedjax_drift.Config(beta=0.7, beta_local=0.2, beta_global=0.0))
  assert (kept.beta_local, kept.beta_global) == (0.2, 0.0)


def test_sentinels_resolved_and_grid_points_validated(tiny_npz, tmp_path):
  runs = study_lib.plan(sweep_config(tiny_npz, tmp_path, algo='fedadc', grid='beta:0.5,0.9'))
  assert [(r.config.beta_local, r.config.beta_global) for r in runs] == [(0.5, 0.5),
                                                                        (0.9, 0.9)]
  study = study_lib.build(sweep_config(tiny_npz, tmp_path, algo='fedadc', grid='beta:0.5,0.9'))
  assert set(study.traced) == {'beta', 'beta_local', 'beta_global'}
  np.testing.assert_allclose(study.inputs['hp']['beta_local'], [0.5, 0.9])
  with pytest.raises(fedjax_drift.UserError, match=r'--grid point lr=-1: --lr=-1.0'):
    study_lib.plan(sweep_config(tiny_npz, tmp_path, grid='lr:0.1,-1'))
  with pytest.raises(fedjax_drift.UserError, match='cannot be swept'):
    config_lib.parse_grid('rounds:1,2')
  with pytest.raises(fedjax_drift.UserError, match='must be numbers'):
    config_lib.parse_grid('lr:a,b')
  assert config_lib.grid_points(config_lib.parse_grid('lr:1,2;beta:0.5')) == [
      {'lr': 1.0, 'beta': 0.5}, {'lr': 2.0, 'beta': 0.5}]


def _raw(leaf):
  """An array's values as numpy (a PRNG key's as its key data)."""
  if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
    leaf = jax.random.key_data(leaf)
  return np.asarray(leaf)


def test_build_stacks_each_run_as_its_lone_run(tiny_npz, tmp_path):
  config = sweep_config(tiny_npz, tmp_path, seeds=2)
  study = study_lib.build(config)
  for r, spec in enumerate(study_lib.plan(config)):
    lone = study_lib.prepare(dataclasses.replace(config, seed=spec.seed, seeds=1))
    leaves = [jax.tree.leaves(jax.tree.map(_raw, s)) for s in (study.state, lone.state)]
    assert leaves[1]
    for stacked, own in zip(*leaves):
      np.testing.assert_array_equal(stacked[r], own)


def test_initial_params_are_the_models_own_init(tiny_npz, tmp_path):
  """build compiles init as one program; the values are init's, bit for bit."""
  config = sweep_config(tiny_npz, tmp_path, model='mlp_bn', init='torch')
  run = study_lib.prepare(config)
  eager = run.model.init(jax.random.fold_in(jax.random.key(config.seed), 0))
  assert jax.tree.structure(eager) == jax.tree.structure(run.state.params)
  for built, own in zip(jax.tree.leaves(run.state.params), jax.tree.leaves(eager)):
    assert built.dtype == own.dtype
    np.testing.assert_array_equal(np.asarray(built), np.asarray(own))


def test_studies_on_one_model_share_one_compiled_init(tiny_npz, tmp_path):
  """The process keeps each model's compiled init: a second study on the same model (here
  another learning rate and seed) reuses it; another model gets its own."""
  study_lib.compiled_init.cache_clear()
  study_lib.build(sweep_config(tiny_npz, tmp_path, lr=0.1))
  study_lib.build(sweep_config(tiny_npz, tmp_path, lr=0.2, seed=3))
  assert study_lib.compiled_init.cache_info()[:2] == (1, 1)  # (hits, misses)
  study_lib.build(sweep_config(tiny_npz, tmp_path, model='mlp_bn'))
  assert study_lib.compiled_init.cache_info()[:2] == (1, 2)

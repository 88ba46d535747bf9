"""Set-up, written once: a run is a study of R >= 1 runs (seeds x grid points).

`plan(config)` lists the runs: run r has its own seed (its partition, initial model, cohorts
and batches, derived exactly as a lone run with that seed) and its own grid point, with every
sentinel resolved and every point validated. `build(config)` loads the data once, builds each
run (`prepare` builds one), and stacks their states and client tables on a leading run axis.
The compiled step runs every run's round: `--run_chunk` runs vmapped together, the groups one
after another; inside each run, clients run as `--client_parallelism`/`--cohort_chunk` say and
over `--devices`.

Which flags may be gridded (config.SWEEPABLE): float hyperparameters that only enter arithmetic
(config.GRIDABLE), and scenario axes (config.SCENARIO_AXES). A gridded hyperparameter that
differs between runs is traced, so one program serves every point. A scenario axis is read on
the host: each run's partition is built with its own --dirichlet_alpha / --classes_per_client
as each seed's is, and --local_steps / --local_epochs that differ between runs reach the round
as int32 values on the run axis (`per_run_schedule`), the loop bound the largest run's. Flags
that change shapes or the program's structure (model, algorithm, batch size, number of clients,
variants, buffer sizes) are static and cannot be gridded. A zero that switches a part off
(e.g. --prox_mu=0) skips the part when static; gridded, the part runs with weight 0.
"""
import dataclasses
import functools
import os
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_drift import (algorithms, applies, engine, errors, evaluation, inputs, models,
                          saved, schedules)
from fedjax_drift import diagnostics
from fedjax_drift import unreliable
from fedjax_drift import registry, run_data
from fedjax_drift.config import Config, gridable_fields, grid_points, parse_grid
from fedjax_drift.data import federated, scenarios, sources
from fedjax_drift.data import pipeline as input_pipeline
from fedjax_drift.errors import UserError
from fedjax_drift.state import ServerState


class RunSpec(NamedTuple):
  index: int      # position in runs.csv and on the run axis
  seed: int
  point: dict     # this run's grid values ({} without --grid)
  config: Config  # the user's config at this seed and point, sentinels resolved


class Experiment(NamedTuple):
  """One run, built and ready for its first round; tests use it to step rounds by hand."""
  config: Config
  dataset: sources.Dataset
  train_parts: list          # per-client example indices into dataset.x_train
  test_parts: Any            # list or None
  model: models.Model
  algo: Any
  data: federated.FederatedData
  state: ServerState
  round_fn: Any
  schedule: engine.Schedule
  max_local_steps: int
  chunk: int
  strategy: str
  server_data: Any           # FedGKD-Vote's validation split, or None
  scenario: Any              # data/scenarios.Scenario
  pipeline: Any = None       # data/pipeline.Pipeline: augmentation, normalisation, dropout
  validation: Any = None     # run_data.Validation (config.has_validation), or None
  vote_index: Any = None     # FedGKD-Vote's voting examples (rows of x_train), or None


class Study(NamedTuple):
  """Every run of a config, stacked on a leading run axis padded to a multiple of `width`."""
  config: Config              # the user's config
  runs: list                  # RunSpec, in runs.csv order
  experiments: list           # one Experiment per run (partitions, tables, initial state)
  traced: tuple               # hyperparameters that differ between runs (traced scalars)
  width: int                  # runs vmapped together
  data: federated.FederatedData  # x, y shared; client tables [R_pad, ...]
  inputs: dict                # per-run traced inputs [R_pad, ...]: 'hp', 'server_data'
  state: ServerState          # [R_pad, ...]
  step: Any                   # (state, data, inputs) -> (state, metrics[R_pad]) for all runs
  max_local_steps: int


def resolve(config: Config) -> Config:
  """The config with sentinels replaced by what they stand for (-1 = 'same as --beta')."""
  return dataclasses.replace(
      config, beta_local=config.beta if config.beta_local < 0 else config.beta_local,
      beta_global=config.beta if config.beta_global < 0 else config.beta_global)


def absolutize(config: Config) -> Config:
  """config with every path flag absolute (inputs.absolute_flags of inputs.PATH_FLAGS)."""
  return dataclasses.replace(config, **inputs.absolute_flags(
      {n: getattr(config, n) for n in inputs.PATH_FLAGS}))


def input_flags(config: Config) -> inputs.Flags:
  """The values of config's flags that name the files its runs read (inputs.Flags)."""
  return inputs.Flags(**{n: getattr(config, n) for n in inputs.Flags._fields})


def plan(config: Config) -> list:
  """The runs of `config`: grid points (outer) x seeds (inner), each validated up front."""
  config.validate()
  grid = parse_grid(config.grid)
  applies.check_grid(config, grid)  # an axis nothing reads would only repeat runs
  check_cohort_axis(config, grid)
  diagnostics.check(config.diag_features_rounds, config.diag_features_n,
                    config.personalize_every_eval, config.personalize)
  if config.diag_attention:
    diagnostics.check_attention(algorithms.recipe(config).aggregator, config.scenario)
  runs = []
  for point in grid_points(grid):
    label = ', '.join(f'{k}={v:g}' for k, v in point.items())
    try:
      at_point = dataclasses.replace(config, **point).validate()
    except UserError as e:
      raise UserError(f'--grid point {label}: {e}') from None
    for s in range(config.seeds):
      runs.append(RunSpec(len(runs), config.seed + s, point,
                          resolve(dataclasses.replace(at_point, seed=config.seed + s))))
  return runs


def cohort_axis_algos() -> tuple:
  """The algorithms whose round a cohort masked up to a larger size leaves exactly as the
  lone cohort's (recipes.Recipe.masks_cohort: their server update reads only the weighted sum
  of the deltas): a --grid over --clients_per_round runs with these, without --aggregator or
  --local_terms."""
  return tuple(n for n, r in algorithms.recipes.registered().items() if r.masks_cohort)


def check_cohort_axis(config: Config, grid: dict):
  """UserError, in one line, when `grid` sweeps --clients_per_round over more than one value
  in a run that cannot mask its cohorts (engine.make_round's cohort_k): an algorithm or
  composition reading the whole cohort, class-covering or replayed cohorts, fresh clients,
  or host-held client state."""
  if len(set(grid.get('clients_per_round', ()))) < 2:
    return
  blocked = [f'--{n}={getattr(config, n)}' for n, ok in (
      ('algo', config.algo in cohort_axis_algos()), ('aggregator', not config.aggregator),
      ('local_terms', not config.local_terms),
      ('cohort_sampler', config.cohort_sampler == 'uniform'), ('cohorts', not config.cohorts),
      ('scenario', not scenarios.fresh_clients(config.scenario)),
      ('client_state', config.client_state != 'host')) if not ok]
  if blocked:
    raise UserError(f'--grid: clients_per_round cannot be swept with {blocked[0]} (cohorts are '
                    'masked up to the largest size, exact only for uniform cohorts of '
                    f'{"/".join(cohort_axis_algos())} on device); give one value per command')


class _Shared(NamedTuple):
  dataset: sources.Dataset
  x: jax.Array   # the training examples on the device, once for every run (then x_val's)
  norm: Any = None  # data/pipeline.Normalization (--normalize*), computed once, or None
  y: np.ndarray = None  # labels of x's rows: y_train (then y_val)
  cohorts: Any = None  # --cohorts=file:: [rounds, K] client ids, one row per round, or None


def eval_protocol(config: Config) -> str:
  """The protocol config's runs are tested under (evaluation.resolve of its values)."""
  return evaluation.resolve(config.eval_protocol, config.algo, algorithms.recipe(config),
                            config.partition, config.test_partition)


def _load(config) -> _Shared:
  algorithms.recipe(config)  # fail on a bad --algo / --local_terms before any work
  protocol = eval_protocol(config)  # and on an --eval_protocol the algorithm cannot give
  # or a validation split it cannot score
  evaluation.check_validation(protocol, config.val_source, config.val_fraction)
  dataset = sources.load(config.dataset, config.data_dir or None,
                         **{k: getattr(config, k) for k in sources.load_options()
                            if hasattr(config, k)})
  run_data.check_structure(config, dataset)
  input_pipeline.check(dataset.x_train, config.augment, config.normalize, config.normalize_mean,
                       config.normalize_std)
  x, y = run_data.with_own_validation(config, dataset)
  return _Shared(dataset, jnp.asarray(x),
                 input_pipeline.normalization(dataset.x_train, config.normalize,
                                              config.normalize_mean, config.normalize_std,
                                              config.dataset), y,
                 run_data.read_cohorts(config.cohorts[5:], config.rounds,
                                       config.clients_per_round)
                 if config.cohorts else None)


@functools.lru_cache(maxsize=16)
def compiled_init(model_args) -> Any:
  """key -> the initial params of the model `models.get(**dict(model_args))` names, as one
  compiled program: not each initialiser and each op of init's forward pass compiled on its
  own (eagerly: half of a first CNN run's compilation). Kept for the process, so that every
  run, study and preset method on the same model traces and compiles it once (a preset's
  worker runs many; each study compiling its own was 0.1-0.6 s a run). Bit-identical to the
  eager init (tests/test_study.py)."""
  return jax.jit(models.get(**dict(model_args)).init)


def _build_run(config: Config, shared: _Shared, platform=None) -> Experiment:
  """One run from a resolved config: partition, model, algorithm, tables and initial state.
  platform (None: this process's backend) is the one 'auto' choices are made for
  (`target_choices`)."""
  ds = shared.dataset
  held_out = algorithms.server_validation(config)
  if scenarios.fresh_clients(config.scenario) and held_out:
    raise UserError(f'--scenario={config.scenario} draws clients from the whole training set, '
                    f'so the server validation split of --{held_out} cannot be held out of it')
  train_parts, test_parts, server_data, validation, vote = run_data.partition_run(
      config, ds, shared.norm)
  conv_impl, _ = target_choices(config, platform)
  model_args = dict(name=config.model, num_classes=ds.num_classes,
                    input_shape=tuple(ds.x_train.shape[1:]), init=config.init,
                    projection_dim=algorithms.projection_dim(config), conv_impl=conv_impl,
                    projection_hidden=config.projection_hidden, dropout=config.dropout,
                    gn_groups=config.gn_groups, gn_group_size=config.gn_group_size,
                    vocab_size=ds.vocab_size, pretrained=config.pretrained,
                    gn_eps=config.gn_eps)
  model = models.get(**model_args)
  algo = algorithms.get(config.algo, config, model, server_data)
  schedule = engine.Schedule(config.batch_size, config.local_steps, config.local_epochs)
  # The registered scenario built from the fields it declares, over the training labels.
  scenario = registry.build('scenario', config.scenario, config, num_classes=ds.num_classes,
                            y_train=ds.y_train)
  counts = np.array([len(p) for p in train_parts])
  if scenario.fresh_cohort is not None:
    counts = np.array([scenario.max_examples])
  max_local_steps = engine.max_steps(counts, schedule)
  chunk, strategy = parallelism(config, model.family, platform)
  data = federated.build(shared.x, shared.y, train_parts, ds.num_classes)
  run_key = jax.random.key(config.seed)
  # A --pretrained checkpoint is read inside init: eager, or its weights would become
  # constants of the program.
  init = model.init if config.pretrained else compiled_init(tuple(sorted(model_args.items())))
  params = init(jax.random.fold_in(run_key, 0))
  if config.init_params:  # the same key use as without: only the starting point differs
    params = saved.into(params, saved.read(config.init_params, config.init_params_run),
                        config.init_params)
  state = engine.init_state(algo, params, len(train_parts), jax.random.fold_in(run_key, 1),
                            scenario, host_table=config.client_state == 'host')
  if scenario.fresh_cohort is not None and jax.tree.leaves(state.clients):
    raise UserError(f'--scenario={config.scenario} draws new clients every round, so '
                    f'--algo={config.algo}\'s per-client state would never be used; pick a '
                    'stateless algorithm')
  pipeline = input_pipeline.Pipeline(config.augment, config.augment_pad,
                                     float(config.augment_degrees), shared.norm,
                                     bool(getattr(model, 'has_dropout', False)))
  run_data.check_cohorts(config, shared.cohorts, len(train_parts))
  round_fn = scheduled_round(config, model, server_data, schedule, max_local_steps, chunk,
                             scenario, pipeline, cohorts=shared.cohorts)
  return Experiment(config, ds, train_parts, test_parts, model, algo, data, state, round_fn,
                    schedule, max_local_steps, chunk, strategy, server_data, scenario,
                    pipeline, validation, vote)


def target_choices(config: Config, platform=None):
  """(conv_impl, backend) for a program built for `platform` ('cpu', 'cuda', 'rocm', 'tpu';
  None: this process's backend, where models.get resolves --conv_impl itself). For another
  platform, --conv_impl=auto resolves as it would there (lax on GPU/TPU: models/layers.py),
  so a program can be built and lowered for an accelerator on a host without one."""
  if platform is None or platform == jax.default_backend():
    return config.conv_impl, jax.default_backend()
  entry = registry.find('model', config.model)  # unknown: models.get says so
  convolves = entry is not None and entry.info.family == 'conv'
  return (models.layers.resolve_conv_impl(config.conv_impl, backend=platform,
                                          convolves=convolves), platform)


def parallelism(config, family, platform=None):
  """(client chunk width, reason) of a `family` model ('dense', 'conv', 'text') built for
  `platform` (None: this process's backend, checking --devices against what jax sees there)."""
  _, backend = target_choices(config, platform)
  if platform is None and config.devices > jax.device_count():
    raise errors.too_many_devices(config.devices, jax.device_count(), jax.default_backend())
  return engine.choose_parallelism(config.client_parallelism, family, backend,
                                   config.clients_per_round // config.devices,
                                   config.cohort_chunk)


def prepare(config: Config, platform=None) -> Experiment:
  """The lone run of `config` (its --seed, no grid), built as `build` builds each run, for
  `platform` (None: this process's backend; see `target_choices`)."""
  config.validate()
  return _build_run(resolve(config), _load(config), platform)


def _stack(trees):
  return jax.tree.map(lambda *a: jnp.stack(a), *trees)


def _stack_tables(tables):
  """Client tables of every run on a run axis; index rows padded to a common width."""
  width = max(t.client_index.shape[1] for t in tables)
  if len({t.client_count.shape[0] for t in tables}) > 1:
    raise UserError('the seeds give different numbers of clients; a sweep needs the same '
                    'number in every run')
  index = jnp.stack([jnp.pad(t.client_index, ((0, 0), (0, width - t.client_index.shape[1])))
                     for t in tables])
  return tables[0]._replace(client_index=index,
                            client_count=jnp.stack([t.client_count for t in tables]),
                            label_hist=jnp.stack([t.label_hist for t in tables]))


def state_shapes(runs, shared):
  """(state, client tables) of the first run's set-up as shapes (jax.eval_shape: nothing is
  allocated); every run of a study has the same."""
  config = dataclasses.replace(runs[0].config, client_state='device')  # the same shapes
  return jax.eval_shape(lambda: (lambda e: (e.state, e.data._replace(x=(), y=())))(
      _build_run(config, shared)))


def device_bytes(runs, shared, width, shapes=None) -> int:
  """Bytes a study of `runs` holds on the device before its first round, from shapes alone
  (`state_shapes`, or `shapes` if given): the data once, and per run (padded to a multiple
  of `width`) its state and client tables twice, as the run's own and in the stacked copy
  (Study keeps both until distributed.place drops the runs' own). With --client_state=host
  the per-client state table counts only the cohort's K rows (the rest is in host memory)."""
  state, tables = shapes or state_shapes(runs, shared)
  ds = shared.dataset
  data = sum(int(np.asarray(a).nbytes) for a in (shared.y, ds.x_test, ds.y_test))
  padded = len(runs) + (-len(runs) % width)
  state_bytes = federated.nbytes(state)
  if runs[0].config.client_state == 'host':
    table, cfg = federated.nbytes(state.clients), runs[0].config
    state_bytes -= table - table * cfg.clients_per_round // max(cfg.num_clients, 1)
  return int(shared.x.nbytes + data + 2 * padded * (state_bytes + federated.nbytes(tables)))


def build(config: Config, runs=None, preflight=None, platform=None) -> Study:
  """Every run of `config` (see `plan`), stacked and ready to compile.

  preflight: called with `device_bytes` and one run's per-client state bytes once the data is
  loaded, before any run's state is built; it may raise (simulation's memory check).
  platform: the one the program is for (None: this process's backend; `target_choices`)."""
  runs = runs or plan(config)
  shared = _load(config)
  width = min(config.run_chunk or len(runs), len(runs))
  if preflight is not None:  # (bytes needed, bytes of one run's per-client state table)
    shapes = state_shapes(runs, shared)
    preflight(device_bytes(runs, shared, width, shapes), federated.nbytes(shapes[0].clients))
  experiments = [_build_run(spec.config, shared, platform) for spec in runs]
  padded = experiments + [experiments[-1]] * (-len(runs) % width)  # equal groups
  traced = tuple(n for n in gridable_fields() if len({getattr(s.config, n) for s in runs}) > 1)
  inputs = {'hp': {n: jnp.asarray([getattr(e.config, n) for e in padded], jnp.float32)
                   for n in traced},
            'schedule': per_run_schedule(padded),
            'server_data': (_stack([e.server_data for e in padded])
                            if padded[0].server_data is not None else None)}
  diag = diagnostics.step_inputs(experiments[0])
  if diag is not None:  # shared by every run (no run axis); absent, the step is as without
    inputs['diag'] = diag
  if shared.cohorts is not None:  # --cohorts=file:, the same for every run (no run axis)
    inputs['cohorts'] = jnp.asarray(shared.cohorts)
  max_local_steps = max(e.max_local_steps for e in experiments)
  sizes = [e.config.clients_per_round for e in padded]
  if len(set(sizes)) > 1:  # a --grid over it: each run's k, its cohort masked up to the largest
    inputs['cohort_size'] = jnp.asarray(sizes, jnp.int32)
  step = _make_step(*_widest(runs, experiments, platform), max_local_steps, width)
  state = _stack([e.state._replace(clients=()) for e in padded])
  if config.client_state == 'host':  # numpy [R, N, ...]: the table never enters the device
    state = state._replace(clients=jax.tree.map(lambda *a: np.stack(a),
                                                *[e.state.clients for e in padded]))
    # One host copy: each run's own table is not needed again (only its shape, for the log).
    experiments = [e._replace(state=e.state._replace(clients=jax.eval_shape(
        lambda c: c, e.state.clients))) for e in experiments]
  else:
    state = state._replace(clients=_stack([e.state.clients for e in padded]))
  return Study(config, runs, experiments, traced, width,
               _stack_tables([e.data for e in padded]), inputs, state, step, max_local_steps)


def _widest(runs, experiments, platform=None):
  """(config, experiment) the step is built from: run 0's, at the largest --clients_per_round
  of the runs (a cohort is drawn at that size and masked to each run's own) and with the
  client chunk width for it."""
  size = max(s.config.clients_per_round for s in runs)
  base, exp = runs[0].config, experiments[0]
  if base.clients_per_round == size:
    return base, exp
  base = dataclasses.replace(base, clients_per_round=size)
  return base, exp._replace(config=base, chunk=parallelism(base, exp.model.family, platform)[0])


def per_run_schedule(experiments) -> dict:
  """{'local_steps' / 'local_epochs': int32 [R]} for those of the experiments' Schedule values
  that differ between runs (a --grid over them), {} when every run has the same: the round then
  takes the static Schedule, and a lone run's program is unchanged."""
  return {n: jnp.asarray([getattr(e.schedule, n) for e in experiments], jnp.int32)
          for n in ('local_steps', 'local_epochs')
          if len({getattr(e.schedule, n) for e in experiments}) > 1}


def scheduled_round(config, model, server_data, schedule, max_local_steps, chunk, scenario,
                    pipeline, client_probe=None, cohorts=None, cohort_rows=False, cohort_k=None):
  """round_fn(state, data) -> (state, metrics) of one run. The algorithm is built inside the
  trace at the round's client learning rate (schedules.py: --lr_schedule at state.round), so
  a schedule costs the host nothing and a resume continues it exactly; with a constant
  schedule the config is untouched and the program is the unscheduled one. cohorts: see
  engine.make_round (--cohorts=file:), or None to sample. cohort_rows: state.clients holds
  the cohort's rows only (--client_state=host; engine.make_round). cohort_k: the run's own
  cohort size when it is below --clients_per_round (engine.make_round), or None."""
  lr_flags = schedules.Flags(config.lr_schedule, config.lr, config.rounds, config.lr_decay,
                             config.lr_step_rounds, config.lr_min)

  def round_fn(state, data):
    lr_schedule = schedules.client_lr(lr_flags)
    lr = schedules.lr_at(lr_schedule, config.lr, state.round)
    # The one read of the round's lr through a Config: algorithms.get builds each registered
    # part from a Config (registry.Values), and several read lr (SCAFFOLD, FedFOR, SlowMo...).
    at_round = config if lr is config.lr else dataclasses.replace(config, lr=lr)
    algo = algorithms.get(config.algo, at_round, model, server_data)
    state, metrics = engine.make_round(
        algo, schedule, max_local_steps, config.clients_per_round,
        algorithms.weighting(config), chunk, config.cohort_sampler, config.devices,
        scenario, pipeline, client_probe, config.diag_attention, cohorts,
        unreliable.from_values(config.dropout_prob, config.straggler_frac,
                               config.straggler_min_steps),
        cohort_rows=cohort_rows, cohort_k=cohort_k)(state, data)
    return state, {**metrics, **schedules.diagnostics(lr_schedule, lr)}

  return round_fn


def _run_scenario(exp: Experiment, config: Config, hp: dict):
  """The run's scenario: exp's, or rebuilt from config when a traced value (hp) is one the
  scenario reads (--grid over --concept_shift_prob), so that each run draws with its own."""
  if not set(hp) & set(registry.get('scenario', config.scenario).reads):
    return exp.scenario
  return registry.build('scenario', config.scenario, config,
                        num_classes=exp.dataset.num_classes, y_train=exp.dataset.y_train)


def _make_step(base: Config, exp: Experiment, max_local_steps: int, width: int):
  """(state, data, inputs) -> (state, metrics) for every run: each run's algorithm is built
  inside the trace from its traced hyperparameters and server data."""

  def one_run(state, index, count, hist, run_inputs, data, probe, cohorts):
    config = dataclasses.replace(base, **run_inputs['hp'])
    schedule = exp.schedule._replace(**run_inputs['schedule'])
    round_fn = scheduled_round(config, exp.model, run_inputs['server_data'], schedule,
                               max_local_steps, exp.chunk, _run_scenario(exp, config,
                                                                         run_inputs['hp']),
                               exp.pipeline, probe, cohorts, base.client_state == 'host',
                               run_inputs.get('cohort_size'))
    return round_fn(state, data._replace(client_index=index, client_count=count,
                                         label_hist=hist))

  def step(state, data, inputs):
    inputs = dict(inputs)
    diag = inputs.pop('diag', None)
    cohorts = inputs.pop('cohorts', None)  # every run's: not mapped over the run axis
    # Every run has done the same rounds: state.round[0] is one unbatched scalar, so the
    # probe's lax.cond stays a branch under the vmap over runs.
    probe = None if diag is None else diagnostics.client_probe(exp, state.round[0], diag)
    return engine.over_runs(
        lambda s, i, c, h, r: one_run(s, i, c, h, r, data, probe, cohorts),
        (state, data.client_index, data.client_count, data.label_hist, inputs), width)

  return step


def load_params(path, config, run=None):
  """The global parameters of run `run` (default config.init_params_run) saved in `path` by
  --save_params, as the params pytree of config's model (built on config's dataset, which
  sets the input shape and class count). Evaluate them with
  `fedjax_drift.run(Config(..., init_params=path, rounds=0))`."""
  run = config.init_params_run if run is None else run
  config = dataclasses.replace(config, init_params=os.path.abspath(path), init_params_run=run,
                               grid='', seeds=1)
  return prepare(config).state.params

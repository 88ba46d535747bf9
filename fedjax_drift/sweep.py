"""Seeds and hyperparameter grids as one compiled program: vmap over a run axis.

`--seeds=N --grid='lr:0.01,0.05;beta:0.8,0.9'` makes N x |grid| runs. Run r has its own seed
(its partition, initial model, cohorts and batches, derived exactly as a single run with that
seed) and its own grid point. Gridded hyperparameters enter the compiled program as traced
scalars: the algorithm is rebuilt inside the traced round with them, so one program serves
every grid point. Runs go in chunks of --run_chunk (default: all at once).

Outputs in the run directory: runs.csv (one row per run and evaluation), summary.json (per
grid point: mean and std over seeds of final, best, last-10% accuracy and rounds to target,
and the per-seed rows), accuracy.png (mean +- std per grid point).
"""
import dataclasses
import itertools
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_drift import algorithms, engine, metrics, models, report
from fedjax_drift.data import federated, partitions, scenarios, sources
from fedjax_drift.errors import UserError

# Float hyperparameters that may be swept: none of them steers Python control flow.
GRIDABLE = ('lr', 'server_lr', 'beta', 'beta_local', 'beta_global', 'phi', 'kd_lambda',
            'kd_temperature', 'for_alpha', 'gkd_gamma', 'vote_lambda', 'attention_temperature',
            'igfl_group', 'prox_mu', 'dyn_alpha', 'curv_lambda', 'ntd_beta', 'ntd_temperature',
            'rs_alpha', 'moon_mu', 'moon_temperature', 'server_tau', 'server_beta1',
            'server_beta2', 'local_momentum', 'weight_decay')


def parse_grid(text):
  """'lr:0.01,0.05;beta:0.8,0.9' -> {'lr': [0.01, 0.05], 'beta': [0.8, 0.9]}."""
  grid = {}
  for item in [t for t in (text or '').split(';') if t.strip()]:
    name, _, values = item.partition(':')
    name = name.strip()
    if name not in GRIDABLE:
      raise UserError(f'--grid: {name!r} cannot be swept; use one of {", ".join(GRIDABLE)}')
    try:
      grid[name] = [float(v) for v in values.split(',') if v.strip()]
    except ValueError:
      raise UserError(f'--grid: values of {name} must be numbers, got {values!r}') from None
    if not grid[name]:
      raise UserError(f'--grid: {name} has no values')
  return grid


def grid_points(grid):
  names = list(grid)
  return [dict(zip(names, values)) for values in itertools.product(*grid.values())] or [{}]


def _pad_tables(tables):
  """Stacks per-run FederatedData index parts, padding rows to a common width."""
  width = max(t.client_index.shape[1] for t in tables)
  index = np.stack([np.pad(np.asarray(t.client_index), ((0, 0), (0, width - t.client_index.shape[1])))
                    for t in tables])
  return (jnp.asarray(index), jnp.stack([t.client_count for t in tables]),
          jnp.stack([t.label_hist for t in tables]))


def run_sweep(config, log=print):
  config.validate()
  grid = parse_grid(config.grid)
  points = grid_points(grid)
  for point in points:  # every grid point must be a valid configuration on its own
    dataclasses.replace(config, **point).validate()
  seeds = [config.seed + i for i in range(config.seeds)]
  runs = [(s, p) for p in points for s in seeds]
  run_dir = config.run_dir(time.strftime('%Y%m%d-%H%M%S'))
  if os.path.exists(run_dir) and (not os.path.isdir(run_dir) or os.listdir(run_dir)) \
      and not config.overwrite:
    raise UserError(f'--out={run_dir} already exists; pass --overwrite to replace it')
  if config.resume:
    raise UserError('--resume is not supported for --seeds/--grid sweeps')

  if config.dataset == 'digits_domains' or config.partition == 'domains':
    raise UserError('--dataset=digits_domains / --partition=domains are not supported in '
                    'sweeps yet; run seeds separately')
  dataset = sources.load(config.dataset, config.data_dir or None)
  recipe = algorithms.recipe(config)
  if 'gkd_vote' in recipe.parts:
    raise UserError('FedGKD-Vote is not supported in sweeps yet (its validation split is '
                    'per seed); run seeds separately')
  tables = {}
  for s in seeds:
    parts = partitions.partition(config.partition, dataset.y_train, config.num_clients, s,
                                 config.classes_per_client, config.dirichlet_alpha)
    if config.clients_per_round > len(parts):
      raise UserError(f'--clients_per_round={config.clients_per_round} exceeds the '
                      f'{len(parts)} clients of --partition={config.partition}')
    tables[s] = federated.build(dataset.x_train, dataset.y_train, parts, dataset.num_classes)
  model = models.get(config.model, dataset.num_classes, dataset.x_train.shape[1:], config.init,
                     algorithms.projection_dim(config))
  schedule = engine.Schedule(config.batch_size, config.local_steps, config.local_epochs)
  scenario = scenarios.from_config(config, dataset)
  max_steps = max(engine.max_steps(np.asarray(t.client_count), schedule)
                  for t in tables.values())
  if scenario.fresh_cohort is not None:
    max_steps = engine.max_steps(np.array([scenario.max_examples]), schedule)
  chunk, strategy = engine.choose_parallelism(
      config.client_parallelism, model.family, jax.default_backend(), config.clients_per_round,
      config.cohort_chunk)
  weighting = algorithms.weighting(config)
  num_clients = int(tables[seeds[0]].client_count.shape[0])

  def build(hp):
    return algorithms.get(config.algo, dataclasses.replace(config, **hp), model)

  def init_one(seed_key, hp):
    params = model.init(jax.random.fold_in(seed_key, 0))
    return engine.init_state(build(hp), params, num_clients, jax.random.fold_in(seed_key, 1),
                             scenario)

  def round_one(state, table, hp):
    index, count, hist = table
    data = federated.FederatedData(x, y, index, count, hist)
    fn = engine.make_round(build(hp), schedule, max_steps, config.clients_per_round, weighting,
                           chunk, config.cohort_sampler, scenario=scenario)
    return fn(state, data)

  x, y = jnp.asarray(dataset.x_train), jnp.asarray(dataset.y_train)
  x_test, y_test = jnp.asarray(dataset.x_test), jnp.asarray(dataset.y_test)
  evaluate = engine.make_evaluator(model.apply, config.eval_batch_size)
  # Each run evaluates against the test labels of its own current concept (concept shift).
  eval_all = jax.jit(jax.vmap(
      lambda params, sc: evaluate(params, x_test, scenario.relabel(sc, y_test))))
  run_chunk = config.run_chunk or len(runs)

  def segment(states, table, hps, num_rounds):
    metric_shapes = jax.eval_shape(jax.vmap(round_one), states, table, hps)[1]

    def body(s, i):
      return jax.lax.cond(i < num_rounds, lambda s: jax.vmap(round_one)(s, table, hps),
                          lambda s: (s, jax.tree.map(lambda m: jnp.zeros(m.shape, m.dtype),
                                                     metric_shapes)), s)
    return jax.lax.scan(body, states, jnp.arange(config.eval_every))

  segment = jax.jit(segment, donate_argnums=0)
  log(f'fedjax-drift sweep: {config.algo}, {len(seeds)} seed(s) x {len(points)} grid point(s) '
      f'= {len(runs)} runs in chunks of {run_chunk}, vmapped over runs; clients: chunk={chunk} '
      f'({strategy})')
  os.makedirs(run_dir, exist_ok=True)
  report.write_json(os.path.join(run_dir, 'config.json'),
                    {**dataclasses.asdict(config), 'out': run_dir,
                     '_resolved': {'runs': [{'seed': s, **p} for s, p in runs],
                                   'weighting': weighting, 'max_local_steps': max_steps}})

  rows = []  # one per run and evaluation
  t_start = time.perf_counter()
  for start in range(0, len(runs), run_chunk):
    chunk_runs = runs[start:start + run_chunk]
    padded = chunk_runs + [chunk_runs[-1]] * (run_chunk - len(chunk_runs))  # same shapes
    hps = {k: jnp.asarray([p[k] for _, p in padded], jnp.float32) for k in grid}
    table = _pad_tables([tables[s] for s, _ in padded])
    keys = jnp.stack([jax.random.key_data(jax.random.key(s)) for s, _ in padded])
    states = jax.vmap(lambda k, hp: init_one(jax.random.wrap_key_data(k), hp))(keys, hps)
    if scenario.fresh_cohort is not None and jax.tree.leaves(states.clients):
      raise UserError(f'--scenario=longtail_stateless draws new clients every round, so '
                      f'--algo={config.algo}\'s per-client state would never be used')
    done, best = 0, np.full(len(padded), -np.inf)

    def record(states, done):
      losses, accs = jax.device_get(eval_all(states.params, states.scenario))
      for i, (s, p) in enumerate(chunk_runs):
        best[i] = max(best[i], accs[i])
        rows.append({'run': start + i, 'seed': s, **p, 'round': done,
                     'test_accuracy': float(accs[i]), 'test_loss': float(losses[i]),
                     'best_accuracy': float(best[i])})

    record(states, 0)
    while done < config.rounds:
      n = min(config.eval_every, config.rounds - done)
      states, _ = segment(states, table, hps, n)
      done += n
      record(states, done)
      log(f'  runs {start}-{start + len(chunk_runs) - 1}: round {done}/{config.rounds}')
  wall = time.perf_counter() - t_start
  report.write_csv(os.path.join(run_dir, 'runs.csv'), rows)

  per_run = []
  for r, (s, p) in enumerate(runs):
    mine = [row for row in rows if row['run'] == r]
    summary = metrics.summarize([m['round'] for m in mine], [m['test_accuracy'] for m in mine],
                                [m['test_loss'] for m in mine], config.rounds,
                                config.target_accuracy)
    per_run.append({'run': r, 'seed': s, **p, **summary})
  groups = []
  for p in points:
    mine = [r for r in per_run if all(r[k] == v for k, v in p.items())]
    stats = {}
    for key in ('final_accuracy', 'best_accuracy', 'last10_mean_accuracy'):
      values = np.array([r[key] for r in mine])
      stats[key] = {'mean': float(values.mean()), 'std': float(values.std())}
    reached = [r['rounds_to_target'] for r in mine if r['rounds_to_target'] is not None]
    stats['rounds_to_target'] = {'reached': f'{len(reached)}/{len(mine)}',
                                 'mean': float(np.mean(reached)) if reached else None}
    groups.append({'grid_point': p, **stats})
    label = ', '.join(f'{k}={v:g}' for k, v in p.items()) or config.algo
    log(f'{label}: final {stats["final_accuracy"]["mean"]:.4f} +- '
        f'{stats["final_accuracy"]["std"]:.4f}, best {stats["best_accuracy"]["mean"]:.4f} +- '
        f'{stats["best_accuracy"]["std"]:.4f} over {len(mine)} seed(s)')
  summary = {'algo': config.algo, 'seeds': seeds, 'grid': grid, 'wall_time_s': wall,
             'segment_compilations': segment._cache_size(),  # pylint: disable=protected-access
             'grid_points': groups, 'runs': per_run, 'run_dir': run_dir}
  report.write_json(os.path.join(run_dir, 'summary.json'), summary)
  _plot(os.path.join(run_dir, 'accuracy.png'), rows, points, config)
  log(f'done: {len(runs)} runs in {wall:.1f}s -> {run_dir}')
  return summary


def _plot(path, rows, points, config):
  curves = {}
  for p in points:
    mine = [r for r in rows if all(r[k] == v for k, v in p.items())]
    rounds = sorted({r['round'] for r in mine})
    acc = np.array([[r['test_accuracy'] for r in mine if r['round'] == t] for t in rounds])
    label = ', '.join(f'{k}={v:g}' for k, v in p.items()) or config.algo
    curves[label] = (rounds, acc.mean(1), acc.std(1))
  report.plot_mean_curves(path, curves, f'{config.algo}: {len(points)} grid point(s)')

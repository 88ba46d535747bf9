"""`run(config)`: data -> partition -> model -> algorithm -> compiled segments -> run directory."""
import dataclasses
import json
import os
import shutil
import sys
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_drift import algorithms, engine, metrics, models, personalize, report
from fedjax_drift.checkpoint import Checkpointer
from fedjax_drift.config import Config
from fedjax_drift.config import from_dict as config_from_dict
from fedjax_drift.data import domains, federated, partitions, scenarios, sources
from fedjax_drift.errors import DivergenceError, UserError
from fedjax_drift.state import ServerState


class Experiment(NamedTuple):
  """Everything `run` builds before the first round; tests use it to step rounds by hand."""
  config: Config
  dataset: sources.Dataset
  train_parts: list
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


def prepare(config: Config) -> Experiment:
  config.validate()
  algorithms.recipe(config)  # fail on a bad --algo / --local_terms before any work
  domain_ids = None
  if config.dataset == 'digits_domains':
    if not config.data_dir:
      raise UserError('--dataset=digits_domains needs --data_dir holding mnist/ and usps/')
    dataset, domain_ids, _ = domains.load_digits_domains(config.data_dir, config.seed)
  else:
    dataset = sources.load(config.dataset, config.data_dir or None)
  if config.partition == 'domains' and domain_ids is None:
    raise UserError('--partition=domains needs a multi-domain --dataset (digits_domains)')
  dataset, server_data = _hold_out_validation(config, dataset)
  if config.partition == 'domains':
    if server_data is not None:
      raise UserError('--partition=domains does not combine with FedGKD-Vote yet')
    train_parts = domains.domain_partition(domain_ids, config.num_clients,
                                           np.random.default_rng(config.seed))
  else:
    train_parts = partitions.partition(config.partition, dataset.y_train, config.num_clients,
                                       config.seed, config.classes_per_client,
                                       config.dirichlet_alpha)
  num_clients = len(train_parts)
  if config.clients_per_round > num_clients:
    raise UserError(f'--clients_per_round={config.clients_per_round} exceeds the '
                    f'{num_clients} clients of --partition={config.partition}')
  test_parts = None
  if config.test_partition == 'like_train':
    test_parts = partitions.partition_like(train_parts, dataset.y_train, dataset.y_test,
                                           config.seed, dataset.num_classes)
  if config.cohort_sampler == 'cover_classes':
    _check_cover_possible(config, dataset, train_parts)
  model = models.get(config.model, dataset.num_classes, dataset.x_train.shape[1:], config.init,
                     algorithms.projection_dim(config))
  algo = algorithms.get(config.algo, config, model, server_data)
  schedule = engine.Schedule(config.batch_size, config.local_steps, config.local_epochs)
  scenario = scenarios.from_config(config, dataset)
  counts = np.array([len(p) for p in train_parts])
  if scenario.fresh_cohort is not None:
    counts = np.array([scenario.max_examples])
  max_local_steps = engine.max_steps(counts, schedule)
  if config.devices > jax.device_count():
    raise UserError(f'--devices={config.devices} but jax sees {jax.device_count()} '
                    f'{jax.default_backend()} device(s)')
  per_device = config.clients_per_round // config.devices
  chunk, strategy = engine.choose_parallelism(
      config.client_parallelism, model.family, jax.default_backend(), per_device,
      config.cohort_chunk)
  data = federated.build(dataset.x_train, dataset.y_train, train_parts, dataset.num_classes)
  run_key = jax.random.key(config.seed)
  params = model.init(jax.random.fold_in(run_key, 0))
  state = engine.init_state(algo, params, num_clients, jax.random.fold_in(run_key, 1), scenario)
  if scenario.fresh_cohort is not None and jax.tree.leaves(state.clients):
    raise UserError(f'--scenario=longtail_stateless draws new clients every round, so '
                    f'--algo={config.algo}\'s per-client state would never be used; pick a '
                    'stateless algorithm')
  round_fn = engine.make_round(algo, schedule, max_local_steps, config.clients_per_round,
                               algorithms.weighting(config), chunk, config.cohort_sampler,
                               config.devices, scenario)
  return Experiment(config, dataset, train_parts, test_parts, model, algo, data, state,
                    round_fn, schedule, max_local_steps, chunk, strategy, server_data,
                    scenario)


def _check_cover_possible(config, dataset, parts):
  """A greedy set cover must fit in K clients, or cover_classes cannot hold."""
  has = [set(np.unique(dataset.y_train[p]).tolist()) for p in parts]
  uncovered, used = set().union(*has), 0
  while uncovered and used < config.clients_per_round:
    best = max(has, key=lambda h: len(h & uncovered))
    uncovered -= best
    used += 1
  if uncovered:
    raise UserError(f'--cohort_sampler=cover_classes: {config.clients_per_round} clients per '
                    f'round cannot cover all classes of --partition={config.partition}; raise '
                    '--clients_per_round')


def _hold_out_validation(config, dataset):
  """FedGKD-Vote's server validation split: --vote_val_size training examples, seeded.

  With a file partition, they come from examples no client holds (indices stay valid).
  """
  if not algorithms.needs_validation(config):
    return dataset, None
  n, size = len(dataset.y_train), config.vote_val_size
  rng = np.random.default_rng(config.seed + 104729)
  if config.partition.startswith('file:'):
    used = np.concatenate(partitions.from_file(config.partition[5:], n))
    free = np.setdiff1d(np.arange(n), used)
    if len(free) < size:
      raise UserError(f'--vote_val_size={size}: only {len(free)} training examples are in no '
                      f'client of --partition={config.partition}')
    val = rng.choice(free, size, replace=False)
    keep = np.arange(n)  # indices in the file refer to the full training set
  else:
    if size >= n:
      raise UserError(f'--vote_val_size={size} must be smaller than the {n} training examples')
    perm = rng.permutation(n)
    val, keep = perm[:size], np.sort(perm[size:])
  server_data = {'x_val': federated.to_float(jnp.asarray(dataset.x_train[val])),
                 'y_val': jnp.asarray(dataset.y_train[val])}
  return dataset._replace(x_train=dataset.x_train[keep], y_train=dataset.y_train[keep]), server_data


def _progress(total, enabled):
  if not enabled:
    return None
  from tqdm import tqdm  # pylint: disable=g-import-not-at-top
  return tqdm(total=total, unit='round', dynamic_ncols=True, file=sys.stderr)


def run(config: Config, log=print) -> dict:
  """Runs one experiment end to end and returns its summary (also in summary.json).

  With config.resume, continues the run in config.out from its latest checkpoint. With
  config.seeds > 1 or a config.grid, runs the sweep as one vmapped program (sweep.py).
  """
  config.validate()
  if config.seeds > 1 or config.grid:
    from fedjax_drift import sweep  # pylint: disable=g-import-not-at-top
    if config.devices > 1:
      raise UserError('--devices does not combine with --seeds/--grid yet')
    return sweep.run_sweep(config, log)
  run_dir = config.run_dir(time.strftime('%Y%m%d-%H%M%S'))
  if os.path.exists(run_dir) and not os.path.isdir(run_dir):
    raise UserError(f'--out={run_dir} is a file, not a directory')
  if config.save_params:
    parent = os.path.dirname(os.path.abspath(config.save_params))
    existing = parent
    while not os.path.exists(existing):
      existing = os.path.dirname(existing)
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK):
      raise UserError(f'--save_params={config.save_params}: cannot write under {existing}')
  if config.resume:
    if not os.path.exists(os.path.join(run_dir, 'config.json')):
      raise UserError(f'--resume: {run_dir} holds no run (no config.json)')
  elif os.path.exists(run_dir) and os.listdir(run_dir) and not config.overwrite:
    raise UserError(f'--out={run_dir} already exists; pass --overwrite to replace it')
  exp = prepare(config)
  cfg, ds = exp.config, exp.dataset
  # Compile the segment ahead of time and ask XLA what it needs, before writing anything.
  t_compile = time.perf_counter()
  segment = engine.make_segment(exp.round_fn, cfg.eval_every).lower(
      exp.state, exp.data, jnp.int32(cfg.eval_every)).compile()
  compile_s = time.perf_counter() - t_compile
  need, available = estimated_memory(segment), _available_memory()
  budget = cfg.memory_budget_gb * 1e9 or 0.9 * available
  if budget and need > budget:
    where = (f'--memory_budget_gb={cfg.memory_budget_gb:g}' if cfg.memory_budget_gb
             else f'90% of the {available / 1e9:.1f} GB available')
    raise UserError(f'this run needs about {need / 1e9:.2f} GB (XLA\'s estimate for one '
                    f'segment), over {where}; lower --cohort_chunk (now {exp.chunk}), '
                    '--clients_per_round or --batch_size')
  if not config.resume and os.path.exists(run_dir) and config.overwrite:
    shutil.rmtree(run_dir)
  os.makedirs(run_dir, exist_ok=True)
  checkpointer = Checkpointer(run_dir, cfg.keep_checkpoints)
  resuming = config.resume and checkpointer.latest_round() is not None
  if config.resume and not resuming:
    log(f'{run_dir} has no checkpoint yet: starting it from round 0')

  num_params = models.num_params(exp.state.params)
  comm = exp.algo.communication(exp.state.params)
  client_state_bytes = federated.nbytes(exp.state.clients)
  log(f'fedjax-drift: {cfg.algo} on {ds.name} ({len(ds.y_train)} train / {len(ds.y_test)} test, '
      f'{ds.num_classes} classes), {len(exp.train_parts)} clients, K={cfg.clients_per_round}, '
      f'{cfg.model} ({num_params:,} params)')
  per_device = cfg.clients_per_round // cfg.devices
  log(f'client parallelism: chunk={exp.chunk} of {per_device} clients per device '
      f'({"sequential" if exp.chunk == 1 else "vmap" if exp.chunk >= per_device else "chunked"}'
      f'; {exp.strategy}); backend={jax.default_backend()}, {cfg.devices} of '
      f'{jax.device_count()} device(s)')
  n_clients = len(exp.train_parts)
  log(f'local work: up to {exp.max_local_steps} steps per client per round; per-client state '
      f'{n_clients} clients x {client_state_bytes // max(n_clients, 1):,} bytes = '
      f'{client_state_bytes:,} bytes; run directory {run_dir}')
  log(f'memory estimate (XLA, one segment): {need / 1e9:.2f} GB'
      + (f' of {available / 1e9:.1f} GB available' if available else '')
      + f'; compiled in {compile_s:.1f}s')

  resolved = dataclasses.asdict(cfg)
  resolved.update(out=run_dir, resume=False, _resolved={
      'num_classes': ds.num_classes, 'input_shape': list(ds.x_train.shape[1:]),
      'num_clients': n_clients, 'max_local_steps': exp.max_local_steps,
      'cohort_chunk': exp.chunk, 'strategy': exp.strategy, 'num_params': num_params,
      'weighting': algorithms.weighting(cfg),
      'backend': jax.default_backend(), 'jax_version': jax.__version__})
  report.write_json(os.path.join(run_dir, 'config.json'), resolved)
  if not resuming:
    report.plot_partition(os.path.join(run_dir, 'partition.png'),
                          np.asarray(exp.data.label_hist), f'{cfg.partition} partition of {ds.name}')

  evaluate_raw = engine.make_evaluator(exp.model.apply, cfg.eval_batch_size)
  x_test, y_test = jnp.asarray(ds.x_test), jnp.asarray(ds.y_test)

  def evaluate(params, x, y, scenario_state):
    # Test labels under the current concept (concept shift); other scenarios keep them.
    return evaluate_raw(params, x, exp.scenario.relabel(scenario_state, y))
  checkpoint_every = cfg.checkpoint_every or cfg.eval_every

  if resuming:
    state, history = checkpointer.restore(exp.state)
    eval_rows, round_rows = history['eval_rows'], history['round_rows']
    log(f'resumed from the checkpoint at round {int(state.round)}')
  else:
    state, eval_rows, round_rows = exp.state, [], []
    loss0, acc0 = evaluate(state.params, x_test, y_test, state.scenario)
    eval_rows.append({'round': 0, 'test_accuracy': float(acc0), 'test_loss': float(loss0),
                      'best_accuracy': float(acc0), 'elapsed_s': 0.0})
  data, done = exp.data, int(state.round)
  last_checkpoint = done
  elapsed0 = eval_rows[-1]['elapsed_s']

  def write_metrics():
    report.write_csv(os.path.join(run_dir, 'metrics.csv'), eval_rows)
    report.write_csv(os.path.join(run_dir, 'rounds.csv'), round_rows)

  bar = _progress(cfg.rounds, cfg.progress)
  if bar is not None:
    bar.update(min(done, cfg.rounds))
  t_start, first_segment_s, rounds_run = time.perf_counter(), None, 0
  while done < cfg.rounds:
    n = min(cfg.eval_every, cfg.rounds - done)
    t0 = time.perf_counter()
    state, seg_metrics = segment(state, data, jnp.int32(n))
    seg_metrics = jax.device_get(seg_metrics)
    if first_segment_s is None:
      first_segment_s = time.perf_counter() - t0
    bad = np.flatnonzero(~np.asarray(seg_metrics['finite'][:n], bool))
    if bad.size:
      r = done + int(bad[0]) + 1
      client = int(seg_metrics['bad_client'][bad[0]])
      where = f', first at client {client}' if client >= 0 else ''
      write_metrics()
      raise DivergenceError(
          f'diverged: non-finite global model or client update in round {r}{where}; the last '
          f'good checkpoint (round {last_checkpoint}) is in {checkpointer.directory}; lower '
          f'--lr (now {cfg.lr}) or check the data')
    for i in range(n):
      round_rows.append({'round': done + i + 1,
                         **{k: float(v[i]) for k, v in seg_metrics.items()
                            if k not in ('finite', 'bad_client')}})
    done += n
    rounds_run += n
    loss, acc = evaluate(state.params, x_test, y_test, state.scenario)
    eval_rows.append({'round': done, 'test_accuracy': float(acc), 'test_loss': float(loss),
                      'best_accuracy': max(float(acc), eval_rows[-1]['best_accuracy']),
                      'elapsed_s': elapsed0 + time.perf_counter() - t_start})
    write_metrics()
    if done // checkpoint_every > last_checkpoint // checkpoint_every or done == cfg.rounds:
      checkpointer.save(state, {'eval_rows': eval_rows, 'round_rows': round_rows})
      last_checkpoint = done
    if bar is not None:
      bar.update(n)
      bar.set_postfix(acc=f'{float(acc):.4f}', best=f'{eval_rows[-1]["best_accuracy"]:.4f}')
  if bar is not None:
    bar.close()
  checkpointer.close()
  wall = time.perf_counter() - t_start

  rounds = [r['round'] for r in eval_rows]
  accs = [r['test_accuracy'] for r in eval_rows]
  summary = metrics.summarize(rounds, accs, [r['test_loss'] for r in eval_rows], cfg.rounds,
                              cfg.target_accuracy)
  steady = wall - (first_segment_s or 0.0)
  first = min(cfg.eval_every, rounds_run)
  summary.update({
      'algo': cfg.algo, 'dataset': ds.name, 'rounds': cfg.rounds,
      'communication_floats_per_client': comm,
      'communication_floats_per_round': {k: v * cfg.clients_per_round for k, v in comm.items()},
      'wall_time_s': wall, 'compile_s': compile_s, 'first_segment_s': first_segment_s,
      'memory_estimate_bytes': need,
      'rounds_per_s_after_first_segment': ((rounds_run - first) / steady
                                           if steady > 0 and rounds_run > first else None),
      'segment_compilations': 1,  # compiled ahead of time above; every segment reuses it
      'cohort_chunk': exp.chunk, 'strategy': exp.strategy,
      'per_client_state_bytes': client_state_bytes,
      'run_dir': run_dir,
  })
  if cfg.personalize == 'calibrate':
    summary['personalization'] = _personalize(exp, state.params, run_dir, log)
  report.write_json(os.path.join(run_dir, 'summary.json'), summary)
  report.plot_accuracy(os.path.join(run_dir, 'accuracy.png'), rounds, accs,
                       metrics.best_so_far(accs), f'{cfg.algo} on {ds.name} ({cfg.partition})')
  if round_rows:
    report.plot_drift(os.path.join(run_dir, 'drift.png'), round_rows)
  if cfg.save_params:
    save_params(cfg.save_params, state.params)
  log(f'done: final accuracy {summary["final_accuracy"]:.4f}, best {summary["best_accuracy"]:.4f}, '
      f'last-10% mean {summary["last10_mean_accuracy"]:.4f}, rounds to '
      f'{cfg.target_accuracy:.0%}: {summary["rounds_to_target"]}, {wall:.1f}s '
      f'-> {run_dir}')
  return summary


def estimated_memory(compiled):
  """Bytes XLA says a compiled program needs (arguments, outputs, temporaries, less donated
  buffers), or 0 when the backend does not say."""
  stats = compiled.memory_analysis()
  if stats is None:
    return 0
  peak = getattr(stats, 'peak_memory_in_bytes', 0)
  total = (stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes
           - stats.alias_size_in_bytes)
  return int(max(peak, total))


def _available_memory():
  """Bytes the OS reports available (Linux), or 0 when unknown."""
  try:
    with open('/proc/meminfo') as f:
      for line in f:
        if line.startswith('MemAvailable:'):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return 0


RESUME_OVERRIDES = ('rounds', 'progress', 'save_params', 'resume', 'out')


def resume(run_dir, **overrides) -> dict:
  """Continues the run in `run_dir` as configured; only RESUME_OVERRIDES may change."""
  path = os.path.join(run_dir, 'config.json')
  if not os.path.exists(path):
    raise UserError(f'--resume: {run_dir} holds no run (no config.json)')
  with open(path) as f:
    saved = json.load(f)
  saved.pop('_resolved', None)
  for name, value in overrides.items():
    if name not in RESUME_OVERRIDES and saved.get(name) != value:
      raise UserError(f'--resume continues {run_dir} as configured; --{name} cannot change '
                      f'(saved {saved.get(name)!r}); only --rounds, --progress and '
                      '--save_params may')
  allowed = {k: v for k, v in overrides.items() if k in RESUME_OVERRIDES}
  config = config_from_dict({**saved, **allowed, 'resume': True, 'out': run_dir})
  return run(config)


def _personalize(exp, params, run_dir, log):
  cfg, ds = exp.config, exp.dataset
  test = federated.build(ds.x_test, ds.y_test, exp.test_parts, ds.num_classes)
  schedule = engine.Schedule(cfg.batch_size, 0, cfg.personalize_epochs)
  term = None if cfg.personalize_term == 'none' else cfg.personalize_term
  before, after, num_test = personalize.calibrate(
      exp.model, params, exp.data, test, schedule, cfg.lr, term, cfg.prox_mu, cfg.kd_lambda,
      cfg.kd_temperature, cfg.seed, exp.chunk)
  report.write_csv(os.path.join(run_dir, 'personalization.csv'),
                   [{'client': i, 'num_test': int(n), 'global_model_accuracy': float(b),
                     'calibrated_accuracy': float(a)}
                    for i, (b, a, n) in enumerate(zip(before, after, num_test))])
  result = personalize.summarize(before, after, num_test)
  log(f'personalisation: per-client accuracy {result["global_model_mean_accuracy"]:.4f} '
      f'+- {result["global_model_std_accuracy"]:.4f} (global model) -> '
      f'{result["calibrated_mean_accuracy"]:.4f} +- {result["calibrated_std_accuracy"]:.4f} '
      f'(calibrated) over {result["clients_evaluated"]} clients')
  return result


def save_params(path, params):
  """Final global parameters, flattened and named by flax path ('conv1/conv/kernel', ...)."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  import io  # pylint: disable=g-import-not-at-top
  buf = io.BytesIO()
  np.savez(buf, **models.flatten_names(params))
  report.atomic_write(path, buf.getvalue())

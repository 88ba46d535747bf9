"""`run(config)`: one execution path for one run and for seeds x grid sweeps.

A single run is a study with one run (study.py). The stages: check the outputs, build every
run, compile one program for all of them, open the run directory, loop over rounds on the
host (progress, evaluation, divergence, checkpoints), finish (summaries, plots, parameters).
This module is the host loop; the checks on the outputs and the opening of the run directory
are outputs.py's, and what a run reports, and the run directory's layout (the same for one
run and for many), results.py's.
"""
import contextlib
import dataclasses
import functools
import hashlib
import io
import os
import signal
import sys
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_drift import (algorithms, applies, distributed, engine, evaluation, inputs,
                          interrupts, locks, models, outputs, report, results, rundir)
from fedjax_drift import best_val, compile_cache, diagnostics, host_state, methods, preflight
from fedjax_drift import splits
from fedjax_drift.config import Config
from fedjax_drift.config import from_dict as config_from_dict
from fedjax_drift.data import federated
from fedjax_drift.errors import DivergenceError, UserError
from fedjax_drift.study import (Experiment, Study, absolutize, build,  # noqa: F401
                                eval_protocol, input_flags, plan, prepare)

SECONDS_PER_CALL = 1.0  # the host wakes at least this often (progress), unless a round is longer
SHIFT_COLUMNS = results.SHIFT_COLUMNS  # shifts.csv's columns, where callers have found them
_plot = results.plot  # under this name tests stop a run between its summary and its plots


class Compiled(NamedTuple):
  segment: Any            # the ahead-of-time compiled segment
  evaluate: Any           # evaluation.Evaluator: the protocol, its columns and function
  compile_s: float
  memory_bytes: int


def run(config: Config, log=print) -> dict:
  """Runs every run of `config` (seeds x grid points; one run by default) end to end.

  Returns the summary (also written to summary.json). With config.resume, continues the runs
  in config.out from their latest checkpoint. Raises DivergenceError when every run diverged,
  and interrupts.Interrupted (a KeyboardInterrupt) on SIGINT, SIGTERM or SIGHUP.
  """
  if methods.is_methods_run(config):  # --grid='algo:...': one study per method (methods.py)
    return methods.run_all(config, log, run)
  # The precision applies where programs are traced, so it covers every compiled piece.
  with interrupts.guard(), jax.default_matmul_precision(config.matmul_precision):
    return _run(config, log)  # a signal is never lost, even in a gc callback (interrupts.py)


def _run(config, log):
  t0 = time.perf_counter()
  config = distributed.setup(config, log)  # first: jax.distributed precedes any other JAX use
  compile_cache.use(config.compile_cache)
  if not distributed.is_writer():  # several processes: process 0 speaks and writes
    log, config = (lambda *a, **k: None), dataclasses.replace(config, progress=False)
  config = absolutize(config)  # stored absolute: a resume elsewhere reads the same files
  runs = plan(config)
  unread = applies.warning(config)  # flags the chosen algorithm and options never read
  if unread:
    log(unread)
  late = diagnostics.late_rounds_warning(config.diag_features_rounds, config.rounds)
  if late:
    log(late)
  run_dir = outputs.check_outputs(config)
  distributed.barrier('outputs checked')  # before process 0 creates anything in them
  interrupts.describe(lambda signum: interrupts.message(
      run_dir, bool(results.checkpoint_rounds(run_dir)), signum))  # for a hard exit (the CLI)
  try:
    # One writer claims the outputs, from loading to the end.
    with (locks.claimed(run_dir, config.save_params) if distributed.is_writer()
          else contextlib.nullcontext()):
      if distributed.is_writer():
        # Again, now that --save_params is ours: the run that held it may have written it.
        rundir.check_save_params(config.save_params, run_dir, outputs.input_paths(config),
                                 config.overwrite, config.resume)
      log(f'fedjax-drift: {config.algo}, {len(runs)} run(s): loading data and compiling...')
      # of the bytes read: taken before, checked after
      fingerprint = inputs.fingerprint(input_flags(config))
      study = distributed.place(build(config, runs, preflight.before_build(config, runs)))
      inputs.check_unchanged(fingerprint, run_dir, while_reading=True)
      uncovered = splits.coverage_warning(config.partition, study.experiments)
      if uncovered:
        log(uncovered)
      noisy = results.dp_warning(study)  # DP noise that drowns every update
      if noisy:
        log(noisy)
      interrupts.check()
      with interrupts.deferred():  # Ctrl-C while XLA compiles can crash the process
        compiled = _compile(study)
      out = outputs.open_run_dir(study, run_dir, log, fingerprint)
      if outputs.finished(out, config):
        return _already_finished(study, out, log)
      with _undone_on_failure(out, config):
        _log_header(study, compiled, run_dir, log)
        state, history, train_s = _loop(study, compiled, out, log)
        # Not deferred (personalisation may be long): each result file is replaced whole,
        # and after a Ctrl-C here --resume writes them all again from the final checkpoint.
        return _finish(study, compiled, out, state, history, train_s,
                       time.perf_counter() - t0, log)
  except KeyboardInterrupt as e:
    signum = interrupts.received() or getattr(e, 'signum', signal.SIGINT)
    has_checkpoint = bool(results.checkpoint_rounds(run_dir))  # not orbax: its import is slow
    raise interrupts.Interrupted(interrupts.message(run_dir, has_checkpoint, signum),
                                 signum) from None


@contextlib.contextmanager
def _undone_on_failure(out, config):
  """A new run (not --resume) that fails with a UserError or OSError (a full disk, say)
  before its first checkpoint removes what it created in its directory (rundir.undo: only
  its recorded entries and its record), so the same command then runs again without
  --overwrite; a run with a checkpoint, a resumed one and a diverged one keep their files."""
  try:
    yield
  except (UserError, OSError) as e:
    if (not isinstance(e, DivergenceError) and not config.resume and out.record is not None
        and distributed.is_writer() and not out.checkpointer.rounds()):
      rundir.undo(out.record)
    raise


def _compile(study: Study) -> Compiled:
  """Compiles the segment ahead of time and refuses what XLA says cannot fit."""
  cfg = study.config
  t = time.perf_counter()
  host = host_state.enabled(cfg.client_state)
  state = host_state.device_state(study.state, cfg.clients_per_round) if host else study.state
  segment = segment_program(study).lower(state, study.data, study.inputs,
                                         jnp.int32(1)).compile()
  compile_s = time.perf_counter() - t
  need = preflight.estimated_memory(segment)
  preflight.check_memory(cfg, need, f'XLA\'s estimate for one segment of {len(study.runs)} run(s)',
                f'lower --run_chunk, --cohort_chunk (now {study.experiments[0].chunk}), '
                '--clients_per_round or --batch_size')
  if host:  # one round per call, the cohort's rows copied in and out (host_state.py)
    cohort_fn = host_state.cohort_program(  # compiled now, with the segment
        cfg.clients_per_round, cfg.cohort_sampler).lower(
            study.state._replace(clients=()), study.data, study.inputs).compile()
    segment = functools.partial(host_state.run_round, segment, cohort_fn)
  return Compiled(segment, _make_evaluator(study), compile_s, need)


def segment_program(study: Study, platform=None):
  """The study's segment program (engine.make_segment: jitted, not yet lowered) with the XLA
  options for `platform` (None: this process's backend)."""
  options = engine.compiler_options(study.experiments[0].model.family == 'conv', platform)
  return engine.make_segment(study.step, study.config.eval_every,
                             distributed.segment_shardings(study), options)


def lower_segment(study: Study, platform: str):
  """The study's segment lowered for `platform` ('cuda', 'rocm', 'tpu', 'cpu'), which need
  not be present: jax lowers a traced program for any platform it knows (its StableHLO text
  shows every custom call the program makes there). Build the study for the same platform
  (study.build(..., platform=)) so that its 'auto' choices are that platform's."""
  return segment_program(study, platform).trace(
      study.state, study.data, study.inputs, jnp.int32(1)).lower(lowering_platforms=(platform,))


def _make_evaluator(study):
  # The protocol (the global model, or FedBN's per-client models), its per-domain columns,
  # test inputs normalised as training batches, labels under each run's current concept:
  # all evaluation.py's.
  return evaluation.make(study, eval_protocol(study.config))


def _already_finished(study, out, log):
  """Resuming a complete run: its files stay as they are (summary timings included);
  --save_params, if given, gets the final parameters."""
  state = out.restored[0]
  out.checkpointer.close()
  if study.config.save_params and distributed.is_writer():
    out.record.add_output(study.config.save_params, save_params(
        study.config.save_params,
        jax.tree.map(lambda a: a[:len(study.runs)], distributed.to_host(state.params))))
  log(f'{out.run_dir} already finished at round {int(state.round[0])}; nothing to do')
  return rundir.read_json(os.path.join(out.run_dir, 'summary.json'))


def _log_header(study, compiled, run_dir, log):
  cfg, exp = study.config, study.experiments[0]
  ds, n_clients = exp.dataset, len(exp.train_parts)
  state_bytes = federated.nbytes(exp.state.clients)
  log(f'{cfg.algo} on {ds.name} ({len(ds.y_train)} train / {len(ds.y_test)} test, '
      f'{ds.num_classes} classes), {n_clients} clients, K={cfg.clients_per_round}, '
      f'{cfg.model} ({models.num_params(exp.state.params):,} params)')
  if len(study.runs) > 1:
    log(f'runs: {cfg.seeds} seed(s) x {len(study.runs) // cfg.seeds} grid point(s) = '
        f'{len(study.runs)}, {study.width} vmapped at a time; traced: '
        f'{", ".join(study.traced) or "none"}')
  per_device = cfg.clients_per_round // cfg.devices
  log(f'client parallelism: chunk={exp.chunk} of {per_device} clients per device '
      f'({"sequential" if exp.chunk == 1 else "vmap" if exp.chunk >= per_device else "chunked"}'
      f'; {exp.strategy}); backend={jax.default_backend()}, {cfg.devices} of '
      f'{jax.device_count()} device(s)'
      + (f'; conv_impl={results.conv_impl(exp)}' if results.conv_impl(exp) else ''))
  steps = study.max_local_steps
  log(f'local work: {"up to " * (steps > 1)}{steps} step{"s" * (steps != 1)} per client per '
      f'round; per-client state '
      f'{n_clients} clients x {state_bytes // max(n_clients, 1):,} bytes = {state_bytes:,} '
      f'bytes per run; run directory {run_dir}')
  if host_state.enabled(cfg.client_state):
    log(f'--client_state=host: the per-client state table is in host memory; each round '
        f'copies the cohort\'s rows in and out: '
        f'{host_state.bytes_per_round(study.state.clients, cfg.clients_per_round):,} bytes '
        f'per round ({len(study.runs)} run(s) x 2 x {cfg.clients_per_round} rows)')
  pipe = exp.pipeline
  if pipe is not None and not pipe.is_identity:
    norm = outputs.normalization(exp)

    def short(values):  # flat features may have hundreds of channels
      text = ', '.join(f'{v:.4f}' for v in values[:4])
      return text if len(values) <= 4 else f'{text}, ... ({len(values)} channels)'

    parts = [f'--augment={pipe.augment}'] if pipe.augment != 'none' else []
    if norm is not None:  # augmentation alone has no statistics to show
      parts.append(f'normalised with mean {short(norm["mean"])} and std {short(norm["std"])}')
    if pipe.dropout:
      parts.append('a dropout key per local step')
    log('inputs: ' + '; '.join(parts))
  ev = compiled.evaluate
  scored = evaluation.scored_model(ev.protocol)
  if ev.protocol == 'local':
    log(f'evaluation: scored_model={scored}, --eval_protocol=local (each client\'s own model '
        'on its own test split, accuracy = the mean over clients; global_test_mean_accuracy '
        '= their mean on the whole test set)')
  else:  # every run says which model its numbers are for (issue 45 item 3)
    personal = algorithms.recipe(cfg).personal
    log(f'evaluation: scored_model={scored}, --eval_protocol={ev.protocol} ('
        + ('each client\'s own model on its own test split, accuracy = the mean over domains'
           if ev.protocol == 'fedbn' else 'the global model on the whole test set')
        + (f'; per domain: {", ".join(ev.columns)}' if ev.columns else '') + ')'
        + (f'; --algo={cfg.algo}\'s clients\' own models are not scored' if personal else ''))
  if exp.test_parts is not None and ev.protocol != 'local':
    log('per-client test splits: metrics.csv client_mean/std/worst_accuracy')
  available = preflight.available_memory()
  log(f'memory estimate (XLA, one segment): {compiled.memory_bytes / 1e9:.2f} GB'
      + (f' of {available / 1e9:.1f} GB available' if available else '')
      + f'; compiled in {compiled.compile_s:.1f}s')


class _Progress:
  """The host loop's running record: rows, best accuracies, diverged runs, timing."""

  def __init__(self, study, history):
    self.study, self.num_runs = study, len(study.runs)
    self.eval_rows = history.get('eval_rows', [])
    self.round_rows = history.get('round_rows', [])
    self.diverged = {}  # run -> (round, client)
    self.best = {}
    for row in self.eval_rows:
      self.best[row['run']] = max(self.best.get(row['run'], -1.0), row['test_accuracy'])
    for row in history.get('diverged', []):
      self.diverged[row['run']] = (row['round'], row['client'])
    # TensorBoard: rows already in the event files (a resumed run wrote them before), writers.
    self.tensorboard_written = {'eval': len(self.eval_rows), 'rounds': len(self.round_rows)}
    self.tensorboard_writers = {}
    self.diag = None  # diagnostics.Recorder when a diagnostic is on (_loop sets it)
    self.best_val = None  # best_val.Tracker when the run keeps its best-validation model

  def history(self):
    return {'eval_rows': self.eval_rows, 'round_rows': self.round_rows,
            'diverged': [{'run': r, 'round': d[0], 'client': d[1]}
                         for r, d in sorted(self.diverged.items())],
            **(self.diag.history() if self.diag else {})}

  def add_rounds(self, done, n, seg_metrics, diverged_at):
    """Rows of rounds done+1..done+n; returns the runs that diverged in them."""
    bad_client = seg_metrics.pop('bad_client')
    new = []
    for r in range(self.num_runs):
      if r in self.diverged:
        continue
      last = int(diverged_at[r]) or done + n
      for i in range(last - done):
        self.round_rows.append({'run': r, 'round': done + i + 1,
                                **{k: float(v[i, r]) for k, v in seg_metrics.items()}})
      if diverged_at[r]:
        self.diverged[r] = (int(diverged_at[r]), int(bad_client[diverged_at[r] - done - 1, r]))
        new.append(r)
    return new

  def add_eval(self, done, result, elapsed, columns=()):
    """result: an evaluation.Evaluator's metrics; columns: its per-domain column names."""
    accs, losses = result['accuracy'], result['loss']
    for r in range(self.num_runs):
      if r in self.diverged:
        continue
      self.best[r] = max(self.best.get(r, -1.0), float(accs[r]))
      domains = dict(zip(columns, map(float, result['domain_accuracy'][r]))) if columns else {}
      domains.update({k: float(result[k][r]) for k in diagnostics.EVAL_COLUMNS if k in result})
      val = ({'val_accuracy': float(result['val_accuracy'][r]),
              'val_loss': float(result['val_loss'][r])} if 'val_accuracy' in result else {})
      clients = {k: float(result[k][r]) for k in evaluation.CLIENT_COLUMNS if k in result}
      self.eval_rows.append({'run': r, 'round': done, 'test_accuracy': float(accs[r]),
                             'test_loss': float(losses[r]), 'best_accuracy': self.best[r],
                             **val, **clients, **domains,
                             **results.carried(self.round_rows, r, done), 'elapsed_s': elapsed})


def _loop(study, compiled, out, log):
  """Runs the rounds: calls of a few rounds each (the host wakes about every second),
  evaluation every --eval_every rounds, checkpoints, per-run divergence."""
  cfg = study.config
  if out.restored is not None:
    state, history = out.restored
    if host_state.enabled(cfg.client_state):  # the restored table goes back to host memory
      state = host_state.on_host(state)
    log(f'resumed from the checkpoint at round {int(state.round[0])}')
  else:
    state, history = study.state, {}
  prog = _Progress(study, history)
  ev = compiled.evaluate
  done = int(state.round[0])
  if diagnostics.enabled(cfg.diag_client_acc, cfg.diag_features_rounds, cfg.diag_attention,
                         cfg.personalize_every_eval):
    prog.diag = diagnostics.Recorder(study, history, out.run_dir,
                                     done if out.restored is not None else None, log)
    prog.diag.at_stop(done, state.params)  # features of the initial model (round 0)
  if (best_val.wanted(cfg.save_params, cfg.val_fraction, cfg.val_source)
      and not distributed.active()):
    prog.best_val = best_val.Tracker(out.run_dir, prog.num_runs, prog.eval_rows)
  elapsed0 = prog.eval_rows[-1]['elapsed_s'] if prog.eval_rows else 0.0
  if not prog.eval_rows:
    prog.add_eval(0, _evaluate(ev, state, prog), 0.0, ev.columns)
    if cfg.rounds == 0 and distributed.is_writer():  # --rounds=0: only this evaluation
      results.write_metrics(out.run_dir, prog)
  bar = _progress_bar(cfg.rounds, done, cfg.progress)
  last_checkpoint, per_call, first, t_start = done, 1, True, time.perf_counter()
  while done < cfg.rounds and len(prog.diverged) < prog.num_runs:
    interrupts.check()  # a signal whose raise something swallowed
    next_eval = min((done // cfg.eval_every + 1) * cfg.eval_every, cfg.rounds)
    stop = min(next_eval, (prog.diag and prog.diag.next_stop(done)) or next_eval)
    n = 1 if host_state.enabled(cfg.client_state) else min(per_call, stop - done)
    t = time.perf_counter()
    state, seg_metrics = compiled.segment(state, study.data, study.inputs, jnp.int32(n))
    seg_metrics, diverged_at = jax.device_get((seg_metrics, state.diverged_at))
    seconds = time.perf_counter() - t
    if first:  # say how long the run will take, from the first measured call
      _log_estimate(log, seconds / n, cfg.rounds - done)
      first = False
    per_call = max(1, int(SECONDS_PER_CALL * n / max(seconds, 1e-9)))
    if prog.diag:
      prog.diag.after_call(done, n, seg_metrics.pop('diag', None), diverged_at,
                           set(prog.diverged), done + n == next_eval)
    for r in prog.add_rounds(done, n, seg_metrics, diverged_at):
      _log_diverged(study, prog, r, log)
    done += n
    if prog.diag:
      prog.diag.at_stop(done, state.params)
    if done == next_eval or len(prog.diverged) == prog.num_runs:
      prog.add_eval(done, _evaluate(ev, state, prog),
                    elapsed0 + time.perf_counter() - t_start, ev.columns)
      last_checkpoint = _record(cfg, out, prog, state, done, last_checkpoint)
    _advance(bar, n, prog)
  if bar is not None:
    bar.close()
  for writer in prog.tensorboard_writers.values():
    writer.close()
  out.checkpointer.close()
  return state, prog, time.perf_counter() - t_start


def _evaluate(ev, state, prog):
  """The evaluation's metrics [runs] on the host, with the diagnostics' columns if any."""
  cfg = prog.study.config
  if host_state.enabled(cfg.client_state) and not _evaluation_reads_clients(cfg):
    state = state._replace(clients=())  # the host table would be copied to the device unread
  result = jax.device_get(ev.evaluate(state, ev.inputs))
  if prog.diag:
    result = {**result, **prog.diag.eval_columns(state.params, prog.diverged)}
  if prog.best_val is not None:
    with interrupts.deferred(writing=True):
      prog.best_val.update(result, state.params, prog.diverged)
  return result


def _evaluation_reads_clients(cfg):
  """Whether the evaluation reads the per-client table (clients' own norms or models)."""
  return (eval_protocol(cfg) != 'global'
          or evaluation.keeps_norms_local(algorithms.recipe(cfg)))


def _record(cfg, out, prog, state, done, last_checkpoint):
  """Writes the metric files and, when due, a checkpoint, with Ctrl-C held back so that
  they stay consistent; returns the round of the last checkpoint."""
  every = cfg.checkpoint_every or cfg.eval_every
  with interrupts.deferred(writing=True):
    if distributed.is_writer():
      results.write_metrics(out.run_dir, prog)
    if (done // every > last_checkpoint // every or done == cfg.rounds) and \
        len(prog.diverged) < prog.num_runs:
      out.checkpointer.save(state, prog.history())
      return done
  return last_checkpoint


def _log_estimate(log, seconds_per_round, remaining):
  total = seconds_per_round * remaining
  log(f'{seconds_per_round:.2f}s per round: about '
      + (f'{total / 60:.1f} min' if total >= 90 else f'{total:.0f}s')
      + f' for the {remaining} round(s) to go')


def _log_diverged(study, prog, r, log):
  spec, (rnd, client) = study.runs[r], prog.diverged[r]
  where = f', first at client {client}' if client >= 0 else ''
  if len(study.runs) > 1:
    log(f'warning: run {r} ({results.run_label(spec)}) diverged in round {rnd}{where}; it is '
        'frozen there and reported as diverged')


def _progress_bar(total, done, enabled):
  if not enabled:
    return None
  from tqdm import tqdm  # pylint: disable=g-import-not-at-top
  bar = tqdm(total=total, unit='round', dynamic_ncols=True, file=sys.stderr)
  bar.update(min(done, total))
  return bar


def _advance(bar, n, prog):
  if bar is None:
    return
  bar.update(n)
  healthy = [b for r, b in prog.best.items() if r not in prog.diverged]
  if healthy:
    last = prog.eval_rows[-1]
    bar.set_postfix(acc=f'{last["test_accuracy"]:.4f}', best=f'{max(healthy):.4f}')


def _finish(study, compiled, out, state, prog, train_s, total_s, log):
  """Summaries, plots and parameters (results.py); raises DivergenceError when every run
  diverged."""
  cfg = study.config
  state = state._replace(params=distributed.to_host(state.params))  # process 0 alone uses them
  per_run = [results.run_summary(study, prog, spec) for spec in study.runs]
  if cfg.personalize == 'calibrate' and distributed.is_writer():
    results.personalize_all(study, state, per_run, out.run_dir, log)
  summary = results.summary(study, per_run, out.run_dir, compiled, total_s, train_s)
  if not distributed.is_writer():  # process 0 writes the results
    return results.report_end(study, summary, per_run, total_s, compiled.compile_s, log)
  results.write(out.run_dir, summary, per_run, log, cfg.scenario == 'concept_shift')
  _plot(study, prog, out.run_dir)
  if cfg.save_params:
    out.record.add_output(cfg.save_params, save_params(
        cfg.save_params, jax.tree.map(lambda a: a[:len(study.runs)], state.params)))
  if prog.best_val is not None:  # NAME.best_val.npz beside it
    kept = prog.best_val.save_beside(cfg.save_params, save_params)
    if kept:
      out.record.add_output(*kept)
  out.record.set(finished=True)  # last: a run stopped before this is finished by --resume
  return results.report_end(study, summary, per_run, total_s, compiled.compile_s, log)


def resume(run_dir, log=print, **overrides) -> dict:
  """Continues the runs in `run_dir` as configured; only RESUME_OVERRIDES (outputs.py) may
  change. Refuses a directory that is not a run of this tool, and one method's sub-directory of a
  --grid='algo:...' run (methods.check_not_a_method: its top directory is resumed)."""
  methods.check_not_a_method(run_dir)
  saved = rundir.read_run_config(run_dir)
  saved.pop('_resolved', None)
  for name in distributed.LAUNCH_FLAGS:
    saved.pop(name, None)
  overrides = inputs.absolute_flags(overrides)  # saved paths are absolute
  for name, value in overrides.items():
    if name not in outputs.RESUME_OVERRIDES and saved.get(name) != value:
      raise UserError(f'--resume continues {run_dir} as configured; --{name} cannot change '
                      f'(saved {saved.get(name)!r}); only --rounds, --progress and '
                      '--save_params may')
  allowed = {k: v for k, v in overrides.items() if k in outputs.RESUME_OVERRIDES}
  try:
    config = config_from_dict({**saved, **allowed, 'resume': True, 'out': run_dir})
  except UserError as e:  # 'unknown flag --X': a flag of the version that wrote the run
    if str(e).startswith('unknown flag --'):
      raise rundir.unknown_flag_error(run_dir, str(e)[len('unknown flag --'):]) from None
    raise
  return run(config, log)


def save_params(path, params) -> str:
  """Final global parameters of every run, named by flax path ('conv1/conv/kernel', ...),
  each array with a leading run axis in runs.csv order (length 1 for a single run).
  Returns the file's sha256 (the run's record keeps it: see rundir.Record.wrote)."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  buf = io.BytesIO()
  np.savez(buf, **models.flatten_names(params))
  report.atomic_write(path, buf.getvalue())
  return hashlib.sha256(buf.getvalue()).hexdigest()

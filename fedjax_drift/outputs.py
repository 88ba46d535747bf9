"""A run's outputs before its first round: the checks on --out and --save_params, what a
resume may change, and opening the run directory.

`check_outputs` runs every check that can fail before any work (writing nothing; with
--resume, `_check_resumable` also refuses a run that is not the recorded one). `open_run_dir`
then restores the checkpoint or clears what --overwrite allows, opens the run's record
(rundir.Record) and writes config.json (with `_resolved`: what the flags resolved to),
splits.csv and partition.png. `run_flags` are the flags a run's identity (its checkpoints, its
record's checksum) depends on: all but RESUME_OVERRIDES.
"""
import dataclasses
import os
import time
from typing import Any, NamedTuple

import jax
import numpy as np

from fedjax_drift import (algorithms, best_val, distributed, evaluation, inputs, models, report,
                          rundir, splits)
from fedjax_drift import config as config_lib
from fedjax_drift.checkpoint import Checkpointer
from fedjax_drift.config import from_dict as config_from_dict
from fedjax_drift.errors import UserError
from fedjax_drift.study import eval_protocol, input_flags


class Output(NamedTuple):
  run_dir: str
  checkpointer: Any
  restored: Any           # (state, history) of the checkpoint resumed from, or None
  record: Any = None      # the run directory's rundir.Record (None: not this process's to write)


RESUME_OVERRIDES = ('rounds', 'progress', 'save_params', 'resume', 'out', 'compile_cache') + \
    distributed.LAUNCH_FLAGS  # how this launch spans processes, never taken from config.json


def check_outputs(config):
  """Every check on --out and --save_params that can fail, before any work; writes nothing.
  Returns the run directory (absolute)."""
  run_dir = os.path.abspath(config.run_dir(time.strftime('%Y%m%d-%H%M%S')))
  files = input_paths(config)
  rundir.check_out(run_dir, config.resume, config.overwrite, files)
  rundir.check_save_params(config.save_params, run_dir, files, config.overwrite, config.resume)
  if best_val.wanted(config.save_params, config.val_fraction, config.val_source):
    rundir.check_save_params(best_val.beside(config.save_params), run_dir, files,
                             config.overwrite, config.resume)
  if config.resume:
    _check_resumable(config, run_dir)
  return run_dir


def input_paths(config):
  return [path for _, path in inputs.input_files(input_flags(config))]


def _check_resumable(config, run_dir):
  """--resume continues only this tool's run, as recorded, on unchanged inputs, to a later
  round. Refuses a config.json edited since the run wrote it, and a launch whose flags differ
  from the recorded ones (naming the first that differs)."""
  saved = rundir.read_run_config(run_dir)
  record = rundir.Record.load(run_dir)
  if record is not None and record.data.get('config_sha256'):
    written = run_flags(dataclasses.asdict(config_from_dict(
        {k: v for k, v in saved.items() if k in config_lib.field_names()})))
    if rundir.digest(written) != record.data['config_sha256']:
      # Both files edited alike: no flag differs from the record's copy, only the checksum.
      diff = rundir.first_difference(record.data['config'], written) or (
          f'{rundir.MARKER}\'s copy of the flags was edited too: its checksum no longer matches')
      raise UserError(f'--resume: {os.path.join(run_dir, "config.json")} was edited since '
                      f'fedjax-drift wrote it ({diff}); restore it or start a new run')
    now = run_flags(dataclasses.asdict(config))
    if rundir.digest(now) != record.data['config_sha256']:
      raise UserError(f'--resume continues {run_dir} as recorded; '
                      + (rundir.first_difference(record.data['config'], now) or
                         f'{rundir.MARKER}\'s copy of the flags was edited: its checksum no '
                         'longer matches'))
  inputs.check_unchanged(saved['_resolved'].get('inputs', {}), run_dir)
  if config.lr_schedule == 'cosine' and saved.get('rounds', config.rounds) != config.rounds:
    raise UserError(f'--resume: --lr_schedule=cosine decays over the run\'s --rounds='
                    f'{saved["rounds"]}, so --rounds={config.rounds} would change the rounds '
                    'already run; resume with the same --rounds')
  latest = Checkpointer(run_dir).latest_round()
  if latest is not None and config.rounds < latest:
    raise UserError(f'--resume: --rounds={config.rounds} is below round {latest}, where '
                    f'{run_dir} is checkpointed; pass --rounds={latest} or more')


def open_run_dir(study, run_dir, log, fingerprint) -> Output:
  """Restores the checkpoint (resume: only one of this run, with these flags) or clears what
  --overwrite allows, then opens the run's record (rundir.Record: every file written from
  here on is entered in it first) and writes config.json. A resume that fails to restore has
  written nothing."""
  cfg, writer = study.config, distributed.is_writer()
  identity = {'config_sha256': rundir.digest(run_flags(dataclasses.asdict(cfg)))}
  record = rundir.Record.load(run_dir) if cfg.resume else None
  checkpointer = Checkpointer(run_dir, cfg.keep_checkpoints)
  restored = None
  if cfg.resume and checkpointer.rounds():
    expect = record and {**identity, 'run_id': record.run_id, 'legacy': record.data['adopted']}
    restored = checkpointer.restore(study.state, log, expect)
  elif cfg.resume:
    log(f'{run_dir} has no checkpoint yet: starting it from round 0')
  if writer:  # clears what --overwrite allows, or adopts a run from before records
    record = rundir.open_record(run_dir, cfg.resume, rundir.overwrite_mode(cfg.overwrite),
                                input_paths(cfg), log)
    report.start_recording(run_dir, record)  # until locks.claimed releases the directory
  if record is not None:
    checkpointer.identity = {**identity, 'run_id': record.run_id}
  out = Output(run_dir, checkpointer, restored, record)
  if finished(out, cfg) or not writer:
    return out
  record.set(finished=False, config=run_flags(dataclasses.asdict(cfg)), **identity)
  report.write_json(os.path.join(run_dir, 'config.json'),
                    _resolved_config(study, run_dir, fingerprint))
  # Every time, whole: a resume rewrites the same rows (each run's splits follow its seed).
  splits.write(os.path.join(run_dir, 'splits.csv'), study.experiments)
  if restored is None:
    exp = study.experiments[0]
    report.plot_partition(os.path.join(run_dir, 'partition.png'),
                          np.asarray(exp.data.label_hist),
                          f'{cfg.partition} partition of {exp.dataset.name} (seed {cfg.seed})')
  return out


def run_flags(values: dict) -> dict:
  """The flags that define a run, which its checkpoints depend on: every Config field but
  those a launch may change (RESUME_OVERRIDES, --overwrite). values: dataclasses.asdict of
  a Config. Fields at their default are left out, so a run directory written before a new
  flag existed still resumes (the new flag's default is what that run did)."""
  defaults = config_lib.defaults()  # the plugins' flags too
  return {k: values[k] for k in sorted(set(defaults) - set(RESUME_OVERRIDES) - {'overwrite'})
          if k in values and values[k] != defaults[k]}


def finished(out, config):
  """Whether a resume found the run already complete: checkpointed at its last round, and
  its record saying summary, plots and parameters were all written (a run interrupted
  between them is finished by the next --resume)."""
  return bool(out.restored is not None and int(out.restored[0].round[0]) >= config.rounds
              and out.record is not None and out.record.data.get('finished'))


def _resolved_config(study, run_dir, fingerprint):
  cfg, exp = study.config, study.experiments[0]
  resolved = dataclasses.asdict(cfg)
  resolved.update(out=run_dir, resume=False, _resolved={
      'runs': [{'run': s.index, 'seed': s.seed, **s.point} for s in study.runs],
      'traced_hyperparameters': list(study.traced), 'run_chunk': study.width,
      'num_classes': exp.dataset.num_classes, 'input_shape': list(exp.dataset.x_train.shape[1:]),
      'num_clients': len(exp.train_parts), 'max_local_steps': study.max_local_steps,
      'cohort_chunk': exp.chunk, 'strategy': exp.strategy,
      'num_params': models.num_params(exp.state.params),
      'weighting': algorithms.weighting(cfg),
      'weighting_source': algorithms.weighting_source(cfg),
      'beta_local': exp.config.beta_local, 'beta_global': exp.config.beta_global,
      'backend': jax.default_backend(), 'jax_version': jax.__version__,
      'eval_protocol': eval_protocol(exp.config),
      'scored_model': evaluation.scored_model(eval_protocol(exp.config)),
      'domain_columns': evaluation.domain_columns(exp.dataset),
      'inputs': fingerprint, 'normalization': normalization(exp)})
  return resolved


def normalization(exp):
  """The per-channel mean and std the inputs are normalised with (config.json), or None."""
  norm = exp.pipeline.norm if exp.pipeline is not None else None
  if norm is None:
    return None
  return {'mean': [float(v) for v in norm.mean], 'std': [float(v) for v in norm.std]}

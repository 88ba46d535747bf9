"""Our side of a cross-check: run one configuration and export what another code needs.

  python benchmarks/crosscheck/export.py --dir=DIR [run flags, as experiments/run.py takes]

writes into DIR
  partition.json    per-client lists of training-example indices (what each client trains on;
                    --partition=file: reads it back)
  cohorts.json      the client ids each round trained (--cohorts=file: reads it back)
  init.npz          the initial global parameters, named by flax path, with a leading run axis
                    of 1 (--init_params reads it back)
  rounds/round_TTTT.npz  the global parameters after round T (round_0000: the initial ones)
  fedgen/train/train.json, fedgen/test/test.json  with --fedgen_json: the clients' data in
                    FedGen's format (zhuangdizhu/FedGen utils/model_utils.read_data: users
                    f_00000, f_00001, ... in client order, x as the model's inputs, NCHW)

and prints one line per file. The rounds run as one lone run (no --seeds, no --grid); the
cohorts are read from the engine's diagnostics, so they are the ones trained, sampled or from
--cohorts=file:. See README.md here for the recipe and compare.py for the comparison.
"""
import argparse
import json
import os
import sys

import jax
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)  # this clone's fedjax_drift, installed or not

# pylint: disable=wrong-import-position
from fedjax_drift import cli, models, run_data, study
from fedjax_drift.config import Config
from fedjax_drift.data import pipeline as input_pipeline
from fedjax_drift.errors import UserError


def parse(argv):
  """(export directory, FedGen json wanted, Config) from the command line."""
  own = argparse.ArgumentParser(add_help=False)
  own.add_argument('--dir', required=True)
  own.add_argument('--fedgen_json', action='store_true')
  args, rest = own.parse_known_args(argv)
  parser = cli.build_parser(Config, suppress_defaults=True)
  cli.check_flag_names(parser, rest)
  values = {k: v for k, v in vars(parser.parse_args(rest)).items() if k != 'list'}
  config = Config(**values)
  if config.seeds != 1 or config.grid:
    raise UserError('export.py exports one run: drop --seeds and --grid')
  return args.dir, args.fedgen_json, config


def run_rounds(exp):
  """[(params after round t, cohort ids of round t)] for t = 1..rounds, from exp.state."""
  round_fn = jax.jit(study.scheduled_round(
      exp.config, exp.model, exp.server_data, exp.schedule, exp.max_local_steps, exp.chunk,
      exp.scenario, exp.pipeline, client_probe=lambda params, concept: 0.0,
      cohorts=run_data.read_cohorts(exp.config.cohorts[5:], exp.config.rounds,
                                    exp.config.clients_per_round)
      if exp.config.cohorts else None))
  state, out = exp.state, []
  for _ in range(exp.config.rounds):
    state, metrics = round_fn(state, exp.data)
    out.append((state.params, np.asarray(metrics['diag']['ids']).tolist()))
  return out


def _write_json(path, value):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'w') as f:
    json.dump(value, f)
  print(f'wrote {path}')


def _write_params(path, params, run_axis=False):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  named = models.flatten_names(params)
  np.savez(path, **({k: v[None] for k, v in named.items()} if run_axis else named))
  print(f'wrote {path}')


def fedgen_users(x, y, parts, norm):
  """FedGen's {'users', 'user_data', 'num_samples'}: client i is user f_{i:05d} (their
  read_data sorts the names, so the order is ours), x the model's inputs (NCHW images)."""
  data = {'users': [], 'user_data': {}, 'num_samples': []}
  for i, part in enumerate(parts):
    inputs = np.asarray(input_pipeline.preprocess(x[part], norm))
    if inputs.ndim == 4:
      inputs = inputs.transpose(0, 3, 1, 2)
    name = f'f_{i:05d}'
    data['users'].append(name)
    data['user_data'][name] = {'x': inputs.tolist(), 'y': [int(v) for v in y[part]]}
    data['num_samples'].append(len(part))
  return data


def export(directory, config, fedgen_json=False):
  """Runs `config` as one run and writes the files listed in the module docstring."""
  exp = study.prepare(config)
  _write_json(os.path.join(directory, 'partition.json'),
              [sorted(int(i) for i in part) for part in exp.train_parts])
  _write_params(os.path.join(directory, 'init.npz'), exp.state.params, run_axis=True)
  _write_params(os.path.join(directory, 'rounds', 'round_0000.npz'), exp.state.params)
  cohorts = []
  for t, (params, ids) in enumerate(run_rounds(exp), 1):
    _write_params(os.path.join(directory, 'rounds', f'round_{t:04d}.npz'), params)
    cohorts.append(ids)
  _write_json(os.path.join(directory, 'cohorts.json'), cohorts)
  if fedgen_json:
    ds, norm = exp.dataset, exp.pipeline.norm
    _write_json(os.path.join(directory, 'fedgen', 'train', 'train.json'),
                fedgen_users(ds.x_train, ds.y_train, exp.train_parts, norm))
    test_parts = exp.test_parts or np.array_split(np.arange(len(ds.y_test)),
                                                  len(exp.train_parts))
    _write_json(os.path.join(directory, 'fedgen', 'test', 'test.json'),
                fedgen_users(ds.x_test, ds.y_test, test_parts, norm))


def main(argv=None):
  try:
    directory, fedgen_json, config = parse(sys.argv[1:] if argv is None else argv)
    export(directory, config, fedgen_json)
  except UserError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  return 0


if __name__ == '__main__':
  sys.exit(main())

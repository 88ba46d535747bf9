"""Memory and speed of the text models (issue 20 item 7), on synthetic token data.

    python benchmarks/text_memory.py estimate [--model=distilbert --algo=fedavg,fedgkd]
    python benchmarks/text_memory.py speed [--model=text_bag --rounds=20 --reps=2]

estimate: XLA's memory estimate for one compiled segment (what the run header prints and the
  memory check refuses over), and the preflight's estimate from shapes (study.device_bytes),
  for FedGKD Table 4's DistilBERT setting: --clients_per_round=4, B=64, L=128, local Adam,
  clients one after another (chunk 1, the CPU default) and vmapped (chunk 4, the GPU
  default). Only compiles: nothing is trained, so it is not a timing.
speed: runs the model for --rounds rounds, one process per repetition, and reports seconds
  per round (summary.json's train_time_s / rounds, compilation excluded) and the process's
  peak RSS. Time it on a quiet machine.
Both print one JSON object per measurement and write them to --json if given.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# The run in a process that reports its own peak RSS (ru_maxrss, KiB on Linux) as it exits.
CHILD = ('import atexit, resource, runpy, sys; '
         'atexit.register(lambda: print("PEAK_RSS_KB=%d" % resource.getrusage('
         'resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)); '
         'sys.argv = ["run.py"] + sys.argv[1:]; runpy.run_path({run!r}, run_name="__main__")')


def token_npz(path, n, seq_len, vocab, classes=4, seed=0):
  """Writes random token data (int32 [n, 2, L], full-length masks) with its vocab_size."""
  rng = np.random.default_rng(seed)

  def split(m):
    ids = rng.integers(1, vocab, (m, seq_len)).astype(np.int32)
    return np.stack([ids, np.ones_like(ids)], 1), rng.integers(0, classes, m)

  (x, y), (xt, yt) = split(n), split(max(n // 10, classes))
  np.savez(path, x_train=x, y_train=y, x_test=xt, y_test=yt, vocab_size=np.int32(vocab))


def setting(args, npz, out, **kw):
  """The flags of one measured run: FedGKD Table 4's local training (Adam lr 1e-5, wd 0,
  B=64, one epoch), K clients per round of N."""
  flags = dict(dataset=f'npz:{npz}', model=args.model, num_clients=args.num_clients,
               clients_per_round=args.clients_per_round, batch_size=args.batch_size,
               local_optimizer='adam', lr=1e-5, weight_decay=0.0, local_epochs=1,
               partition='iid', rounds=args.rounds, eval_every=args.rounds, progress=False,
               out=out)
  flags.update(kw)
  return flags


def estimate(args, npz, tmp):
  """XLA's estimate and the preflight's for each algorithm and client parallelism."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import fedjax_drift  # pylint: disable=g-import-not-at-top
  from fedjax_drift import engine, models, study as study_lib  # pylint: disable=g-import-not-at-top
  from fedjax_drift.preflight import estimated_memory  # pylint: disable=g-import-not-at-top
  rows = []
  for algo in args.algo.split(','):
    for parallelism in ('sequential', 'vmap'):
      config = fedjax_drift.Config(**setting(args, npz, os.path.join(tmp, algo), algo=algo,
                                             client_parallelism=parallelism))
      runs = study_lib.plan(config)
      preflight = []
      study = study_lib.build(config, runs, lambda need, *_: preflight.append(need))
      segment = engine.make_segment(study.step, config.eval_every).lower(
          study.state, study.data, study.inputs, jnp.int32(1)).compile()
      rows.append({'model': args.model, 'algo': algo, 'client_parallelism': parallelism,
                   'chunk': study.experiments[0].chunk,
                   'clients_per_round': args.clients_per_round,
                   'batch_size': args.batch_size, 'seq_len': args.seq_len,
                   'params': models.num_params(study.experiments[0].state.params),
                   'xla_estimate_gb': estimated_memory(segment) / 1e9,
                   'preflight_gb': preflight[0] / 1e9})
      print(json.dumps(rows[-1]), flush=True)
  return rows


def speed(args, npz, tmp):
  """Seconds per round and peak RSS, one process per repetition."""
  rows = []
  for rep in range(args.reps):
    out = os.path.join(tmp, f'speed-{rep}')
    flags = setting(args, npz, out, algo=args.algo.split(',')[0])
    done = subprocess.run(
        [sys.executable, '-c', CHILD.format(run=os.path.join(ROOT, 'experiments', 'run.py'))]
        + [f'--{k}={v}' for k, v in flags.items()], check=True, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    with open(os.path.join(out, 'summary.json')) as f:
      summary = json.load(f)
    rows.append({'model': args.model, 'algo': flags['algo'], 'rep': rep,
                 'seconds_per_round': summary['train_time_s'] / args.rounds,
                 'compile_s': summary.get('compile_s'),
                 'peak_rss_gb': int(done.stderr.rsplit('PEAK_RSS_KB=', 1)[1].split()[0])
                                * 1024 / 1e9,
                 'load_avg': os.getloadavg()[0]})
    print(json.dumps(rows[-1]), flush=True)
  return rows


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('what', choices=('estimate', 'speed'))
  parser.add_argument('--model', default='')
  parser.add_argument('--algo', default='fedavg,fedgkd')
  parser.add_argument('--clients_per_round', type=int, default=4)
  parser.add_argument('--num_clients', type=int, default=20)  # FedGKD Table 4: AG News
  parser.add_argument('--batch_size', type=int, default=64)
  parser.add_argument('--seq_len', type=int, default=128)
  parser.add_argument('--vocab', type=int, default=30522)  # distilbert-base-uncased's
  parser.add_argument('--examples', type=int, default=0,
                      help='training examples; 0 = one batch per client')
  parser.add_argument('--rounds', type=int, default=20)
  parser.add_argument('--reps', type=int, default=2)
  parser.add_argument('--json', default='')
  args = parser.parse_args()
  args.model = args.model or ('distilbert' if args.what == 'estimate' else 'text_bag')
  with tempfile.TemporaryDirectory() as tmp:
    npz = os.path.join(tmp, 'tokens.npz')
    token_npz(npz, args.examples or args.num_clients * args.batch_size, args.seq_len,
              args.vocab)
    rows = (estimate if args.what == 'estimate' else speed)(args, npz, tmp)
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(rows, f, indent=1)


if __name__ == '__main__':
  main()

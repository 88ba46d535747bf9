"""Scale figures (issue 23 item 5): memory limits per model, seconds per round against K,
compile time against the rounds per compiled segment.

    python benchmarks/scale.py memory  [--budget_gb=24] [--models=logreg,mlp,cnn_mnist,...]
    python benchmarks/scale.py rounds  [--ks=10,100,500 --reps=3 --rounds=3]
    python benchmarks/scale.py compile [--lengths=1,10,100 --reps=3]
    python benchmarks/scale.py SECTION --quick      # tiny sizes, for the tests

memory: for each model, on synthetic uint8 data of the real dataset's size (MNIST: 60,000
  28x28x1 for logreg, mlp, cnn_mnist; CIFAR-10: 50,000 32x32x3 for cnn_cifar, resnet18), the
  largest cohort K (--clients_per_round = --num_clients = K, FedAvg) under each client
  strategy (sequential, the CPU default, and vmap, the accelerator default), and the largest
  --num_clients N for an algorithm with a per-client state table (--state_algos, default
  SCAFFOLD's c_i) at K=10, that fit in --budget_gb. "Fits" is what a run with
  --memory_budget_gb=BUDGET checks before it starts (fedjax_drift/simulation.py): the
  preflight's bytes from shapes (study.device_bytes) and XLA's estimate for one compiled
  segment (preflight.estimated_memory), both <= the budget. Each probe only compiles, on
  shapes (jax.eval_shape: no state, no client table is allocated), and the search brackets
  the answer to --tol by linear interpolation (memory grows about linearly in K and N) with
  a bisection step whenever interpolation alone does not close the bracket. K and N are
  capped at the number of training examples (one example per client): a result at the cap
  is `capped`, not memory-bound. Then, per model, one point is run for real (1 round through
  experiments/run.py, its own process): the largest vmapped cohort whose estimate is under
  --validate_gb (default 4, safe beside other jobs on a 24 GB machine), with the process's
  peak RSS (VmHWM) next to the estimates.
rounds: seconds per round of cnn_mnist FedAvg against K (all of N = K clients take part,
  H=10 local steps of batch 32, 60,000 synthetic 28x28x1 examples), compilation excluded:
  one process per (K, repetition), interleaved K1 K2 K3 K1 K2 K3 ..., each compiling the
  run's one-round segment, running one warm-up round, then timing >= --rounds rounds (and
  >= --min_seconds); per K the median and range over repetitions of each process's median,
  s/round/K, and a least-squares line s = a + b K over every process's median with its R^2
  and residuals. Linear cost: s/round/K about constant and R^2 near 1. --conv_impl and
  --client_parallelism are recorded as asked and as the run resolved them.
compile: seconds to lower and to compile the default run's segment (python
  experiments/run.py's flags) against --eval_every, the rounds one compiled segment runs (a
  fori_loop with a traced trip count: engine.make_segment), a fresh process per (length,
  repetition), interleaved, with JAX's persistent compilation cache off.

Every section writes benchmarks/results/scale-SECTION-DATE-TIME.json (or --out): the host
(CPU, cores, versions, git commit and whether fedjax_drift/ or this file differ from it), the
load average when each process started, the raw numbers and the summary. Time `rounds` and
`compile` on a quiet machine; `memory`'s search times nothing but the validation's peak RSS.
"""
import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, 'benchmarks'))
import bench  # pylint: disable=g-import-not-at-top,wrong-import-position

H, B = 10, 32
# name: (train examples, test examples, input shape): the real datasets' sizes.
DATA = {'mnist': (60000, 10000, (28, 28, 1)), 'cifar10': (50000, 10000, (32, 32, 3)),
        'tiny': (400, 100, (28, 28, 1))}
MODEL_DATA = {'logreg': 'mnist', 'mlp': 'mnist', 'cnn_mnist': 'mnist', 'cnn_emnist': 'mnist',
              'cnn_mnist_bn': 'mnist', 'mlp_bn': 'mnist'}  # every other model: cifar10
MODELS = 'logreg,mlp,cnn_mnist,cnn_cifar,resnet18'
STRATEGIES = ('sequential', 'vmap')
# Each process reports its own peak RSS (VmHWM) as it exits: the run's, not this script's.
CHILD_RUN = ('import atexit, runpy, sys; sys.path.insert(0, {bench_dir!r}); import bench; '
             'atexit.register(lambda: print("PEAK_RSS_GB=%r" % bench.peak_rss_gb(), '
             'file=sys.stderr)); sys.argv = ["run.py"] + sys.argv[1:]; '
             'runpy.run_path({run!r}, run_name="__main__")')
# The floor under every run's peak RSS: Python, JAX's CPU client and the package, imported.
CHILD_BASELINE = ('import sys; sys.path.insert(0, {bench_dir!r}); import bench, jax; '
                  'import fedjax_drift.simulation; jax.devices(); print(bench.peak_rss_gb())')


# ------------------------------------------------------------------------------ data


def synthetic_npz(path, n_train, n_test, shape, classes=10, seed=0):
  """Writes random uint8 images [n, *shape] with labels 0..classes-1 to `path` (an npz the
  normal data path reads as --dataset=npz:PATH); returns path. The cost of a round and its
  memory depend on the shapes, not on what the pixels show."""
  rng = np.random.default_rng(seed)
  split = lambda n: (rng.integers(0, 256, (n,) + tuple(shape), dtype=np.uint8),
                     rng.integers(0, classes, n).astype(np.int32))
  (x, y), (xt, yt) = split(n_train), split(n_test)
  np.savez(path, x_train=x, y_train=y, x_test=xt, y_test=yt)
  return path


def dataset_for(model, quick):
  """The DATA key whose sizes `model` is probed on."""
  return 'tiny' if quick else MODEL_DATA.get(model, 'cifar10')


# -------------------------------------------------------------------------- measuring


def build_abstract(flags):
  """(study, (state, data, inputs) as shapes, preflight bytes, per-client state bytes) of the
  run `flags` (Config field -> value), built under jax.eval_shape: the data is read, nothing
  of the state or the client tables is allocated, so a probe of a 45 GB table costs
  nothing. The study's step closes over no traced value and can be lowered on the shapes."""
  import jax  # pylint: disable=g-import-not-at-top
  import fedjax_drift  # pylint: disable=g-import-not-at-top
  from fedjax_drift import study as study_lib  # pylint: disable=g-import-not-at-top
  config = fedjax_drift.Config(**flags)
  runs = study_lib.plan(config)
  box = {}

  def build():
    box['study'] = study_lib.build(config, runs, lambda need, table: box.update(
        preflight=need, table=table))
    return box['study'].state, box['study'].data, box['study'].inputs
  shapes = jax.eval_shape(build)
  return box['study'], shapes, box['preflight'], box['table']


def _options(study):
  """The compile options a run of `study` uses (simulation._compile's)."""
  from fedjax_drift import engine  # pylint: disable=g-import-not-at-top
  return engine.compiler_options(study.experiments[0].model.family == 'conv')


def probe(flags):
  """XLA's and the preflight's bytes for one segment of the run `flags`: compile only."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from fedjax_drift import engine  # pylint: disable=g-import-not-at-top
  from fedjax_drift.preflight import estimated_memory  # pylint: disable=g-import-not-at-top
  study, shapes, preflight, table = build_abstract(flags)
  start = time.perf_counter()
  compiled = engine.make_segment(study.step, study.config.eval_every,
                                 compiler_options=_options(study)).lower(
      *shapes, jnp.int32(1)).compile()
  xla = estimated_memory(compiled)
  exp = study.experiments[0]
  return dict(xla_bytes=xla, preflight_bytes=int(preflight), need_bytes=max(xla, preflight),
              client_state_bytes=int(table), chunk=exp.chunk, strategy=exp.strategy,
              conv_impl=exp.model.conv_impl, compile_s=time.perf_counter() - start)


def largest_fitting(need, lo, hi, budget, tol, known, max_probes=40):
  """The largest n in [lo, hi] with need(n) <= budget, for need non-decreasing in n.

  known: {n: bytes} of earlier probes, read and extended (a second budget reuses them).
  Linear interpolation between the bracket's ends guesses the crossing, the guess's
  neighbour at relative distance `tol` on the other side closes the bracket when need is
  about linear, and a geometric bisection step follows when it does not, so every round of
  at most three probes at least halves the bracket's log-width.
  Returns {'largest_fit': n or None, 'smallest_over': n or None, 'capped': bool,
           'probes': number of new probes}."""
  new = [0]

  def f(n):
    if n not in known:
      if new[0] >= max_probes:
        raise RuntimeError(f'no answer within {max_probes} probes')
      new[0] += 1
      known[n] = need(n)
    return known[n]

  fits = [n for n in known if lo <= n <= hi and known[n] <= budget]
  overs = [n for n in known if lo <= n <= hi and known[n] > budget]
  fit, over = max(fits, default=None), min(overs, default=None)
  if fit is None:
    if f(lo) > budget:
      return dict(largest_fit=None, smallest_over=lo, capped=False, probes=new[0])
    fit = lo
  if over is None:
    if f(hi) <= budget:
      return dict(largest_fit=hi, smallest_over=None, capped=True, probes=new[0])
    over = hi
  closed = lambda: over - fit <= max(1, math.floor(tol * fit))

  def place(n):
    nonlocal fit, over
    if f(n) <= budget:
      fit = max(fit, n)
    else:
      over = min(over, n)

  while not closed():
    slope = (known[over] - known[fit]) / (over - fit)
    guess = min(over - 1, max(fit + 1, fit + int((budget - known[fit]) / slope)))
    place(guess)
    if closed():
      break
    step = max(1, math.floor(tol * guess))
    place(min(over - 1, guess + step) if guess == fit else max(fit + 1, guess - step))
    if not closed():
      place(min(over - 1, max(fit + 1, int(math.sqrt(fit * over)))))
  return dict(largest_fit=fit, smallest_over=over, capped=False, probes=new[0])


def linear_fit(ks, seconds):
  """Least squares s = a + b k over the points (ks[i], seconds[i]): {'intercept_s' (a),
  'slope_s' (b: seconds per client, or per round of segment length), 'r2', 'residuals_s'}."""
  k, s = np.asarray(ks, float), np.asarray(seconds, float)
  b, a = np.polyfit(k, s, 1)
  residuals = s - (a + b * k)
  total = float(np.sum((s - s.mean()) ** 2))
  r2 = 1.0 - float(np.sum(residuals ** 2)) / total if total > 0 else 1.0
  return dict(intercept_s=float(a), slope_s=float(b), r2=r2,
              residuals_s=[float(r) for r in residuals])


def spread(values):
  """{'median', 'min', 'max', 'n'} of `values`."""
  v = [float(x) for x in values]
  return dict(median=float(np.median(v)), min=min(v), max=max(v), n=len(v))


# ------------------------------------------------------------------------- child side


def child_rounds(flags, rounds, min_seconds):
  """Compiles the run's one-round segment, runs a warm-up round, then times rounds."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import fedjax_drift  # pylint: disable=g-import-not-at-top
  from fedjax_drift import distributed, engine, study as study_lib  # pylint: disable=g-import-not-at-top
  from fedjax_drift.preflight import estimated_memory  # pylint: disable=g-import-not-at-top
  study = distributed.place(study_lib.build(fedjax_drift.Config(**flags)))
  one = jnp.int32(1)
  start = time.perf_counter()
  segment = engine.make_segment(study.step, 1, compiler_options=_options(study)).lower(
      study.state, study.data, study.inputs, one).compile()
  compile_s = time.perf_counter() - start
  state = segment(study.state, study.data, study.inputs, one)[0]  # warm-up
  jax.block_until_ready(state.params)
  times = []
  while len(times) < rounds or sum(times) < min_seconds:
    start = time.perf_counter()
    state = segment(state, study.data, study.inputs, one)[0]
    jax.block_until_ready(state.params)
    times.append(time.perf_counter() - start)
  exp = study.experiments[0]
  return dict(round_s=times, seconds_per_round=float(np.median(times)), compile_s=compile_s,
              xla_estimate_gb=estimated_memory(segment) / 1e9,
              conv_impl=exp.model.conv_impl, strategy=exp.strategy, chunk=exp.chunk,
              backend=jax.default_backend())


def child_compile(flags):
  """Seconds to lower and to compile the run's segment of flags['eval_every'] rounds."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import fedjax_drift  # pylint: disable=g-import-not-at-top
  from fedjax_drift import engine, study as study_lib  # pylint: disable=g-import-not-at-top
  from fedjax_drift.preflight import estimated_memory  # pylint: disable=g-import-not-at-top
  jax.config.update('jax_enable_compilation_cache', False)  # a cache hit is no compile time
  study = study_lib.build(fedjax_drift.Config(**flags))
  start = time.perf_counter()
  lowered = engine.make_segment(study.step, flags['eval_every'],
                                compiler_options=_options(study)).lower(
      study.state, study.data, study.inputs, jnp.int32(1))
  lowered_at = time.perf_counter()
  compiled = lowered.compile()
  done = time.perf_counter()
  exp = study.experiments[0]
  return dict(lower_s=lowered_at - start, compile_s=done - lowered_at, total_s=done - start,
              xla_estimate_gb=estimated_memory(compiled) / 1e9,
              conv_impl=exp.model.conv_impl, strategy=exp.strategy,
              backend=jax.default_backend())


def child(args):
  flags = json.loads(args.child_flags)
  if args.child == 'rounds':
    result = child_rounds(flags, args.rounds, args.min_seconds)
  else:
    result = child_compile(flags)
  result['peak_rss_gb'] = bench.peak_rss_gb()
  print(json.dumps(result))


def spawn(section, flags, args, timeout):
  """One measurement in a fresh process: its result, with the load when it started."""
  cmd = [sys.executable, os.path.abspath(__file__), section, f'--child={section}',
         f'--child_flags={json.dumps(flags)}', f'--rounds={args.rounds}',
         f'--min_seconds={args.min_seconds}']
  load, started = os.getloadavg()[0], time.time()
  try:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
  except subprocess.TimeoutExpired:
    result = {'error': f'over {timeout}s'}
  else:
    result = (json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else
              {'error': (done.stderr.strip().splitlines() or ['?'])[-1][:300]})
  result.update(load_1min_at_start=load, wall_s=time.time() - started)
  return result


# ---------------------------------------------------------------------------- sections


def memory_section(args, tmp):
  """Per model: the probes, the largest cohort per strategy and the largest num_clients per
  state algorithm for each budget, and one validated point."""
  rows, floor = [], baseline_rss_gb()
  budgets = [float(b) for b in args.budget_gb.split(',')]
  for model in args.models.split(','):
    n_train, n_test, shape = DATA[dataset_for(model, args.quick)]
    npz = synthetic_npz(os.path.join(tmp, f'{model}.npz'), n_train, n_test, shape)
    base = dict(dataset=f'npz:{npz}', model=model, local_steps=H, batch_size=B,
                partition='iid', conv_impl=args.conv_impl, progress=False)
    row = dict(model=model, train_examples=n_train, input_shape=list(shape), cohort={},
               clients={}, probes=[], validation=None)

    def need_fn(kind, **fixed):
      def need(n):
        flags = dict(base, **fixed, **({'num_clients': n, 'clients_per_round': n}
                                        if kind.startswith('cohort') else
                                        {'num_clients': n}))
        result = probe(flags)
        row['probes'].append(dict(kind=kind, n=n, **{
            k: result[k] for k in ('chunk', 'strategy', 'conv_impl', 'compile_s')},
            xla_gb=result['xla_bytes'] / 1e9, preflight_gb=result['preflight_bytes'] / 1e9,
            client_state_gb=result['client_state_bytes'] / 1e9))
        print(json.dumps(dict(model=model, **row['probes'][-1])), flush=True)
        return result['need_bytes']
      return need

    searches = [('cohort-' + s, dict(algo='fedavg', client_parallelism=s), 1,
                 row['cohort'].setdefault(s, {})) for s in STRATEGIES]
    searches += [('clients-' + a, dict(algo=a, clients_per_round=args.state_cohort),
                  args.state_cohort, row['clients'].setdefault(a, {}))
                 for a in args.state_algos.split(',') if a]
    for kind, fixed, lo, out in searches:
      out.update(search(need_fn(kind, **fixed), lo, n_train, budgets, args,
                        lambda kind=kind: [p for p in row['probes'] if p['kind'] == kind],
                        validate_too=kind == 'cohort-vmap'))
    row['validation'] = validate(row, base, args, tmp)
    if row['validation'] and 'peak_rss_gb' in row['validation']:
      row['validation']['peak_above_baseline_gb'] = row['validation']['peak_rss_gb'] - floor
    rows.append(row)
    print(json.dumps({k: row[k] for k in ('model', 'cohort', 'clients', 'validation')}),
          flush=True)
  return dict(budgets_gb=budgets, tol=args.tol, validate_gb=args.validate_gb,
              state_cohort=args.state_cohort, H=H, B=B, baseline_rss_gb=floor,
              models=rows)


def search(need, lo, cap, budgets, args, probes, validate_too):  # pylint: disable=too-many-arguments
  """One quantity's limits: {BUDGET: largest_fitting(...), ['validate:GB': ...],
  'bytes_by_n': {n: bytes}}, each limit naming which of the run's two checks refuses the
  next size. probes: () -> the probes need() has recorded (read after the search)."""
  known, out = {}, {}
  known[min(max(lo, 10), cap)] = need(min(max(lo, 10), cap))  # K = N = 10: the line's base
  for budget in sorted(budgets):
    out[f'{budget:g}'] = largest_fitting(need, lo, cap, budget * 1e9, args.tol, known)
  if validate_too:
    out[f'validate:{args.validate_gb:g}'] = largest_fitting(
        need, lo, cap, args.validate_gb * 1e9, args.tol, known)
  for found in out.values():
    if found['smallest_over']:
      over = next(p for p in probes() if p['n'] == found['smallest_over'])
      found['binding'] = ('preflight (data, state and client tables from shapes)'
                          if over['preflight_gb'] > over['xla_gb'] else
                          'XLA\'s estimate for one segment')
  out['bytes_by_n'] = {str(n): b for n, b in sorted(known.items())}
  return out


def baseline_rss_gb():
  """Peak RSS of a process that only imports JAX and the package and starts the backend:
  what a validated run's peak holds besides its data, state and program."""
  done = subprocess.run([sys.executable, '-c', CHILD_BASELINE.format(
      bench_dir=os.path.join(ROOT, 'benchmarks'))], capture_output=True, text=True, check=True)
  return float(done.stdout.split()[-1])


def validate(row, base, args, tmp):
  """Runs the model's largest vmapped cohort under --validate_gb for one round
  (experiments/run.py, its own process): peak RSS beside the estimates."""
  point = row['cohort']['vmap'][f'validate:{args.validate_gb:g}']['largest_fit']
  if not point or args.no_validate:
    return None
  probed = next(p for p in row['probes'] if p['kind'] == 'cohort-vmap' and p['n'] == point)
  out = os.path.join(tmp, f'validate-{row["model"]}')
  flags = dict(base, algo='fedavg', num_clients=point, clients_per_round=point,
               client_parallelism='vmap', rounds=1, eval_every=1, out=out)
  load, start = os.getloadavg()[0], time.perf_counter()
  done = subprocess.run(
      [sys.executable, '-c', CHILD_RUN.format(bench_dir=os.path.join(ROOT, 'benchmarks'),
                                              run=os.path.join(ROOT, 'experiments', 'run.py'))]
      + [f'--{k}={v}' for k, v in flags.items()], stdout=subprocess.DEVNULL,
      stderr=subprocess.PIPE, text=True, timeout=args.timeout)
  if done.returncode:
    return dict(clients_per_round=point, error=(done.stderr.strip().splitlines() or ['?'])[-1])
  with open(os.path.join(out, 'summary.json')) as f:
    summary = json.load(f)
  peak = float(done.stderr.rsplit('PEAK_RSS_GB=', 1)[1].split()[0])
  xla = summary['memory_estimate_bytes'] / 1e9
  return dict(clients_per_round=point, num_clients=point, strategy=summary['strategy'],
              cohort_chunk=summary['cohort_chunk'], run_xla_estimate_gb=xla,
              probe_xla_gb=probed['xla_gb'], probe_preflight_gb=probed['preflight_gb'],
              peak_rss_gb=peak, rss_over_estimate=peak / xla if xla else None,
              compile_s=summary['compile_s'], train_s=summary['train_time_s'],
              wall_s=time.perf_counter() - start, load_1min_at_start=load)


def rounds_section(args, tmp):
  """Seconds per round against K, interleaved over repetitions, with the line through them."""
  n_train, n_test, shape = DATA[dataset_for(args.model, args.quick)]
  npz = synthetic_npz(os.path.join(tmp, 'rounds.npz'), n_train, n_test, shape)
  ks = [int(k) for k in args.ks.split(',')]
  runs = []
  for rep in range(args.reps):
    for k in ks:  # K1 K2 K3, K1 K2 K3, ...: drift hits every K alike
      flags = dict(dataset=f'npz:{npz}', model=args.model, algo='fedavg', num_clients=k,
                   clients_per_round=k, local_steps=H, batch_size=B, partition='iid',
                   conv_impl=args.conv_impl, client_parallelism=args.client_parallelism,
                   progress=False)
      runs.append(dict(k=k, rep=rep, **spawn('rounds', flags, args, args.timeout)))
      print(json.dumps({x: runs[-1].get(x) for x in ('k', 'rep', 'seconds_per_round',
                                                      'compile_s', 'error')}), flush=True)
  ok = [r for r in runs if 'seconds_per_round' in r]
  per_k = []
  for k in ks:
    mine = [r['seconds_per_round'] for r in ok if r['k'] == k]
    if mine:
      per_k.append(dict(k=k, seconds_per_round=spread(mine),
                        seconds_per_round_per_client=spread([s / k for s in mine])))
  fit = linear_fit([r['k'] for r in ok], [r['seconds_per_round'] for r in ok]) if len(
      {r['k'] for r in ok}) > 1 else None
  resolved = sorted({(r['conv_impl'], r['strategy'], r['chunk']) for r in ok})
  return dict(model=args.model, H=H, B=B, train_examples=n_train, input_shape=list(shape),
              conv_impl_flag=args.conv_impl, client_parallelism_flag=args.client_parallelism,
              resolved=[dict(conv_impl=c, strategy=s, chunk=n) for c, s, n in resolved],
              reps=args.reps, rounds=args.rounds, min_seconds=args.min_seconds, runs=runs,
              per_k=per_k, fit=fit)


def compile_section(args, _):
  """Compile seconds of the default run's segment against its length (--eval_every)."""
  lengths = [int(n) for n in args.lengths.split(',')]
  runs = []
  for rep in range(args.reps):
    for length in lengths:
      flags = dict(model=args.model, conv_impl=args.conv_impl, eval_every=length,
                   rounds=max(length, 100), progress=False)
      if args.quick:
        flags.update(num_clients=4, clients_per_round=2, local_steps=2)
      runs.append(dict(eval_every=length, rep=rep, **spawn('compile', flags, args,
                                                            args.timeout)))
      print(json.dumps({x: runs[-1].get(x) for x in ('eval_every', 'rep', 'lower_s',
                                                      'compile_s', 'error')}), flush=True)
  ok = [r for r in runs if 'compile_s' in r]
  per_length = [dict(eval_every=n, **{key: spread([r[key] for r in ok if r['eval_every'] == n])
                                      for key in ('lower_s', 'compile_s', 'total_s')})
                for n in lengths if any(r['eval_every'] == n for r in ok)]
  fit = linear_fit([r['eval_every'] for r in ok], [r['compile_s'] for r in ok]) if len(
      {r['eval_every'] for r in ok}) > 1 else None
  return dict(model=args.model, flag='eval_every', conv_impl_flag=args.conv_impl,
              reps=args.reps, runs=runs, per_length=per_length, fit=fit)


# ---------------------------------------------------------------------------- reports


def _range(s, spec):
  """'median [min–max]' of a spread() dict."""
  return (f'{s["median"]:{spec}}' if s['n'] == 1 else
          f'{s["median"]:{spec}} [{s["min"]:{spec}}–{s["max"]:{spec}}]')


def _limit(found):
  """A search result as docs/scale.md states it."""
  if found['largest_fit'] is None:
    return f'none (K or N = {found["smallest_over"]:,} is over)'
  if found['capped']:
    return f'>= {found["largest_fit"]:,} (every example its own client)'
  return f'{found["largest_fit"]:,} (< {found["smallest_over"]:,})'


def markdown(section, result):
  """The section's table in docs/scale.md from its result."""
  if section == 'memory':
    budgets = [f'{b:g}' for b in result['budgets_gb']]
    algos = sorted({a for row in result['models'] for a in row['clients']})
    head = ['model'] + [f'largest K, {s}, {b} GB' for b in budgets for s in STRATEGIES] + [
        f'largest N, {a}, K={result["state_cohort"]}, {b} GB' for b in budgets for a in algos
    ] + ['checked: K vmapped', 'XLA estimate GB', 'peak RSS GB']
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    for row in result['models']:
      check = row['validation'] or {}
      cells = [row['model']] + [_limit(row['cohort'][s][b]) for b in budgets
                                for s in STRATEGIES]
      cells += [_limit(row['clients'][a][b]) for b in budgets for a in algos]
      cells += ([f'{check["clients_per_round"]:,}', f'{check["run_xla_estimate_gb"]:.2f}',
                 f'{check["peak_rss_gb"]:.2f}'] if 'peak_rss_gb' in check else ['–'] * 3)
      lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines + [f'(peak RSS of a process that only imports JAX and the '
                               f'package: {result["baseline_rss_gb"]:.2f} GB)'])
  if section == 'rounds':
    lines = ['| K | s/round, median [min–max] | s/round/K |', '|---|---|---|']
    lines += [f'| {p["k"]} | {_range(p["seconds_per_round"], ".3f")} | '
              f'{p["seconds_per_round_per_client"]["median"]:.4f} |' for p in result['per_k']]
    fit = result['fit']
    if fit:
      lines.append(f'line: s = {fit["intercept_s"]:.3f} + {fit["slope_s"]:.4f} K, '
                   f'R^2 = {fit["r2"]:.4f}')
    return '\n'.join(lines)
  lines = ['| --eval_every | lower s | compile s |', '|---|---|---|']
  lines += [f'| {p["eval_every"]} | {_range(p["lower_s"], ".2f")} | '
            f'{_range(p["compile_s"], ".2f")} |' for p in result['per_length']]
  fit = result['fit']
  if fit:
    lines.append(f'line: compile s = {fit["intercept_s"]:.2f} + {fit["slope_s"]:.4f} '
                 f'x rounds per segment, R^2 = {fit["r2"]:.3f}')
  return '\n'.join(lines)


# ------------------------------------------------------------------------------- main


# memory: the validated budget is the smaller budget, so its search reuses that budget's probes
# (each probe is a compilation) and the validated round is the smaller cohort.
QUICK = dict(memory=dict(models='logreg', budget_gb='0.02,0.05', validate_gb=0.02, tol=0.25),
             rounds=dict(model='logreg', ks='2,4', reps=2, rounds=2, min_seconds=0.0),
             compile=dict(model='logreg', lengths='1,4', reps=1))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('section', choices=('memory', 'rounds', 'compile'))
  parser.add_argument('--quick', action='store_true',
                      help='tiny sizes (over the size flags): a smoke test')
  parser.add_argument('--out', default='', help='result JSON (default: benchmarks/results/'
                      'scale-SECTION-DATE-TIME.json)')
  parser.add_argument('--conv_impl', default='auto', choices=('auto', 'im2col', 'lax', 'onednn'),
                      help="the run's --conv_impl; recorded with what it resolved to")
  parser.add_argument('--timeout', type=int, default=3600, help='seconds per process')
  memory = parser.add_argument_group('memory')
  memory.add_argument('--models', default=MODELS, help='comma list of --model names')
  memory.add_argument('--budget_gb', default='24', help='comma list of budgets in GB (1e9 B)')
  memory.add_argument('--tol', type=float, default=0.02,
                      help='bracket each answer to this relative width')
  memory.add_argument('--state_algos', default='scaffold',
                      help='comma list: algorithms whose per-client table bounds N')
  memory.add_argument('--state_cohort', type=int, default=10, help='K in the N search')
  memory.add_argument('--validate_gb', type=float, default=4.0,
                      help='run the largest vmapped cohort under this estimate for one round')
  memory.add_argument('--no_validate', action='store_true', help='compile-only probes')
  timing = parser.add_argument_group('rounds and compile')
  timing.add_argument('--model', default='cnn_mnist')
  timing.add_argument('--ks', default='10,100,500', help='rounds: cohort sizes K')
  timing.add_argument('--client_parallelism', default='auto',
                      choices=('auto', 'vmap', 'sequential'), help="rounds: the run's flag")
  timing.add_argument('--lengths', default='1,10,100', help='compile: rounds per segment')
  timing.add_argument('--reps', type=int, default=3)
  timing.add_argument('--rounds', type=int, default=3, help='rounds: timed rounds per process')
  timing.add_argument('--min_seconds', type=float, default=3.0,
                      help='rounds: timed seconds per process, at least')
  parser.add_argument('--child', default='', help=argparse.SUPPRESS)
  parser.add_argument('--child_flags', default='', help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.child:
    return child(args)
  for flag, kind in (('budget_gb', float), ('ks', int), ('lengths', int)):
    try:
      values = [kind(v) for v in getattr(args, flag).split(',')]
    except ValueError:
      parser.error(f'--{flag}={getattr(args, flag)}: a comma list of positive numbers')
    if min(values) <= 0:
      parser.error(f'--{flag}={getattr(args, flag)}: a comma list of positive numbers')
  if args.quick:  # over any size flag given: a docs command plus --quick stays tiny
    for key, value in QUICK[args.section].items():
      setattr(args, key, value)
  record = dict(section=args.section, quick=args.quick, host=bench.host_info(),
                load_1min_at_start=os.getloadavg()[0])
  import jax  # pylint: disable=g-import-not-at-top
  record['host'].update(H=H, B=B, git_dirty=_dirty(), backend=jax.default_backend(),
                        memory_total_gb=_total_memory_gb())
  from fedjax_drift.errors import UserError  # pylint: disable=g-import-not-at-top
  with tempfile.TemporaryDirectory() as tmp:
    try:
      record['result'] = {'memory': memory_section, 'rounds': rounds_section,
                          'compile': compile_section}[args.section](args, tmp)
    except UserError as e:  # a bad --models name, say: the run's own one line
      sys.exit(f'error: {e}')
  out = args.out or os.path.join(ROOT, 'benchmarks', 'results', 'scale-{}-{}.json'.format(
      args.section, datetime.datetime.now().strftime('%Y-%m-%d-%H%M%S')))
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  with open(out, 'w') as f:
    json.dump(record, f, indent=1)
  print('\n' + markdown(args.section, record['result']) + f'\n\nraw results: {out}')


def _total_memory_gb():
  """The host's RAM (MemTotal), or None where /proc/meminfo is absent."""
  try:
    with open('/proc/meminfo') as f:
      return next(int(l.split()[1]) / 1e6 for l in f if l.startswith('MemTotal:'))
  except (OSError, StopIteration):
    return None


def _dirty():
  """Whether the package or this script differ from the commit recorded."""
  try:
    return bool(subprocess.run(['git', 'status', '--porcelain', '--', 'fedjax_drift',
                                'benchmarks/scale.py'], capture_output=True, text=True,
                               cwd=ROOT).stdout.strip())
  except OSError:
    return None


if __name__ == '__main__':
  main()

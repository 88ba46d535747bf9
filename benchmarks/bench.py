"""Speed and memory of one FedAvg round, interleaved, on the same data, model and cohort.

    python benchmarks/bench.py                 # all workloads, 3 repetitions (~1.5 h on 2 cores)
    python benchmarks/bench.py --quick         # smoke test: two tiny workloads, one round each
    python benchmarks/bench.py --workloads=cnn_mnist_k10 --impls=engine-seq,torch-loop --reps=5
    python benchmarks/bench.py --workloads=cnn_mnist_k10,cnn_mnist_k100,cnn_cifar_k20 \
        --impls=engine-seq,torch-loop --conv_impls=im2col,onednn --reps=5

How it measures. A machine shared with other work drifts by tens of percent between runs, so a
ratio from two back-to-back runs cannot be trusted. For each workload the implementations run
interleaved, A B C A B C ..., each repetition of each implementation in its own subprocess
(fresh process: its own peak RSS, no warm caches from the others). A process compiles, runs
one warm-up round, then times rounds (median of >= --rounds rounds and >= --min_seconds).
Ratios are paired: rep i of an implementation is divided by rep i of torch (run minutes
apart, under the same conditions), and the report gives the median of those ratios and their
min-max (and the quartiles in the JSON). Every process's raw numbers, the load average when
it started and the host's description go to a JSON file in benchmarks/results/.

Implementations:
  engine-seq     this engine, clients one after another inside one jit (lax.scan)
  engine-vmap    this engine, the cohort vmapped
  engine-chunkN  this engine, chunks of N clients vmapped, chunks sequential
  jit-loop       a Python loop over clients calling one jitted local-training function
                 (FedJAX's jit-backend style), then a jitted weighted mean
  torch-loop     a per-client PyTorch loop (torch is a benchmark extra: pip install '.[bench]')
With --conv_impls=A,B each JAX implementation runs once per convolution implementation, named
IMPL+CONV (engine-seq+im2col, engine-seq+onednn), interleaved with the rest; each IMPL+CONV row
also gets its paired ratio against IMPL+im2col (`vs_im2col`). A process asked for onednn that
cannot run it fails rather than timing im2col under the onednn name.
Each client runs H=10 SGD steps of batch 32 on its own examples; all K clients take part. The
engine shuffles each client's examples every epoch; the jit-loop and torch loop read
contiguous, unshuffled batches.

Device-agnostic: JAX runs on its default backend (CPU, GPU or TPU), torch on CUDA when
available, else the CPU. On an accelerator, peak device memory is reported beside peak RSS.
"""
import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

H, B = 10, 32
WORKLOADS = {  # name: (model, K, input shape)
    'logreg_k100': ('logreg', 100, (784,)),
    'logreg_k500': ('logreg', 500, (784,)),
    'mlp_k100': ('mlp', 100, (784,)),
    'mlp_k500': ('mlp', 500, (784,)),
    'cnn_mnist_k10': ('cnn_mnist', 10, (28, 28, 1)),
    'cnn_mnist_k100': ('cnn_mnist', 100, (28, 28, 1)),
    'cnn_cifar_k20': ('cnn_cifar', 20, (32, 32, 3)),
    # Bounded memory: the engine only (a torch or jit-loop round here takes minutes).
    'cnn_mnist_k500': ('cnn_mnist', 500, (28, 28, 1)),
    # Tiny, for --quick and the tests.
    'logreg_k4': ('logreg', 4, (784,)),
    'cnn_mnist_k2': ('cnn_mnist', 2, (28, 28, 1)),
}
ENGINE_ONLY = ('cnn_mnist_k500',)
QUICK = ('logreg_k4', 'cnn_mnist_k2')
DEFAULT = tuple(n for n in WORKLOADS if n not in QUICK)
BASELINES = ('torch-loop', 'jit-loop')  # ratios are reported against these


def forward_flops(model):
  """Analytic multiply-add FLOPs (2 per MAC) of one example's forward pass."""
  dense = lambda i, o: 2 * i * o
  conv = lambda k, cin, cout, h, w: 2 * k * k * cin * cout * h * w
  if model == 'logreg':
    return dense(784, 10)
  if model == 'mlp':
    return dense(784, 200) + dense(200, 200) + dense(200, 10)
  if model == 'cnn_mnist':
    return (conv(5, 1, 32, 28, 28) + conv(5, 32, 64, 14, 14) + dense(3136, 512)
            + dense(512, 10))
  if model == 'cnn_cifar':
    return (conv(3, 3, 32, 32, 32) + conv(3, 32, 32, 32, 32) + conv(3, 32, 64, 16, 16)
            + conv(3, 64, 64, 16, 16) + dense(4096, 512) + dense(512, 256) + dense(256, 128)
            + dense(128, 10))
  raise ValueError(model)


def train_flops(model):
  return 3 * forward_flops(model)  # forward + input gradient + weight gradient


def make_data(k, shape, seed=0):
  rng = np.random.default_rng(seed)
  n = k * H * B
  x = rng.integers(0, 256, (n,) + shape, dtype=np.uint8)
  y = rng.integers(0, 10, n).astype(np.int32)
  parts = [np.arange(i * H * B, (i + 1) * H * B) for i in range(k)]
  return x, y, parts


def peak_rss_gb():
  """This process's peak resident memory: VmHWM (reset by exec, unlike ru_maxrss, which a
  child inherits from the process that forked it), else ru_maxrss."""
  try:
    with open('/proc/self/status') as f:
      for line in f:
        if line.startswith('VmHWM:'):
          return int(line.split()[1]) / 1e6  # kB
  except OSError:
    pass
  scale = 1e9 if sys.platform == 'darwin' else 1e6  # bytes on macOS, kB on Linux
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale


# ------------------------------------------------------------------------- implementations


def timed_rounds(one_round, rounds, block, min_seconds):
  """Seconds of each timed round: at least `rounds` rounds and `min_seconds` of work."""
  times = []
  while len(times) < rounds or sum(times) < min_seconds:
    t0 = time.perf_counter()
    block(one_round())
    times.append(time.perf_counter() - t0)
  return times


def jax_device_peak_gb():
  import jax
  try:
    stats = jax.devices()[0].memory_stats() or {}
  except Exception:  # pylint: disable=broad-except
    stats = {}
  peak = stats.get('peak_bytes_in_use')
  return peak / 1e9 if peak else None


def _model(models, model_name, shape, conv_impl):
  """models.get(...), refusing a silent fallback (onednn unavailable) that would mislabel rows."""
  model = models.get(model_name, 10, shape, conv_impl=conv_impl)
  if conv_impl not in ('auto', model.conv_impl):
    raise SystemExit(f'--conv_impl={conv_impl} cannot run here (the model got '
                     f'{model.conv_impl}); see the line above')
  return model


def run_engine(model_name, k, shape, chunk, args):
  import jax
  from fedjax_drift import algorithms, config, engine, models
  from fedjax_drift.preflight import estimated_memory
  from fedjax_drift.data import federated
  x, y, parts = make_data(k, shape)
  model = _model(models, model_name, shape, args.conv_impl)
  cfg = config.Config(lr=0.05, clients_per_round=k, num_clients=k)
  algo = algorithms.get('fedavg', cfg, model)
  data = federated.build(x, y, parts, 10)
  state = engine.init_state(algo, model.init(jax.random.key(0)), k, jax.random.key(1))
  schedule = engine.Schedule(B, H, 0)
  # Compiled as a run compiles its segments (simulation._compile): with the engine's options.
  round_fn = jax.jit(engine.make_round(algo, schedule, H, k, 'examples', chunk),
                     donate_argnums=0,
                     compiler_options=engine.compiler_options(model.family == 'conv') or None)
  t0 = time.perf_counter()
  compiled = round_fn.lower(state, data).compile()
  compile_s = time.perf_counter() - t0
  xla_gb = estimated_memory(compiled) / 1e9
  state, _ = compiled(state, data)  # warm-up round
  jax.block_until_ready(state.params)
  box = [state]

  def one_round():
    box[0] = compiled(box[0], data)[0]
    return box[0].params
  times = timed_rounds(one_round, args.rounds, jax.block_until_ready, args.min_seconds)
  return dict(round_s=times, compile_s=compile_s, xla_estimate_gb=xla_gb,
              conv_impl=model.conv_impl, device_peak_gb=jax_device_peak_gb())


def run_jit_loop(model_name, k, shape, args):
  """FedJAX-style: a Python loop over clients, each a call of one jitted local training."""
  import jax
  import jax.numpy as jnp
  import optax
  from fedjax_drift import models
  from fedjax_drift.algorithms import local
  x, y, _ = make_data(k, shape)
  model = _model(models, model_name, shape, args.conv_impl)
  opt = optax.sgd(0.05)

  @jax.jit
  def client_update(params, xc, yc):
    def step(p, batch):
      xb, yb = batch
      g = jax.grad(lambda q: jnp.mean(local.cross_entropy(
          model.apply(q, xb.astype(jnp.float32) / 255.0), yb)))(p)
      updates, _ = opt.update(g, opt.init(p), p)
      return optax.apply_updates(p, updates), None
    final, _ = jax.lax.scan(step, params, (xc.reshape((H, B) + shape), yc.reshape(H, B)))
    return jax.tree.map(jnp.subtract, params, final)

  @jax.jit
  def server(params, total):
    return jax.tree.map(lambda p, t: p - t / k, params, total)

  add = jax.jit(lambda a, b: jax.tree.map(jnp.add, a, b))
  xs = [jnp.asarray(x[i * H * B:(i + 1) * H * B]) for i in range(k)]
  ys = [jnp.asarray(y[i * H * B:(i + 1) * H * B]) for i in range(k)]
  params = model.init(jax.random.key(0))

  def one_round(params):
    total = None
    for i in range(k):
      d = client_update(params, xs[i], ys[i])
      total = d if total is None else add(total, d)
    return server(params, total)

  t0 = time.perf_counter()
  params = one_round(params)  # compiles, and is the warm-up round
  jax.block_until_ready(params)
  compile_s = time.perf_counter() - t0
  box = [params]

  def step():
    box[0] = one_round(box[0])
    return box[0]
  times = timed_rounds(step, args.rounds, jax.block_until_ready, args.min_seconds)
  return dict(round_s=times, compile_s=compile_s, conv_impl=model.conv_impl,
              device_peak_gb=jax_device_peak_gb())


def torch_model(model_name):
  from torch import nn
  if model_name == 'logreg':
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
  if model_name == 'mlp':
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 200), nn.ReLU(), nn.Linear(200, 200),
                         nn.ReLU(), nn.Linear(200, 10))
  if model_name == 'cnn_mnist':
    return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, 10))
  if model_name == 'cnn_cifar':
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(4096, 512), nn.ReLU(), nn.Linear(512, 256),
                         nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
  raise ValueError(model_name)


def run_torch(model_name, k, shape, args):
  import torch
  device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
  if device.type == 'cpu':
    torch.set_num_threads(os.cpu_count())
    sync = lambda: None
  else:
    sync = torch.cuda.synchronize
  x, y, _ = make_data(k, shape)
  xt = torch.from_numpy(x).float().div_(255.0)
  if len(shape) == 3:
    xt = xt.permute(0, 3, 1, 2).contiguous()
  xt = xt.to(device)
  yt = torch.from_numpy(y).long().to(device)
  global_model = torch_model(model_name).to(device)
  local_model = torch_model(model_name).to(device)
  loss_fn = torch.nn.CrossEntropyLoss()

  def one_round():
    g_state = {n: p.detach().clone() for n, p in global_model.state_dict().items()}
    total = {n: torch.zeros_like(p) for n, p in g_state.items()}
    for i in range(k):
      local_model.load_state_dict(g_state)
      opt = torch.optim.SGD(local_model.parameters(), lr=0.05)
      for s in range(H):
        lo = (i * H + s) * B
        opt.zero_grad(set_to_none=True)
        loss_fn(local_model(xt[lo:lo + B]), yt[lo:lo + B]).backward()
        opt.step()
      with torch.no_grad():
        for n, p in local_model.state_dict().items():
          total[n] += p
    global_model.load_state_dict({n: t / k for n, t in total.items()})

  t0 = time.perf_counter()
  one_round()  # the warm-up round
  sync()
  warm = time.perf_counter() - t0
  times = timed_rounds(one_round, args.rounds, lambda _: sync(), args.min_seconds)
  device_peak = (torch.cuda.max_memory_allocated() / 1e9 if device.type == 'cuda' else None)
  return dict(round_s=times, compile_s=warm, torch_device=str(device),
              torch_threads=torch.get_num_threads(), device_peak_gb=device_peak)


def matmul_peak():
  """Best of 5 float32 2048^3 matmuls on JAX's default device, and what that device is."""
  import jax
  import jax.numpy as jnp
  n = 2048
  a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
  f = jax.jit(lambda a: a @ a)
  jax.block_until_ready(f(a))
  best = 0.0
  for _ in range(5):
    t0 = time.perf_counter()
    jax.block_until_ready(f(a))
    best = max(best, 2 * n ** 3 / (time.perf_counter() - t0) / 1e9)
  device = jax.devices()[0]
  return dict(peak_gflops=best, backend=jax.default_backend(), device_kind=device.device_kind,
              device_count=jax.device_count())


# ------------------------------------------------------------------------------- child


def child(args):
  if args.impl == 'peak':
    result = matmul_peak()
  else:
    model, k, shape = WORKLOADS[args.workload]
    impl, _, conv = args.impl.partition('+')
    args.conv_impl = conv or args.conv_impl
    if impl.startswith('engine-'):
      mode = impl[len('engine-'):]
      chunk = {'seq': 1, 'vmap': k}.get(mode) or int(mode[len('chunk'):])
      result = run_engine(model, k, shape, chunk, args)
    elif impl == 'jit-loop':
      result = run_jit_loop(model, k, shape, args)
    elif impl == 'torch-loop':
      result = run_torch(model, k, shape, args)
    else:
      raise ValueError(args.impl)
    result['seconds_per_round'] = float(np.median(result['round_s']))
    result['sample_grads_per_s'] = k * H * B / result['seconds_per_round']
  result['peak_rss_gb'] = peak_rss_gb()
  print(json.dumps(result))


# ------------------------------------------------------------------------------ parent


def implementations(name, model, k, backend='cpu'):
  if name in ENGINE_ONLY:
    return ['engine-seq']
  impls = ['engine-seq']
  # 100 vmapped CNN clients need ~12 GB of host memory; an accelerator runs them vmapped.
  if backend != 'cpu' or not (model.startswith('cnn') and k >= 100):
    impls.append('engine-vmap')
  if k >= 20:
    impls.append('engine-chunk5' if model.startswith('cnn') else 'engine-chunk50')
  return impls + ['jit-loop', 'torch-loop']


def with_conv_impls(impls, conv_impls):
  """Each JAX implementation once per convolution implementation in the comma list
  `conv_impls` (IMPL+CONV), in order; torch as it is; `impls` unchanged when it is empty."""
  if not conv_impls:
    return impls
  convs = conv_impls.split(',')
  return [f'{i}+{c}' if i != 'torch-loop' else i for i in impls
          for c in (convs if i != 'torch-loop' else [None])]


def spawn(workload, impl, args):
  cmd = [sys.executable, os.path.abspath(__file__), '--child', f'--workload={workload}',
         f'--impl={impl}', f'--rounds={args.rounds}', f'--min_seconds={args.min_seconds}',
         f'--conv_impl={args.conv_impl}']
  started = time.time()
  load = os.getloadavg()[0] if hasattr(os, 'getloadavg') else None
  try:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
  except subprocess.TimeoutExpired:
    result = {'error': f'over {args.timeout}s'}
  else:
    if out.returncode != 0:
      tail = (out.stderr.strip().splitlines() or ['?'])[-1]
      result = {'error': tail[:300]}
    else:
      result = json.loads(out.stdout.strip().splitlines()[-1])
  result.update(workload=workload, implementation=impl, started=started,
                wall_s=time.time() - started, load_1min_at_start=load)
  return result


def _stats(values):
  """median, min, max and quartiles of the finite values (None when there are none)."""
  v = np.asarray([x for x in values if x is not None and np.isfinite(x)], float)
  if not v.size:
    return None
  q1, med, q3 = np.percentile(v, [25, 50, 75])
  return dict(median=float(med), min=float(v.min()), max=float(v.max()), q1=float(q1),
              q3=float(q3), n=int(v.size))


def summarise(runs, peaks):
  """One row per (workload, implementation) from the raw per-process runs.

  Ratios are paired by repetition: rep i of an implementation over rep i of the baseline."""
  peak = _stats([p.get('peak_gflops') for p in peaks])
  rows = []
  by_key = {}
  for r in runs:
    by_key.setdefault((r['workload'], r['implementation']), {})[r['rep']] = r
  for (workload, impl), reps in by_key.items():
    model = WORKLOADS[workload][0]
    ok = {i: r for i, r in reps.items() if 'sample_grads_per_s' in r}
    row = dict(workload=workload, implementation=impl, reps=len(reps), ok=len(ok),
               errors=sorted({r['error'] for r in reps.values() if 'error' in r}))
    rate = _stats([r['sample_grads_per_s'] for r in ok.values()])
    row['sample_grads_per_s'] = rate
    if rate:
      gflops = rate['median'] * train_flops(model) / 1e9
      row['gflops'] = gflops
      row['fraction_of_peak'] = gflops / peak['median'] if peak else None
    for field in ('peak_rss_gb', 'xla_estimate_gb', 'compile_s', 'device_peak_gb'):
      row[field] = _stats([r.get(field) for r in ok.values()])
    for base in BASELINES:
      other = {i: r for i, r in by_key.get((workload, base), {}).items()
               if 'sample_grads_per_s' in r}
      paired = [i for i in ok if i in other]
      key = 'vs_' + base.replace('-', '_')
      row[key] = _stats([ok[i]['sample_grads_per_s'] / other[i]['sample_grads_per_s']
                         for i in paired])
      row['rss_' + key] = _stats([ok[i]['peak_rss_gb'] / other[i]['peak_rss_gb']
                                  for i in paired])
    if '+' in impl:  # IMPL+CONV against IMPL+im2col, paired the same way
      other = {i: r for i, r in by_key.get((workload, impl.split('+')[0] + '+im2col'),
                                           {}).items() if 'sample_grads_per_s' in r}
      paired = [i for i in ok if i in other]
      row['vs_im2col'] = _stats([ok[i]['sample_grads_per_s'] / other[i]['sample_grads_per_s']
                                 for i in paired])
    rows.append(row)
  return rows


def _fmt(s, spec, suffix=''):
  if not s:
    return '–'
  if s['n'] == 1:
    return f'{s["median"]:{spec}}{suffix}'
  return f'{s["median"]:{spec}}{suffix} [{s["min"]:{spec}}–{s["max"]:{spec}}]'


def print_row(row):
  if not row['sample_grads_per_s']:
    print(f'{row["workload"]:15} {row["implementation"]:14} failed: {"; ".join(row["errors"])}')
    return
  frac = row.get('fraction_of_peak')
  print(f'{row["workload"]:15} {row["implementation"]:14} '
        f'{_fmt(row["sample_grads_per_s"], ",.0f"):>27} {row["gflops"]:7.1f} '
        f'{100 * frac if frac else float("nan"):6.1f}% '
        f'{_fmt(row["peak_rss_gb"], ".2f"):>17} '
        f'{_fmt(row["xla_estimate_gb"], ".2f"):>17} {_fmt(row["compile_s"], ".1f"):>17} '
        f'{_fmt(row["vs_torch_loop"], ".2f", "x"):>20} {_fmt(row["vs_jit_loop"], ".2f", "x"):>20} '
        f'{_fmt(row["rss_vs_torch_loop"], ".2f", "x"):>20}'
        + (f'  vs im2col {_fmt(row["vs_im2col"], ".2f", "x")}' if row.get('vs_im2col') else '')
        + (f'  ({row["ok"]}/{row["reps"]} ok: {"; ".join(row["errors"])})'
           if row['ok'] < row['reps'] else ''), flush=True)


HEADER = (f'{"workload":15} {"implementation":14} {"sample-grads/s [min-max]":>27} '
          f'{"GFLOP/s":>7} {"% peak":>7} {"peak RSS GB":>17} {"XLA GB":>17} '
          f'{"compile s":>17} {"vs torch":>20} {"vs jit-loop":>20} {"RSS vs torch":>20}')


def markdown(rows):
  """docs/speed.md's table: medians, ratios with their min-max over paired repetitions."""
  lines = ['| workload | implementation | sample-grads/s | GFLOP/s | % of peak | peak RSS GB | '
           'XLA estimate GB | compile s | vs torch [min–max] | vs jit-loop [min–max] | '
           'RSS vs torch |', '|' + '---|' * 11]
  for r in rows:
    if not r['sample_grads_per_s']:
      continue
    med = lambda s, spec: f'{s["median"]:{spec}}' if s else '–'
    frac = r.get('fraction_of_peak')
    lines.append(
        f'| {r["workload"]} | {r["implementation"]} | {med(r["sample_grads_per_s"], ",.0f")} | '
        f'{r["gflops"]:.1f} | {f"{100 * frac:.1f}%" if frac else "–"} | '
        f'{med(r["peak_rss_gb"], ".2f")} | {med(r["xla_estimate_gb"], ".2f")} | '
        f'{med(r["compile_s"], ".1f")} | {_fmt(r["vs_torch_loop"], ".2f", "x")} | '
        f'{_fmt(r["vs_jit_loop"], ".2f", "x")} | {med(r["rss_vs_torch_loop"], ".2f")}x |')
  return '\n'.join(lines)


def host_info():
  import importlib.metadata as md
  versions = {}
  for pkg in ('jax', 'jaxlib', 'torch', 'numpy', 'flax', 'optax'):
    try:
      versions[pkg] = md.version(pkg)
    except md.PackageNotFoundError:
      versions[pkg] = None
  cpu = platform.processor()
  try:
    with open('/proc/cpuinfo') as f:
      cpu = next((l.split(':', 1)[1].strip() for l in f if l.startswith('model name')), cpu)
  except OSError:
    pass
  try:
    commit = subprocess.run(['git', 'rev-parse', 'HEAD'], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    dirty = bool(subprocess.run(['git', 'status', '--porcelain', '--', 'fedjax_drift',
                                 'benchmarks/bench.py'], capture_output=True, text=True,
                                cwd=ROOT).stdout.strip())
  except OSError:
    commit, dirty = None, None
  return dict(date=datetime.datetime.now().isoformat(timespec='seconds'), argv=sys.argv,
              python=platform.python_version(), platform=platform.platform(), cpu=cpu,
              cpu_count=os.cpu_count(), versions=versions, git_commit=commit,
              git_dirty=dirty, H=H, B=B)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--workloads', default='', help='comma list (default: all but the tiny '
                      f'ones); choose from {", ".join(WORKLOADS)}')
  parser.add_argument('--impls', default='', help='comma list: run only these implementations')
  parser.add_argument('--quick', action='store_true',
                      help='smoke test: tiny workloads, 2 repetitions, one timed round each')
  parser.add_argument('--reps', type=int, default=0,
                      help='repetitions of each implementation (default 3; 2 with --quick)')
  parser.add_argument('--rounds', type=int, default=2, help='timed rounds per process, at least')
  parser.add_argument('--min_seconds', type=float, default=-1,
                      help='timed seconds per process, at least (default 3; 0 with --quick)')
  parser.add_argument('--conv_impl', default='auto',
                      help='auto, im2col, lax or onednn (JAX models)')
  parser.add_argument('--conv_impls', default='',
                      help='comma list, e.g. im2col,onednn: run each JAX implementation once '
                      'per convolution implementation, interleaved (named IMPL+CONV)')
  parser.add_argument('--timeout', type=int, default=1800, help='seconds per process')
  parser.add_argument('--out', default='', help='raw JSON (default: benchmarks/results/'
                      'DATE-TIME-BACKEND.json)')
  parser.add_argument('--child', action='store_true', help=argparse.SUPPRESS)
  parser.add_argument('--workload', help=argparse.SUPPRESS)
  parser.add_argument('--impl', help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.min_seconds < 0:
    args.min_seconds = 0.0 if args.quick else 3.0
  if args.child:
    return child(args)
  reps = args.reps or (2 if args.quick else 3)
  names = (args.workloads.split(',') if args.workloads else QUICK if args.quick else DEFAULT)
  unknown = [n for n in names if n not in WORKLOADS]
  if unknown:
    sys.exit(f'error: --workloads: unknown {unknown}; choose from {sorted(WORKLOADS)}')
  only = set(args.impls.split(',')) if args.impls else None
  bad = [c for c in args.conv_impls.split(',') if args.conv_impls and
         c not in ('auto', 'im2col', 'lax', 'onednn')]
  if bad:
    sys.exit(f'error: --conv_impls: unknown {bad}; choose from auto, im2col, lax, onednn')

  record = dict(host=host_info(), reps=reps, rounds=args.rounds, min_seconds=args.min_seconds,
                conv_impl=args.conv_impl, conv_impls=args.conv_impls, peaks=[], runs=[],
                rows=[])
  out = args.out or os.path.join(
      ROOT, 'benchmarks', 'results',
      datetime.datetime.now().strftime('%Y-%m-%d-%H%M%S') + '.json')

  def save():
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, 'w') as f:
      json.dump(record, f, indent=1)

  first = spawn(names[0], 'peak', args)
  record['peaks'].append(first)
  backend = first.get('backend', 'cpu')
  record['host'].update(backend=backend, device_kind=first.get('device_kind'),
                        device_count=first.get('device_count'))
  print(f'{backend} ({first.get("device_kind")}); float32 matmul peak (2048^3, jax): '
        f'{first.get("peak_gflops", float("nan")):.0f} GFLOP/s; H={H}, B={B}; '
        f'{reps} interleaved repetitions; ratios: median [min-max] over paired repetitions')
  print(HEADER)
  for name in names:
    model, k, shape = WORKLOADS[name]
    impls = with_conv_impls([i for i in implementations(name, model, k, backend)
                             if not only or i in only], args.conv_impls)
    for rep in range(1 if name in ENGINE_ONLY else reps):
      if rep or name != names[0]:  # the matmul peak drifts too: one per cycle
        record['peaks'].append(spawn(name, 'peak', args))
      for impl in impls:  # A B C, A B C, ...
        result = spawn(name, impl, args)
        result['rep'] = rep
        record['runs'].append(result)
        save()
    rows = summarise([r for r in record['runs'] if r['workload'] == name], record['peaks'])
    for row in rows:
      print_row(row)
    record['rows'] += rows
    save()
  print('\n' + markdown(record['rows']))
  print(f'\nraw results: {out}')


if __name__ == '__main__':
  main()

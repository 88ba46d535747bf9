"""Speed and memory of one FedAvg round, side by side, on the same data, model and cohort.

    python benchmarks/bench.py                 # all workloads (several minutes)
    python benchmarks/bench.py --quick         # a small subset
    python benchmarks/bench.py --workloads=mlp_k100,cnn_mnist_k10

Every (workload, implementation) runs in its own subprocess, so peak RSS is per
implementation. Implementations:
  engine-seq     this engine, clients one after another inside one jit (lax.scan)
  engine-vmap    this engine, the cohort vmapped
  engine-chunkN  this engine, chunks of N clients vmapped, chunks sequential
  jit-loop       a Python loop over clients calling one jitted local-training function
                 (FedJAX's jit-backend style), then a jitted weighted mean
  torch-loop     a per-client PyTorch loop (torch is a benchmark extra: pip install '.[bench]')
Each client runs H=10 SGD steps of batch 32 on its own examples; all K clients take part.
Reported (median round time over >= 3 s of rounds): sample-gradients/s, achieved GFLOP/s from an analytic FLOP count, that as a
fraction of a float32 matmul peak measured in the same run, peak RSS and compile time.
"""
import argparse
import json
import os
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
}
ENGINE_ONLY = ('cnn_mnist_k500',)
QUICK = ('mlp_k100', 'cnn_mnist_k10')


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
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # Linux: kB


# ------------------------------------------------------------------------- implementations


def timed_rounds(one_round, rounds, block, min_seconds=3.0):
  """Median seconds per round over at least `rounds` rounds and `min_seconds` of work
  (this machine drifts by tens of percent between runs)."""
  times = []
  while len(times) < rounds or sum(times) < min_seconds:
    t0 = time.perf_counter()
    block(one_round())
    times.append(time.perf_counter() - t0)
  return float(np.median(times))


def run_engine(model_name, k, shape, chunk, rounds):
  import jax
  from fedjax_drift import algorithms, config, engine, models, simulation
  from fedjax_drift.data import federated
  x, y, parts = make_data(k, shape)
  model = models.get(model_name, 10, shape)
  cfg = config.Config(lr=0.05, clients_per_round=k, num_clients=k)
  algo = algorithms.get('fedavg', cfg, model)
  data = federated.build(x, y, parts, 10)
  state = engine.init_state(algo, model.init(jax.random.key(0)), k, jax.random.key(1))
  schedule = engine.Schedule(B, H, 0)
  round_fn = jax.jit(engine.make_round(algo, schedule, H, k, 'examples', chunk),
                     donate_argnums=0)
  t0 = time.perf_counter()
  compiled = round_fn.lower(state, data).compile()
  compile_s = time.perf_counter() - t0
  xla_gb = simulation.estimated_memory(compiled) / 1e9
  state, _ = compiled(state, data)
  jax.block_until_ready(state.params)
  box = [state]

  def one_round():
    box[0] = compiled(box[0], data)[0]
    return box[0].params
  # A K=500 CNN round takes minutes: there, one timed round is enough.
  min_seconds = 0.0 if k >= 500 else 3.0
  return (timed_rounds(one_round, rounds, jax.block_until_ready, min_seconds), compile_s,
          xla_gb)


def run_jit_loop(model_name, k, shape, rounds):
  """FedJAX-style: a Python loop over clients, each a call of one jitted local training."""
  import jax
  import jax.numpy as jnp
  import optax
  from fedjax_drift import models
  from fedjax_drift.algorithms import local
  x, y, _ = make_data(k, shape)
  model = models.get(model_name, 10, shape)
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
  params = one_round(params)
  jax.block_until_ready(params)
  compile_s = time.perf_counter() - t0
  box = [params]

  def step():
    box[0] = one_round(box[0])
    return box[0]
  return timed_rounds(step, rounds, jax.block_until_ready), compile_s


def torch_model(model_name):
  import torch
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
  del torch
  raise ValueError(model_name)


def run_torch(model_name, k, shape, rounds):
  import torch
  torch.set_num_threads(os.cpu_count())
  x, y, _ = make_data(k, shape)
  xt = torch.from_numpy(x).float().div_(255.0)
  if len(shape) == 3:
    xt = xt.permute(0, 3, 1, 2).contiguous()
  yt = torch.from_numpy(y).long()
  global_model = torch_model(model_name)
  local_model = torch_model(model_name)
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
  one_round()
  warm = time.perf_counter() - t0
  return timed_rounds(one_round, rounds, lambda _: None), warm


def matmul_peak_gflops():
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
  return best


# ------------------------------------------------------------------------------- driver


def child(args):
  model, k, shape = WORKLOADS[args.workload]
  xla_gb = float('nan')
  if args.impl.startswith('engine-'):
    mode = args.impl[len('engine-'):]
    chunk = {'seq': 1, 'vmap': k}.get(mode) or int(mode[len('chunk'):])
    sec, compile_s, xla_gb = run_engine(model, k, shape, chunk, args.rounds)
  elif args.impl == 'jit-loop':
    sec, compile_s = run_jit_loop(model, k, shape, args.rounds)
  elif args.impl == 'torch-loop':
    sec, compile_s = run_torch(model, k, shape, args.rounds)
  elif args.impl == 'peak':
    print(json.dumps({'peak_gflops': matmul_peak_gflops()}))
    return
  else:
    raise ValueError(args.impl)
  print(json.dumps({'seconds_per_round': sec, 'compile_s': compile_s,
                    'peak_rss_gb': peak_rss_gb(), 'xla_estimate_gb': xla_gb}))


def implementations(name, model, k):
  if name in ENGINE_ONLY:
    return ['engine-seq']
  impls = ['engine-seq']
  if not (model.startswith('cnn') and k >= 100):  # 100 vmapped CNN clients need ~12 GB
    impls.append('engine-vmap')
  if k >= 20:
    impls.append('engine-chunk5' if model.startswith('cnn') else 'engine-chunk50')
  return impls + ['jit-loop', 'torch-loop']


def spawn(workload, impl, rounds, timeout):
  cmd = [sys.executable, __file__, '--child', f'--workload={workload}', f'--impl={impl}',
         f'--rounds={rounds}']
  try:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
  except subprocess.TimeoutExpired:
    return {'error': f'over {timeout}s'}
  if out.returncode != 0:
    tail = (out.stderr.strip().splitlines() or ['?'])[-1]
    return {'error': tail[:120]}
  return json.loads(out.stdout.strip().splitlines()[-1])


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--workloads', default='')
  parser.add_argument('--quick', action='store_true')
  parser.add_argument('--rounds', type=int, default=2)
  parser.add_argument('--timeout', type=int, default=900)
  parser.add_argument('--out', default='')
  parser.add_argument('--child', action='store_true')
  parser.add_argument('--workload')
  parser.add_argument('--impl')
  args = parser.parse_args()
  if args.child:
    return child(args)
  names = (args.workloads.split(',') if args.workloads else QUICK if args.quick
           else tuple(WORKLOADS))
  unknown = [n for n in names if n not in WORKLOADS]
  if unknown:
    sys.exit(f'error: --workloads: unknown {unknown}; choose from {sorted(WORKLOADS)}')
  peak = spawn(names[0], 'peak', 0, 300).get('peak_gflops', float('nan'))
  print(f'float32 matmul peak (2048^3, jax, this run): {peak:.0f} GFLOP/s; H={H}, B={B}')
  header = (f'{"workload":16} {"implementation":14} {"sample-grads/s":>15} {"GFLOP/s":>8} '
            f'{"% peak":>7} {"RSS GB":>7} {"XLA GB":>7} {"compile s":>9} {"vs torch":>9} '
            f'{"vs jit-loop":>11}')
  print(header)
  rows = []
  for name in names:
    model, k, shape = WORKLOADS[name]
    rounds = 1 if name in ENGINE_ONLY else args.rounds
    results = {impl: spawn(name, impl, rounds, args.timeout)
               for impl in implementations(name, model, k)}
    rate = {impl: k * H * B / r['seconds_per_round'] for impl, r in results.items()
            if 'seconds_per_round' in r}
    for impl, r in results.items():
      if impl not in rate:
        print(f'{name:16} {impl:14} {r.get("error", "failed")}')
        continue
      gflops = rate[impl] * train_flops(model) / 1e9
      vs_torch = rate[impl] / rate['torch-loop'] if 'torch-loop' in rate else float('nan')
      vs_jit = rate[impl] / rate['jit-loop'] if 'jit-loop' in rate else float('nan')
      row = dict(workload=name, implementation=impl, sample_grads_per_s=rate[impl],
                 gflops=gflops, fraction_of_peak=gflops / peak, peak_rss_gb=r['peak_rss_gb'],
                 xla_estimate_gb=r.get('xla_estimate_gb'),
                 compile_s=r['compile_s'], vs_torch=vs_torch, vs_jit_loop=vs_jit)
      rows.append(row)
      print(f'{name:16} {impl:14} {rate[impl]:15,.0f} {gflops:8.1f} {100 * gflops / peak:6.1f}% '
            f'{r["peak_rss_gb"]:7.2f} {r.get("xla_estimate_gb", float("nan")):7.2f} '
            f'{r["compile_s"]:9.1f} {vs_torch:8.2f}x {vs_jit:10.2f}x',
            flush=True)
  if args.out:
    with open(args.out, 'w') as f:
      json.dump({'peak_gflops': peak, 'rows': rows}, f, indent=2)


if __name__ == '__main__':
  main()

"""One call on a lent GPU: what the README promises, measured (issue 48).

    PYTHONPATH=. python benchmarks/gpu_check.py --out=$OUT          # on the device, < 9 min
    python benchmarks/gpu_check.py --tiny --out=/tmp/gc             # on a CPU, tiny sizes

Writes one JSON file, DIR/gpu_check.json (DIR = --out, else $OUT, else
benchmarks/results/gpu-check-DATE-TIME), rewritten after every section, so a section that
fails or runs out of time loses only itself. Each section runs in its own process (its own
peak device memory, a clean start), under its own time cap and the whole call's --budget_s;
a process past its cap is killed with its process group (no orphan keeps the GPU).

Sections, in order:
  smoke       imports the package, one tiny round (logreg, 1 round) on JAX's default
              device, and the device and library versions. On failure (or no GPU, without
              --tiny / --allow_cpu) it prints a one-screen report and stops the call.
  default_run the README's `python experiments/run.py` with its defaults, on the GPU
              (benchmarks/first_run.py's measurement: wall, compile, accuracy), beside the
              CPU figure of the newest benchmarks/results/first-run-*.json.
  rounds      one FedAvg round of the CIFAR CNN (cnn_cifar, H=10 steps of B=32 per client:
              benchmarks/bench.py's workload) at K = 10, 100, 500 clients, sequential,
              chunked (--cohort_chunk) and vmapped; compile, seconds a round, XLA's memory
              estimate and peak device memory (jax memory_stats), a process each.
  torch       the same round as a per-client PyTorch loop on the same GPU (bench.run_torch);
              skipped with a note where torch is absent.
  sweep       the default run (at --sweep_rounds) once, then as a 100-run sweep (--seeds=10 x
              --grid of 10 lrs) in one program: the ratio of their wall times.
  pfl         pfl-research's CIFAR-10 benchmark setting (1,000 users x 50 images, cohort 50,
              B=10, one local epoch; cnn_cifar): rounds per second and the projected time
              of its 1,500 rounds (compile + 1,500 rounds; evaluation not included).
  preset      FedGKD on CIFAR-10 with ResNet-8 (fedgkd_dirichlet, alpha=0.1, its full
              mode's settings: 20 clients, 4 a round, 20 local epochs, 3 seeds) for
              --preset_rounds rounds, beside the runner's estimate for the same rounds
              (experiments/presetlib/estimates.py: XLA_COST through the roofline).
Data: the default run reads the embedded dataset (shipped with the package); every other
section uses random uint8 arrays of CIFAR-10's shapes (50,000 train, 10,000 test) unless
--cifar10_dir names the real files; the JSON says which. Timings need no real pixels.
"""
import argparse
import datetime
import glob
import importlib.metadata
import importlib.util
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import types

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARKS = os.path.join(ROOT, 'benchmarks')
EXPERIMENTS = os.path.join(ROOT, 'experiments')
for _p in (ROOT, BENCHMARKS, EXPERIMENTS):
  if _p not in sys.path:
    sys.path.insert(0, _p)
import bench  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position
import first_run  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position
import scale  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position

MARK = 'GPU_CHECK_RESULT='
CIFAR_SHAPE = (32, 32, 3)
PACKAGES = ('jax', 'jaxlib', 'jax-cuda13-plugin', 'jax-cuda13-pjrt', 'jax-cuda12-plugin',
            'jax-cuda12-pjrt', 'flax', 'optax', 'chex', 'orbax-checkpoint', 'numpy', 'scipy',
            'h5py', 'tensorboard', 'torch', 'matplotlib', 'pillow', 'tqdm',
            'tensorflow-datasets', 'dp-accounting', 'submitit')
# The peers' published GPU figures these are compared against (docs/speed.md).
PEERS = {
    'pfl_research': 'pfl-research (arXiv 2404.06430): 7-72x faster than other FL simulators '
                    'on CIFAR-10, cohort 50, 1,500 rounds, one A100',
    'blazefl': 'BlazeFL: ~6 s a round for 100 clients x 5 local epochs of CIFAR-10',
}
# Section: (cap in seconds at full size, at --tiny).
CAPS = {'smoke': (60, 120), 'default_run': (120, 240), 'rounds': (200, 300),
        'torch': (100, 200), 'sweep': (150, 240), 'pfl': (80, 200), 'preset': (150, 300)}
SECTIONS = tuple(CAPS)
SWEEP_LRS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2, 0.3)


# ------------------------------------------------------------------------------- children


def _versions():
  out = {}
  for pkg in PACKAGES:
    try:
      out[pkg] = importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
      pass
  return out


def _device():
  import jax  # pylint: disable=g-import-not-at-top
  d = jax.devices()[0]
  try:
    stats = d.memory_stats() or {}
  except Exception:  # pylint: disable=broad-except
    stats = {}
  return dict(backend=jax.default_backend(), device_kind=d.device_kind,
              device_count=jax.device_count(), platform=d.platform,
              memory_limit_gb=stats['bytes_limit'] / 1e9 if 'bytes_limit' in stats else None)


def _synthetic(tmp, n_train, n_test, shape=CIFAR_SHAPE):
  return scale.synthetic_npz(os.path.join(tmp, f'synthetic-{n_train}.npz'), n_train, n_test,
                             shape)


def _run_config(config):
  """Runs `config` (a Config) quietly; (summary, peak device GB)."""
  import fedjax_drift  # pylint: disable=g-import-not-at-top
  summary = fedjax_drift.run(config, log=lambda *a: None)
  return summary, bench.jax_device_peak_gb()


def child_smoke(p, tmp):
  import fedjax_drift  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  t0 = time.perf_counter()
  device = _device()
  summary, peak = _run_config(fedjax_drift.Config(
      model='logreg', rounds=1, num_clients=4, clients_per_round=2, local_steps=2,
      eval_every=1, progress=False, out=os.path.join(tmp, 'smoke'), compile_cache='off'))
  present = {m: importlib.util.find_spec(m) is not None
             for m in ('torch', 'matplotlib', 'PIL', 'tqdm', 'h5py', 'tensorboard')}
  return dict(device=device, versions=_versions(), python=platform.python_version(),
              jax_version=jax.__version__, modules_present=present,
              tiny_round_accuracy=summary['final_accuracy'], seconds=time.perf_counter() - t0,
              device_peak_gb=peak)


def child_default_run(p, tmp):
  extra = list(p.get('extra', []))
  if importlib.util.find_spec('tqdm') is None:
    extra.append('--progress=false')  # the image lacks tqdm: the bar is all that changes
  try:
    result = first_run.one_run(os.path.join(tmp, 'default'), extra)
  except subprocess.CalledProcessError as e:
    raise RuntimeError(f'experiments/run.py failed: {(e.stderr or "")[-1500:]}') from None
  return dict(result, flags_added=extra, device=_device_of_run(os.path.join(tmp, 'default')))


def _device_of_run(run_dir):
  try:
    with open(os.path.join(run_dir, 'summary.json')) as f:
      s = json.load(f)
    return {k: s[k] for k in s if k in ('backend', 'device', 'devices', 'device_kind')}
  except (OSError, ValueError):
    return None


def child_engine_round(p, tmp):
  bench.H, bench.B = p['H'], p['B']
  args = types.SimpleNamespace(rounds=p['rounds'], min_seconds=p['min_seconds'],
                               conv_impl='auto')
  result = bench.run_engine('cnn_cifar', p['k'], CIFAR_SHAPE, p['chunk'], args)
  result['seconds_per_round'] = float(np.median(result['round_s']))
  result['backend'] = _device()['backend']
  return result


def child_torch_round(p, tmp):
  bench.H, bench.B = p['H'], p['B']
  args = types.SimpleNamespace(rounds=p['rounds'], min_seconds=p['min_seconds'])
  result = bench.run_torch('cnn_cifar', p['k'], CIFAR_SHAPE, args)
  result['seconds_per_round'] = float(np.median(result['round_s']))
  return result


def child_run(p, tmp):
  """One fedjax_drift.run of p['flags'] (Config fields), timed in the process."""
  import fedjax_drift  # pylint: disable=g-import-not-at-top
  t0 = time.perf_counter()
  flags = dict(p['flags'], out=os.path.join(tmp, 'run'), progress=False, compile_cache='off')
  summary, peak = _run_config(fedjax_drift.Config(**flags))
  return dict(run_s=time.perf_counter() - t0, compile_s=summary.get('compile_s'),
              train_s=summary.get('train_time_s'), final_accuracy=summary.get('final_accuracy'),
              device_peak_gb=peak, runs=len(summary.get('runs', [])) or None)


def child_pfl(p, tmp):
  npz = p.get('npz') or _synthetic(tmp, p['n_train'], p['n_test'])
  flags = dict(dataset=f'npz:{npz}', model='cnn_cifar', num_clients=p['users'],
               clients_per_round=p['cohort'], batch_size=10, local_epochs=1, local_steps=0,
               partition='iid', progress=False, compile_cache='off')
  result = scale.child_rounds(flags, p['rounds'], p['min_seconds'])
  result['device_peak_gb'] = bench.jax_device_peak_gb()
  return result


def _preset_config(rounds, replace, scenario='alpha=0.1'):
  from presetlib.plans import plan, to_config  # pylint: disable=g-import-not-at-top
  replace = dict(replace)
  seeds = replace.pop('seeds', None)  # the plan's own argument, not a Config value
  rows = [r for r in plan('fedgkd_dirichlet', 'full', ['fedgkd'], rounds, seeds, replace)
          if r[0] == scenario and not r[5]]
  if not rows:
    raise RuntimeError('fedgkd_dirichlet (full) has no live fedgkd run at ' + scenario)
  _, _, values, grid, seeds, _ = rows[0]
  return to_config(values, grid, seeds)


def _estimate(config, accelerator):
  """The runner's seconds for `config` on one `accelerator` (estimates.py's roofline)."""
  from presetlib import estimates  # pylint: disable=g-import-not-at-top
  key = estimates.cost_key(config)
  if key not in estimates.XLA_COST:
    return dict(error=f'no XLA_COST entry for {key}')
  mflop, mb = estimates.XLA_COST[key]
  n = estimates.sample_gradients(config)
  precision = 'float32' if config.matmul_precision == 'highest' else 'tf32'
  secs = estimates.seconds(n * mflop * 1e6, n * mb * 1e6, accelerator, precision)
  return dict(accelerator=accelerator, precision=precision, sample_gradients=n,
              mflop_per_sample_gradient=mflop, efficiency=estimates.EFFICIENCY,
              seconds=secs, seconds_per_round=secs / config.rounds)


def child_preset(p, tmp):
  import dataclasses  # pylint: disable=g-import-not-at-top
  import fedjax_drift  # pylint: disable=g-import-not-at-top
  estimated_on = _preset_config(p['rounds'], p.get('replace', {}))
  npz = p.get('npz') or _synthetic(tmp, p['n_train'], p['n_test'])
  # The FedGKD code's CIFAR-10 constants, given as flags: they are named for cifar10 only.
  config = _preset_config(p['rounds'], dict(
      p.get('replace', {}), dataset=f'npz:{npz}', normalize_mean='0.4914,0.4822,0.4465',
      normalize_std='0.2023,0.1994,0.2010'))
  config = dataclasses.replace(config, out=os.path.join(tmp, 'preset'), progress=False,
                               compile_cache='off')
  device = _device()
  kind = device['device_kind'] or ''
  accelerator = next((a for a in ('H200', 'H100', 'A100') if a in kind), 'H100')
  t0 = time.perf_counter()
  summary, peak = _run_config(config)
  measured_s = time.perf_counter() - t0
  train = summary.get('train_time_s')
  return dict(settings={k: getattr(config, k) for k in (
      'algo', 'model', 'num_clients', 'clients_per_round', 'local_epochs', 'batch_size',
      'rounds', 'seeds', 'partition', 'dirichlet_alpha', 'gkd_buffer', 'matmul_precision')},
              run_s=measured_s, compile_s=summary.get('compile_s'), train_s=train,
              seconds_per_round=train / config.rounds if train else None,
              device_peak_gb=peak, device=device,
              estimate=_estimate(estimated_on, accelerator),
              estimate_note=f'priced as {accelerator} (the device kind {kind!r})'
              + ('' if accelerator in kind else '; no table entry for this device'))


CHILDREN = {'smoke': child_smoke, 'default_run': child_default_run,
            'engine_round': child_engine_round, 'torch_round': child_torch_round,
            'run': child_run, 'pfl': child_pfl, 'preset': child_preset}


def child_main(name, params):
  with tempfile.TemporaryDirectory() as tmp:
    result = CHILDREN[name](json.loads(params), tmp)
  result['peak_rss_gb'] = bench.peak_rss_gb()
  print(MARK + json.dumps(result, default=str), flush=True)


# --------------------------------------------------------------------------------- parent


class Clock:
  """The call's deadline: each process gets min(its cap, what is left)."""

  def __init__(self, budget_s):
    self.end = time.monotonic() + budget_s

  def left(self):
    return self.end - time.monotonic()


def spawn(name, params, timeout):
  """Runs child `name` in its own process group; its result dict, or {'error': ...} with
  the last lines of its stderr. Past `timeout` the whole group is killed."""
  env = dict(os.environ, PYTHONUNBUFFERED='1')
  env['PYTHONPATH'] = os.pathsep.join([ROOT] + [p for p in env.get('PYTHONPATH', '').split(
      os.pathsep) if p])
  cmd = [sys.executable, os.path.abspath(__file__), f'--child={name}',
         f'--params={json.dumps(params)}']
  started = time.perf_counter()
  proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env, start_new_session=True, cwd=ROOT)
  try:
    out, err = proc.communicate(timeout=max(1.0, timeout))
  except subprocess.TimeoutExpired:
    try:
      os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
      pass
    out, err = proc.communicate()
    return dict(error=f'over its {timeout:.0f}s cap (killed)', stderr_tail=_tail(err),
                process_s=time.perf_counter() - started)
  wall = time.perf_counter() - started
  found = [l for l in out.splitlines() if l.startswith(MARK)]
  if proc.returncode or not found:
    return dict(error=f'exit status {proc.returncode}', stderr_tail=_tail(err),
                process_s=wall)
  return dict(json.loads(found[-1][len(MARK):]), process_s=wall)


def _tail(text, lines=15):
  return [l[:300] for l in (text or '').strip().splitlines()[-lines:]]


def newest_cpu_first_run():
  """The median of the newest benchmarks/results/first-run-*.json, with its file."""
  files = sorted(glob.glob(os.path.join(ROOT, 'benchmarks', 'results', 'first-run-*.json')))
  if not files:
    return None
  with open(files[-1]) as f:
    record = json.load(f)
  reps = record['repetitions']
  med = lambda k: statistics.median(r[k] for r in reps)
  return dict(file=os.path.relpath(files[-1], ROOT), jax=record.get('jax'),
              host=record.get('host'), cpus=record.get('cpus'), repetitions=len(reps),
              wall_s=med('wall_s'), compile_s=med('compile_s'), train_s=med('train_s'),
              final_accuracy=med('final_accuracy'), rounds_to_target=med('rounds_to_target'))


def sizes(tiny):
  """Every section's sizes: the issue's at full size, seconds-long ones with --tiny."""
  if tiny:
    return dict(H=2, B=4, ks=(2, 4), engine_rounds=1, engine_min_s=0.0, sweep_rounds=1,
                sweep_seeds=2, sweep_lrs=SWEEP_LRS[:2], default_extra=['--rounds=2'],
                pfl=dict(users=20, cohort=5, n_train=1000, n_test=200, rounds=2,
                         min_seconds=0.0),
                preset=dict(rounds=1, n_train=400, n_test=100,
                            replace=dict(local_epochs=1, seeds=1, num_clients=4,
                                         clients_per_round=2)),
                sweep_base=dict(num_clients=4, clients_per_round=2, local_steps=2))
  return dict(H=bench.H, B=bench.B, ks=(10, 100, 500), engine_rounds=2, engine_min_s=1.0,
              sweep_rounds=20, sweep_seeds=10, sweep_lrs=SWEEP_LRS, default_extra=[],
              pfl=dict(users=1000, cohort=50, n_train=50000, n_test=10000, rounds=20,
                       min_seconds=3.0),
              preset=dict(rounds=3, n_train=50000, n_test=10000, replace={}),
              sweep_base={})


def chunk_of(k):
  """The chunked strategy's clients per chunk: a tenth of the cohort, 5 at least."""
  return min(k, max(5, k // 10))


def section_rounds(sz, clock, cap, record):
  end = time.monotonic() + cap
  rows = []
  for k in sz['ks']:
    for mode, chunk in (('sequential', 1), ('chunked', chunk_of(k)), ('vmap', k)):
      left = min(end, clock.end) - time.monotonic()
      row = dict(k=k, mode=mode, chunk=chunk, H=sz['H'], B=sz['B'])
      if left < 5:
        row['error'] = 'skipped: the section ran out of time'
      else:
        row.update(spawn('engine_round', dict(k=k, chunk=chunk, H=sz['H'], B=sz['B'],
                                              rounds=sz['engine_rounds'],
                                              min_seconds=sz['engine_min_s']), left))
      rows.append(row)
      record(rows)
  return dict(model='cnn_cifar', data='synthetic: random uint8 32x32x3 images (bench.make_data)',
              rows=rows)


def section_torch(sz, clock, cap, record):
  if importlib.util.find_spec('torch') is None:
    return dict(skipped='torch is not installed here: no PyTorch loop to compare')
  end = time.monotonic() + cap
  rows = []
  for k in sz['ks']:
    left = min(end, clock.end) - time.monotonic()
    row = dict(k=k, H=sz['H'], B=sz['B'])
    if left < 5:
      row['error'] = 'skipped: the section ran out of time'
    else:
      row.update(spawn('torch_round', dict(k=k, H=sz['H'], B=sz['B'], rounds=sz['engine_rounds'],
                                           min_seconds=sz['engine_min_s']), left))
    rows.append(row)
    record(rows)
  return dict(model='cnn_cifar (the same layers in torch.nn)', rows=rows)


def section_sweep(sz, clock, cap, record):
  end = time.monotonic() + cap
  base = dict(sz['sweep_base'], rounds=sz['sweep_rounds'])
  grid = 'lr:' + ','.join(str(x) for x in sz['sweep_lrs'])
  result = dict(flags=base, sweep_flags=dict(seeds=sz['sweep_seeds'], grid=grid),
                runs_in_sweep=sz['sweep_seeds'] * len(sz['sweep_lrs']))
  result['one'] = spawn('run', dict(flags=base), min(end, clock.end) - time.monotonic())
  record(result)
  left = min(end, clock.end) - time.monotonic()
  result['sweep'] = (spawn('run', dict(flags=dict(base, seeds=sz['sweep_seeds'], grid=grid)),
                           left) if left > 5 else dict(error='skipped: out of time'))
  one, many = result['one'], result['sweep']
  if 'error' not in one and 'error' not in many:
    result['wall_ratio'] = many['process_s'] / one['process_s']
    result['run_ratio'] = many['run_s'] / one['run_s']
    result['seconds_per_run_in_sweep'] = many['run_s'] / result['runs_in_sweep']
  return result


def section_pfl(sz, clock, cap, record, npz):
  p = dict(sz['pfl'], npz=npz)
  result = spawn('pfl', p, min(cap, clock.left()))
  result.pop('round_s', None)
  if 'seconds_per_round' in result:
    result['rounds_per_s'] = 1.0 / result['seconds_per_round']
    result['projected_1500_rounds_s'] = result['compile_s'] + 1500 * result['seconds_per_round']
  return dict(setting=dict(users=p['users'], images_per_user=p['n_train'] // p['users'],
                           cohort=p['cohort'], batch_size=10, local_epochs=1,
                           model='cnn_cifar', partition='iid'),
              compared_with=PEERS['pfl_research'], **result)


def section_preset(sz, clock, cap, record, npz):
  p = dict(sz['preset'], npz=npz)
  return dict(preset='fedgkd_dirichlet', mode='full', method='fedgkd', scenario='alpha=0.1',
              **spawn('preset', p, min(cap, clock.left())))


def smoke_report(result, path):
  """The one screen a failed smoke check prints."""
  lines = ['=' * 72, 'gpu_check: the smoke check FAILED; nothing else was run', '=' * 72,
           f'why: {result.get("error")}',
           f'python {platform.python_version()} at {sys.executable}',
           f'PYTHONPATH={os.environ.get("PYTHONPATH", "")!r} (the working tree must be on it)',
           'installed: ' + ', '.join(f'{k} {v}' for k, v in _versions().items()),
           'stderr of the smoke process (last lines):']
  lines += ['  ' + l for l in result.get('stderr_tail', [])] or ['  (none)']
  lines += [f'record: {path}', '=' * 72]
  return '\n'.join(lines)


def nvidia_smi():
  try:
    out = subprocess.run(['nvidia-smi', '--query-gpu=name,memory.total,driver_version',
                          '--format=csv,noheader'], capture_output=True, text=True, timeout=20)
    return out.stdout.strip() or out.stderr.strip()
  except (OSError, subprocess.TimeoutExpired) as e:
    return f'unavailable ({type(e).__name__})'


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--out', default='', help='folder for gpu_check.json (default $OUT, '
                      'else benchmarks/results/gpu-check-DATE-TIME)')
  parser.add_argument('--tiny', action='store_true', help='tiny sizes (a CPU dry run)')
  parser.add_argument('--allow_cpu', action='store_true',
                      help='go on when JAX sees no GPU (implied by --tiny)')
  parser.add_argument('--budget_s', type=float, default=0,
                      help='the whole call, seconds (default 510; 1200 with --tiny)')
  parser.add_argument('--sections', default='', help=f'comma list of {",".join(SECTIONS)} '
                      '(smoke always runs first)')
  parser.add_argument('--cifar10_dir', default='',
                      help="CIFAR-10's files (else random arrays of its shapes)")
  parser.add_argument('--child', default='', help=argparse.SUPPRESS)
  parser.add_argument('--params', default='{}', help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.child:
    return child_main(args.child, args.params)

  clock = Clock(args.budget_s or (1200 if args.tiny else 510))
  folder = args.out or os.environ.get('OUT') or os.path.join(
      ROOT, 'benchmarks', 'results',
      'gpu-check-' + datetime.datetime.now().strftime('%Y-%m-%d-%H%M%S'))
  os.makedirs(folder, exist_ok=True)
  path = os.path.join(folder, 'gpu_check.json')
  wanted = [s for s in (args.sections.split(',') if args.sections else SECTIONS) if s]
  unknown = sorted(set(wanted) - set(SECTIONS))
  if unknown:
    sys.exit(f'error: --sections: unknown {unknown}; choose from {", ".join(SECTIONS)}')
  sz = sizes(args.tiny)
  record = dict(script='benchmarks/gpu_check.py', argv=sys.argv[1:] if argv is None else argv,
                started=datetime.datetime.now().isoformat(timespec='seconds'), tiny=args.tiny,
                git_commit=bench.host_info().get('git_commit'), nvidia_smi=nvidia_smi(),
                peers=PEERS, data=(f'CIFAR-10 from {args.cifar10_dir}' if args.cifar10_dir else
                                   'synthetic: random uint8 arrays of CIFAR-10\'s shapes in every '
                                   'section but smoke and default_run (the embedded dataset)'),
                sections={})

  def save():
    with open(path + '.tmp', 'w') as f:
      json.dump(record, f, indent=1, default=str)
    os.replace(path + '.tmp', path)

  start = time.monotonic()
  npz_dir = tempfile.mkdtemp(prefix='gpu-check-')
  npz = None
  if args.cifar10_dir:
    npz = _cifar10_npz(args.cifar10_dir, npz_dir)
  for name in ['smoke'] + [s for s in wanted if s != 'smoke']:
    cap = CAPS[name][1 if args.tiny else 0]
    t0 = time.monotonic()
    left = clock.left()
    if left < 10:
      record['sections'][name] = dict(status='skipped', why='the call ran out of time')
      save()
      continue
    print(f'[gpu_check] {name} (cap {min(cap, left):.0f}s) ...', flush=True)
    partial = lambda rows, name=name: (record['sections'].__setitem__(
        name, dict(status='running', partial=rows)), save())
    try:
      if name == 'smoke':
        result = spawn('smoke', {}, min(cap, left))
        backend = (result.get('device') or {}).get('backend')
        if 'error' not in result and backend != 'gpu' and not (args.tiny or args.allow_cpu):
          result['error'] = f'JAX runs on {backend!r}, not on a GPU (its CUDA plugin?)'
      elif name == 'default_run':
        result = spawn('default_run', dict(extra=sz['default_extra']), min(cap, left))
        result['cpu_figure'] = newest_cpu_first_run()
        if 'wall_s' in result and result['cpu_figure']:
          result['cpu_over_this'] = result['cpu_figure']['wall_s'] / result['wall_s']
      elif name == 'rounds':
        result = section_rounds(sz, clock, min(cap, left), partial)
      elif name == 'torch':
        result = section_torch(sz, clock, min(cap, left), partial)
      elif name == 'sweep':
        result = section_sweep(sz, clock, min(cap, left), partial)
      elif name == 'pfl':
        result = section_pfl(sz, clock, min(cap, left), partial, npz)
      else:
        result = section_preset(sz, clock, min(cap, left), partial, npz)
    except Exception:  # pylint: disable=broad-except
      result = dict(error='gpu_check itself failed', traceback=_tail(traceback.format_exc()))
    failed = 'error' in result or any('error' in r for r in result.get('rows', []))
    result['status'] = 'error' if 'error' in result else 'partial' if failed else (
        'skipped' if 'skipped' in result else 'ok')
    result['section_s'] = round(time.monotonic() - t0, 1)
    record['sections'][name] = result
    record['total_s'] = round(time.monotonic() - start, 1)
    save()
    print(f'[gpu_check] {name}: {result["status"]} in {result["section_s"]}s'
          + (f' ({result["error"]})' if 'error' in result else ''), flush=True)
    if name == 'smoke' and 'error' in result:
      print(smoke_report(result, path), flush=True)
      return 1
  print(f'[gpu_check] done in {time.monotonic() - start:.0f}s: {path}', flush=True)
  return 0


def _cifar10_npz(data_dir, tmp):
  """The real CIFAR-10 as an npz the sections read (--dataset=npz:PATH)."""
  from fedjax_drift.data import sources  # pylint: disable=g-import-not-at-top
  ds = sources.load('cifar10', data_dir)
  path = os.path.join(tmp, 'cifar10.npz')
  np.savez(path, x_train=ds.x_train, y_train=ds.y_train, x_test=ds.x_test, y_test=ds.y_test)
  return path


if __name__ == '__main__':
  sys.exit(main())

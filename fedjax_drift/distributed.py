"""One simulation across processes, on JAX's own multi-process runtime (jax.distributed).

`setup(config)` runs first in `run()`, before any other JAX call: with --num_processes > 1 or
--coordinator_address given, --distributed=on, or (auto) a multi-process SLURM, Open MPI or
Cloud TPU launch detected as jax.distributed.initialize detects it, it initialises the
runtime (gloo collectives on CPU) and makes --devices span every global device. Otherwise it
does nothing, and a run is exactly what it was on one process.

`place(study)` turns a built study into global jax.Arrays over the client mesh: parameters,
server buffers, data and inputs replicated; every per-client table (each leaf of
ServerState.clients, [R, N, ...]) split by client (axis 1) over the devices, so each process
keeps N/devices rows and the state grows with the number of machines. The compiled segment
then gathers and scatters the cohort's rows across processes (XLA partitions it).

Process 0 writes the run directory (`is_writer`); every process runs the loop and takes part
in checkpoints (orbax writes each process's rows). The engine knows nothing of this.

Failing fast: the processes compare their flags (`agree`); start-up ends after
INIT_TIMEOUT_S when a peer never joins (`_joined_within`); a peer that dies mid-run ends the
others within PEER_BOUND_S, each with one line from peerwatch.py (`watch_stderr`).
"""
import contextlib
import dataclasses
import os
import threading
import warnings

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding, PartitionSpec as P

from fedjax_drift import engine
from fedjax_drift.errors import UserError

LAUNCH_FLAGS = ('distributed', 'coordinator_address', 'num_processes', 'process_id')
# Bounds passed to jax.distributed.initialize where the installed jax takes them (docs/scale.md,
# "More processes and machines"): a peer that never arrives ends start-up after INIT_TIMEOUT_S;
# a peer that stops answering is noticed within HEARTBEAT_S; leaving waits SHUTDOWN_S at most.
INIT_TIMEOUT_S, HEARTBEAT_S, SHUTDOWN_S = 60, 30, 30
# Environment variable that shortens (or lengthens) INIT_TIMEOUT_S: the tests of a missing
# peer set it to wait seconds, not a minute (init_timeout_s).
INIT_TIMEOUT_ENV = 'FEDJAX_DRIFT_INIT_TIMEOUT_S'
AGREE_TIMEOUT_S = 60  # how long a process waits for the others' flags
# A peer that dies mid-run: JAX's coordination service notices a dead worker after
# HEARTBEAT_S without heartbeats (a dead process 0, the service itself, at once) and every
# surviving process is then ended by JAX's runtime (SIGABRT), its standard error reduced to
# one line naming the dead process by peerwatch.py. PEER_BOUND_S is the documented bound.
PEER_BOUND_S = HEARTBEAT_S + 15
_agreements = [0]     # calls of agree() in this process (a fresh key each time)


def _given(config) -> dict:
  """jax.distributed.initialize's arguments the user gave (unset ones JAX detects)."""
  given = {}
  if config.coordinator_address:
    given['coordinator_address'] = config.coordinator_address
  if config.num_processes:
    given['num_processes'] = config.num_processes
  if config.process_id >= 0:
    given['process_id'] = config.process_id
  return given


def _detected_processes() -> int:
  """Processes of the cluster launch JAX would auto-detect (SLURM, Open MPI, Cloud TPU), or 1.
  Uses JAX's own detection; a jax without it falls back to SLURM's and Open MPI's variables."""
  try:
    from jax._src import clusters  # pylint: disable=g-import-not-at-top
    with warnings.catch_warnings():  # e.g. 'kubernetes not installed' in any k8s pod
      warnings.simplefilter('ignore')
      for env in clusters.ClusterEnv._cluster_types:  # pylint: disable=protected-access
        if not env.opt_in_only_method and env.is_env_present():
          return int(env.get_process_count())
    return 1
  except Exception:  # pylint: disable=broad-except
    for name in ('SLURM_STEP_NUM_TASKS', 'OMPI_COMM_WORLD_SIZE'):
      if os.environ.get(name, '').isdigit():
        return int(os.environ[name])
    return 1


def wanted(config) -> bool:
  """Whether this run initialises jax.distributed (UserError on contradictory flags)."""
  given = _given(config)
  if config.distributed not in ('auto', 'on', 'off'):
    raise UserError(f'--distributed={config.distributed} is not one of: auto, on, off')
  if config.num_processes < 0:
    raise UserError(f'--num_processes={config.num_processes} must be >= 1 (0 = detect)')
  if config.num_processes and config.process_id >= config.num_processes:
    raise UserError(f'--process_id={config.process_id} must be below '
                    f'--num_processes={config.num_processes}')
  if config.distributed == 'off':
    if given:
      raise UserError(f'--distributed=off contradicts --{next(iter(given))}')
    return False
  if config.distributed == 'on' or config.coordinator_address or config.num_processes > 1:
    return True
  return config.num_processes != 1 and _detected_processes() > 1


def setup(config, log=print):
  """Initialises jax.distributed when `wanted` (once per process) and returns the config with
  --devices resolved to every global device; the config unchanged otherwise. A caller that
  initialised jax.distributed itself gets the same treatment."""
  if not wanted(config) and not jax.distributed.is_initialized():
    return config
  if not jax.distributed.is_initialized():
    # JAX's pre-emption service would take SIGTERM from the Python handler (interrupts.py)
    # and only tell the processes, which never ask (the run trained on): off, a SIGTERM
    # stops its process with one line and the others end with peerwatch's line.
    jax.config.update('jax_enable_preemption_service', False)
    if jax.config.jax_cpu_collectives_implementation in (None, '', 'none'):
      jax.config.update('jax_cpu_collectives_implementation', 'gloo')  # CPU all-reduce
    watch_stderr(config.process_id)
    try:
      with _joined_within(init_timeout_s(), config):
        jax.distributed.initialize(**_given(config), **_bounds())
    except (RuntimeError, ValueError) as e:
      first = (str(e).strip().splitlines() or [type(e).__name__])[0]
      raise UserError(f'jax.distributed.initialize failed: {first}') from None
  if not active():
    return config
  if not config.out:  # every process must write its checkpoint shards to the same place
    raise UserError('a multi-process run needs --out=RUN_DIR, the same path on every '
                    'process (a shared file system)')
  total = jax.device_count()
  if config.devices not in (1, total):
    raise UserError(f'--devices={config.devices}: a multi-process run splits the cohort over '
                    f'all {total} global devices; pass --devices={total} or leave it out')
  agree(config)
  if is_writer():
    log(f'distributed: {jax.process_count()} processes, {total} global devices '
        f'({jax.local_device_count()} on this process, process {jax.process_index()})')
  return dataclasses.replace(config, devices=total)


def init_timeout_s() -> int:
  """Seconds start-up waits for every process to join: $FEDJAX_DRIFT_INIT_TIMEOUT_S (whole
  seconds > 0) where set, else INIT_TIMEOUT_S. UserError naming the variable otherwise."""
  value = os.environ.get(INIT_TIMEOUT_ENV, '')
  if not value:
    return INIT_TIMEOUT_S
  if not value.isdigit() or int(value) <= 0:
    raise UserError(f'${INIT_TIMEOUT_ENV}={value!r} is not a whole number of seconds > 0')
  return int(value)


@contextlib.contextmanager
def _joined_within(seconds, config):
  """Ends the process with one line (exit code 2) if the block, jax.distributed.initialize,
  has not returned after `seconds`. JAX's own limit (set a little later) aborts the process
  from C++ with a stack trace instead of raising."""
  line = (f'error: not every one of the {config.num_processes or "detected"} processes joined '
          f'{config.coordinator_address or "the coordinator"} within {seconds}s (a missing '
          'peer, a duplicate --process_id, or a wrong --coordinator_address)\n')

  def give_up():
    os.write(2, line.encode())
    os._exit(2)  # pylint: disable=protected-access
  timer = threading.Timer(seconds, give_up)
  timer.daemon = True
  timer.start()
  try:
    yield
  finally:
    timer.cancel()


_watcher = []  # the peerwatch process of this process, once started


def watch_stderr(process_id):
  """Sends this process's standard error (file descriptor 2, so the C++ runtime's too)
  through a peerwatch process (fedjax_drift/peerwatch.py), which turns the runtime's abort
  after a peer died into one line naming that peer. Once per process."""
  if _watcher:
    return
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  read, write = os.pipe()
  script = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'peerwatch.py')
  _watcher.append(subprocess.Popen(  # its stderr: the one this process has now
      [sys.executable, script, str(process_id), str(HEARTBEAT_S)], stdin=read,
      stdout=subprocess.DEVNULL, close_fds=True))
  os.close(read)
  sys.stderr.flush()
  os.dup2(write, 2)
  os.close(write)


def await_peer_failure(error, seconds=None):
  """Called with an exception that ended a multi-process run on this process: when it may
  come from a peer that died (a collective's transport failed), waits up to `seconds`
  (default PEER_BOUND_S) for JAX's runtime to end this process, which it does once the
  coordination service has noticed the dead peer; peerwatch then writes the one line naming
  it, and this process's own error line is never written. Returns without waiting on one
  process or for other errors."""
  import time  # pylint: disable=g-import-not-at-top
  if not active():
    return
  text = str(error)
  if not any(k in text for k in ('Gloo', 'gloo', 'Connection reset', 'Connection closed',
                                 'UNAVAILABLE', 'peer')):
    return
  deadline = time.monotonic() + (PEER_BOUND_S if seconds is None else seconds)
  while time.monotonic() < deadline:
    time.sleep(0.2)


def _bounds() -> dict:
  """The time limits of jax.distributed.initialize that this jax accepts."""
  import inspect  # pylint: disable=g-import-not-at-top
  accepted = inspect.signature(jax.distributed.initialize).parameters
  wanted_bounds = {'initialization_timeout': init_timeout_s() + 15,  # ours acts first
                   'heartbeat_timeout_seconds': HEARTBEAT_S,
                   'shutdown_timeout_seconds': SHUTDOWN_S}
  return {k: v for k, v in wanted_bounds.items() if k in accepted}


def _flags(config) -> dict:
  """What must be equal on every process: every flag but --process_id, --out absolute."""
  flags = {k: v for k, v in dataclasses.asdict(config).items() if k != 'process_id'}
  flags['out'] = os.path.abspath(config.out) if config.out else ''
  return flags


def first_difference(mine: dict, theirs: dict):
  """The first flag (in Config order) whose values differ, or None."""
  return next((k for k in mine if mine[k] != theirs.get(k)), None)


def agree(config):
  """Every process publishes its flags in jax.distributed's key-value store and compares
  them with every other process's; a difference is one UserError, on every process, naming
  the flag (a run whose processes disagree would train another model than config.json says).
  """
  import json  # pylint: disable=g-import-not-at-top
  client = _kv_client()
  if client is None:
    if active():  # a jax without the private client: the same check, less precise
      _agree_by_digest(json.dumps(_flags(config), default=str, sort_keys=True))
    return
  _agreements[0] += 1
  prefix, me = f'fedjax_drift/flags/{_agreements[0]}/', jax.process_index()
  text = json.dumps(_flags(config), default=str)
  mine = json.loads(text)  # as the others read it
  client.key_value_set(prefix + str(me), text)
  for other in range(jax.process_count()):
    if other == me:
      continue
    try:
      theirs = json.loads(client.blocking_key_value_get(prefix + str(other),
                                                        AGREE_TIMEOUT_S * 1000))
    except Exception:  # pylint: disable=broad-except
      raise UserError(f'process {other} did not report its flags within {AGREE_TIMEOUT_S}s '
                      '(it stopped, or runs another version)') from None
    name = first_difference(mine, theirs)
    if name is not None:
      raise UserError(f'--{name} differs between processes ({mine[name]!r} on process {me}, '
                      f'{theirs.get(name)!r} on process {other}); every process of a run '
                      'needs the same flags except --process_id')


def _kv_client():
  """jax.distributed's key-value store client, or None (not initialised, or a jax whose
  private module moved: JAX has no public handle on it; docs/design.md lists this use)."""
  try:
    from jax._src import distributed as jax_distributed  # pylint: disable=g-import-not-at-top
    return jax_distributed.global_state.client
  except (ImportError, AttributeError):
    return None


def _agree_by_digest(text):
  """`agree`'s fallback on public API only: every process's SHA-256 of its flags, gathered
  (multihost_utils.process_allgather); a difference is one UserError naming the process but
  not the flag (the digest does not say which)."""
  import hashlib  # pylint: disable=g-import-not-at-top
  mine = np.frombuffer(hashlib.sha256(text.encode()).digest(), np.uint8)
  every = np.asarray(multihost_utils.process_allgather(mine))
  for other, theirs in enumerate(every.reshape(-1, mine.size)):
    if not np.array_equal(theirs, mine):
      raise UserError(f'the flags differ between process {jax.process_index()} and process '
                      f'{other}; every process of a run needs the same flags except '
                      '--process_id')


def active() -> bool:
  """Whether this run spans several processes (never starts JAX's backend on one)."""
  return jax.distributed.is_initialized() and jax.process_count() > 1


def is_writer() -> bool:
  """Whether this process writes the run directory (process 0, or the only process)."""
  return not active() or jax.process_index() == 0


def barrier(name):
  """Every process waits here for the others (a no-op on one process)."""
  if active():
    multihost_utils.sync_global_devices(name)


def _is_key(x):
  return jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def global_array(a, sharding):
  """A global jax.Array with `sharding` from `a`, which every process holds whole and equal;
  each process keeps only its devices' slices."""
  if _is_key(a):
    data = global_array(jax.random.key_data(a), sharding)
    return jax.random.wrap_key_data(data, impl=jax.random.key_impl(a))
  host = np.asarray(a)
  return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])


def place(study):
  """The study with state, data and inputs as global arrays over the client mesh (see the
  module docstring); the study unchanged when the run is on one process.

  Client tables split by client when the device count divides N, else stay replicated.
  """
  if not active():
    return study
  mesh = engine.client_mesh(study.config.devices)
  replicated = NamedSharding(mesh, P())
  num_clients = study.data.client_count.shape[1]
  rows = NamedSharding(mesh, P(None, 'clients')) if num_clients % mesh.size == 0 \
      else replicated
  everywhere = lambda tree: jax.tree.map(lambda a: global_array(a, replicated), tree)
  state = everywhere(study.state._replace(clients=()))._replace(
      clients=jax.tree.map(lambda a: global_array(a, rows), study.state.clients))
  # Each run's own whole table is not needed again (only its shape, for the log): drop it.
  experiments = [e._replace(state=e.state._replace(clients=jax.eval_shape(
      lambda c: c, e.state.clients))) for e in study.experiments]
  return study._replace(state=state, data=everywhere(study.data),
                        inputs=everywhere(study.inputs), experiments=experiments)


def segment_shardings(study):
  """jit's out_shardings for the segment: the state keeps the shardings it came in with (so
  each call's output is the next call's input), metrics replicated (every process reads
  them). None on one process: XLA chooses, as before."""
  if not active():
    return None
  replicated = NamedSharding(engine.client_mesh(study.config.devices), P())
  return jax.tree.map(lambda a: a.sharding, study.state), replicated


def to_host(tree):
  """Replicated global arrays as numpy, read from this process's own copy (no collective),
  so process 0 may use them alone; the tree unchanged on one process."""
  return jax.tree.map(np.asarray, tree) if active() else tree


def clients_split(state) -> bool:
  """Whether the per-client tables are split across processes (for the log)."""
  leaves = jax.tree.leaves(state.clients)
  return bool(leaves) and not leaves[0].is_fully_replicated

"""Checkpoints: any state pytree plus the run's metric history, saved together and checksummed.

Orbax's CheckpointManager writes each step into a temporary directory and renames it into
place when complete, so a run killed at any moment leaves only whole checkpoints behind. Each
step holds three items: the state's leaves (typed PRNG keys as their raw key data), the
history (JSON), and a sha256 over both. `restore` recomputes the sha256 of what it read; a
step that fails to load or to match is skipped for the newest intact one, so a damaged
latest checkpoint costs some rounds, never correctness. The pytree structure comes from the
caller's `like` tree, so states with a leading run axis work unchanged.

Each checkpoint is tied to its run: the history it stores carries `_run` (the run id of the
run directory's record and the sha256 of the run-defining flags), covered by the checksum,
and `restore(expect=...)` refuses, naming what differs, a checkpoint of another run or of
other flags.

A state split over processes (distributed.py) is saved as global arrays: every process writes
its own rows, and no host ever holds a whole client table. Its checksum (format 3) hashes a
fingerprint each array gets on the devices, which does not depend on how the array is split,
so it is checked the same way on any number of processes.
"""
import contextlib
import hashlib
import json
import os
import sys
import tempfile

import jax
import numpy as np

from fedjax_drift import report
from fedjax_drift.errors import UserError

FORMAT = 2  # 1: a ServerState saved as orbax's StandardSave without a checksum
DEVICE_FORMAT = 3  # the checksum hashes on-device fingerprints (a state split over processes)


def _is_key(x):
  return hasattr(x, 'dtype') and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _saveable(tree):
  """The tree's leaves as {'00000': array, ...}; typed PRNG keys become their key data."""
  leaves = jax.tree.leaves(tree)
  return {f'{i:05d}': jax.random.key_data(x) if _is_key(x) else x for i, x in enumerate(leaves)}


def checksum(arrays: dict, history) -> str:
  """sha256 over each array's dtype, shape and bytes (in key order), then the history."""
  digest = hashlib.sha256()
  for name in sorted(arrays):
    a = np.ascontiguousarray(np.asarray(arrays[name]))
    digest.update(f'{name}:{a.dtype.str}:{a.shape};'.encode())
    digest.update(a.tobytes())
  digest.update(json.dumps(history, sort_keys=True).encode())
  return digest.hexdigest()


def _mix(x):
  """MurmurHash3's 32-bit finaliser: a bijection on uint32 that scatters every input bit."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  x = x ^ (x >> 16)
  x = x * jnp.uint32(0x85ebca6b)
  x = x ^ (x >> 13)
  x = x * jnp.uint32(0xc2b2ae35)
  return x ^ (x >> 16)


def _words(a):
  """An array's bytes as uint32 words (8-byte types give two words per value)."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  if a.dtype == jnp.bool_:
    a = a.astype(jnp.uint8)
  width = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint32}[a.dtype.itemsize]
  return jax.lax.bitcast_convert_type(a, width).astype(jnp.uint32).reshape(-1)


@jax.jit
def _fingerprints(arrays):
  """{name: uint32[2]} per array: sums over its words of mix(word + mix(position)) and
  mix(word ^ mix(position + 1)), wrapping. Integer sums do not depend on the order or the
  split of the array across devices, and any one changed word changes both sums."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  def one(a):
    w = _words(a)
    i = jnp.arange(w.shape[0], dtype=jnp.uint32)
    return jnp.stack([jnp.sum(_mix(w + _mix(i)), dtype=jnp.uint32),
                      jnp.sum(_mix(w ^ _mix(i + jnp.uint32(1))), dtype=jnp.uint32)])
  return {name: one(a) for name, a in arrays.items()}


def device_checksum(arrays: dict, history) -> str:
  """sha256 over each array's dtype, shape and on-device fingerprint, then the history.
  Every process must call it (it runs one program over the global arrays)."""
  prints = jax.tree.map(np.asarray, _fingerprints(arrays))  # replicated: read locally
  digest = hashlib.sha256()
  for name in sorted(arrays):
    a = arrays[name]
    digest.update(f'{name}:{np.dtype(a.dtype).str}:{tuple(a.shape)};'.encode())
    digest.update(prints[name].tobytes())
  digest.update(json.dumps(history, sort_keys=True).encode())
  return digest.hexdigest()


def _split(arrays) -> bool:
  """Whether some array spans devices of other processes (it cannot be fetched whole)."""
  return any(not getattr(a, 'is_fully_addressable', True) for a in arrays.values())


@contextlib.contextmanager
def _quiet_stderr_on_failure():
  """Holds back what orbax/tensorstore print to fd 2 (tracebacks from their threads when a
  damaged file fails to load); passes it on only if the block succeeds."""
  try:
    saved = os.dup(2)
  except OSError:
    yield
    return
  with tempfile.TemporaryFile() as held:
    sys.stderr.flush()
    os.dup2(held.fileno(), 2)
    try:
      yield
    except BaseException:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
      raise
    sys.stderr.flush()
    os.dup2(saved, 2)
    os.close(saved)
    held.seek(0)
    text = held.read()
    if text:
      os.write(2, text)


def _ignore_closed_loop_callbacks():
  """After a failed restore, tensorstore may still complete futures into orbax's closed
  asyncio loop; Python then prints 'Exception ignored ... Event loop is closed' at some later
  moment. Drop exactly that report; pass every other one on."""
  previous = sys.unraisablehook
  if getattr(previous, '_fedjax_drift', False):
    return

  def hook(report):
    if isinstance(report.exc_value, RuntimeError) and 'Event loop is closed' in str(
        report.exc_value):
      return
    if hook.passing:  # interrupts' hook, installed over ours, passed the report back to us
      sys.__unraisablehook__(report)
      return
    hook.passing = True
    try:
      previous(report)
    finally:
      hook.passing = False
  hook.passing = False
  hook._fedjax_drift = True  # pylint: disable=protected-access
  sys.unraisablehook = hook


# What a checkpoint write's error says when a collective between processes failed (a peer
# died mid-write): Gloo's and the coordination service's words.
PEER_LOST = ('Gloo', 'AllGather', 'closed by peer', 'reset by peer', 'coordination service',
             'heartbeat')


def _lost_peer(text) -> str:
  """'process 1' (or 'another process', with more than two) when `text`, a failed write's
  error, says that a peer of a multi-process run was lost; '' otherwise or with one
  process."""
  if jax.process_count() < 2 or not any(w in text for w in PEER_LOST):
    return ''
  return f'process {1 - jax.process_index()}' if jax.process_count() == 2 else \
      'another process'


def _write_failure(path, error) -> str:
  """The one line for a checkpoint that could not be written (the OS's reason when the error
  carries one: tensorstore reports it as [os_error_code='28']); removes the partial step,
  which orbax left as PATH.orbax-checkpoint-tmp*."""
  import re  # pylint: disable=g-import-not-at-top
  import shutil  # pylint: disable=g-import-not-at-top
  code = getattr(error, 'errno', None) or next(
      (int(c) for c in re.findall(r"os_error_code='(\d+)'", str(error))), None)
  reason = os.strerror(code) if code else (
      (str(error).strip().splitlines() or [type(error).__name__])[0][:120])
  parent, name = os.path.split(path)
  for entry in os.listdir(parent) if os.path.isdir(parent) else []:
    if entry.startswith(name + '.orbax-checkpoint-tmp'):
      shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)
  run_dir = os.path.dirname(parent)
  lost = _lost_peer(str(error))
  if lost:  # a collective of the write failed: not the disk
    return (f'cannot write the checkpoint {path}: {lost} of this multi-process run was lost '
            f'during the write ({reason[:80]}), not the disk; restart every process, then '
            f'continue with --resume --out={run_dir}')
  if not any(e.isdigit() and e != name for e in os.listdir(parent)):  # nothing to resume
    return (f'cannot write the checkpoint {path}: {reason}; no checkpoint was kept: make '
            'room, then run the same command again')
  return (f'cannot write the checkpoint {path}: {reason}; earlier checkpoints are intact: '
          f'make room, then continue with --resume --out={run_dir}')


def _remove_unfinished(directory) -> list:
  """Removes the unfinished steps (<step>.orbax-checkpoint-tmp*) that a killed write left in
  `directory`; orbax would remove one only when saving the same step again, and then with a
  warning line from absl on stderr. Returns the removed names."""
  import shutil  # pylint: disable=g-import-not-at-top
  names = [n for n in os.listdir(directory) if '.orbax-checkpoint-tmp' in n] \
      if os.path.isdir(directory) else []
  for name in names:
    shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
  return names


class Checkpointer:
  """Saves and restores (state, history) under RUN_DIR/checkpoints/<round>.

  Creating one writes nothing; the directory appears with the first save.
  """

  def __init__(self, run_dir, max_to_keep=2, identity=None):
    """identity: {'run_id', 'config_sha256'} stored in every checkpoint saved (or None)."""
    import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
    self._ocp = ocp
    self.directory = os.path.abspath(os.path.join(run_dir, 'checkpoints'))
    self._max_to_keep = max_to_keep
    self._manager = None
    self._damaged = []  # steps found damaged by restore(); deleted before the next save
    self.restored_round = None
    self.identity = identity

  def _open(self, create):
    if self._manager is None and (create or os.path.isdir(self.directory)):
      ocp = self._ocp
      self._manager = ocp.CheckpointManager(
          self.directory, options=ocp.CheckpointManagerOptions(
              max_to_keep=self._max_to_keep, create=create, enable_async_checkpointing=False))
    return self._manager

  def rounds(self):
    """Rounds with a (complete, not necessarily intact) checkpoint, oldest first."""
    manager = self._open(create=False)
    return sorted(manager.all_steps()) if manager else []

  def latest_round(self):
    rounds = self.rounds()
    return rounds[-1] if rounds else None

  def save(self, state, history: dict, step=None):
    """Writes checkpoints/<step>; step defaults to state.round (with a leading run axis,
    its first entry)."""
    if self._manager is None:
      report.will_create(self.directory)  # entered in the run's record before it exists
    ocp, manager = self._ocp, self._open(create=True)
    if self.identity is not None:
      history = {**history, '_run': dict(self.identity)}
    step = int(np.asarray(state.round).reshape(-1)[0]) if step is None else int(step)
    if jax.process_index() == 0:  # the others wait in orbax's barrier before writing
      _remove_unfinished(self.directory)
    for bad in self._damaged + ([step] if step in manager.all_steps() else []):
      if bad in manager.all_steps():
        manager.delete(bad)
    self._damaged = []
    arrays = _saveable(state)
    if _split(arrays):  # global arrays: each process writes its own shards
      stamp = {'sha256': device_checksum(arrays, history), 'format': DEVICE_FORMAT}
    else:
      arrays = jax.device_get(arrays)
      stamp = {'sha256': checksum(arrays, history), 'format': FORMAT}
    _ignore_closed_loop_callbacks()  # a failed write's late callbacks print from threads
    try:  # a full disk: orbax's threads log the error many times over; one line instead
      with _quiet_stderr_on_failure():
        manager.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(arrays), history=ocp.args.JsonSave(history),
            checksum=ocp.args.JsonSave(stamp)))
        manager.wait_until_finished()
    except Exception as e:  # pylint: disable=broad-except
      self._manager = None  # reopened (and re-listed) by the next call
      raise UserError(_write_failure(os.path.join(self.directory, str(step)), e)) from None

  def _restore_step(self, step, like):
    """(state, history) of one step, or raises ValueError saying why it is damaged."""
    ocp = self._ocp
    # A numpy leaf of `like` (--client_state=host's table) is restored as numpy, in host
    # memory: a table too large for the device never passes through it.
    abstract = jax.tree.map(lambda a: a if isinstance(a, np.ndarray)
                            else ocp.utils.to_shape_dtype_struct(a), _saveable(like))
    try:
      with _quiet_stderr_on_failure():
        out = self._manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract), history=ocp.args.JsonRestore(),
            checksum=ocp.args.JsonRestore()))
      arrays, history, stored = dict(out.state), out.history, out.checksum
    except Exception as e:  # pylint: disable=broad-except
      _ignore_closed_loop_callbacks()
      reason = (str(e).strip().splitlines() or [type(e).__name__])[0].split(':')[0][:60]
      raise ValueError(f'unreadable: {reason}') from None
    if not isinstance(stored, dict):
      raise ValueError('checksum mismatch')
    if stored.get('format') not in (FORMAT, DEVICE_FORMAT):  # 1 had no checksum file
      raise UserError(f'--resume: the checkpoint at round {step} in {self.directory} was '
                      f'written by a newer fedjax-drift (checkpoint format '
                      f'{stored.get("format")!r}; this version reads {FORMAT} and '
                      f'{DEVICE_FORMAT}); resume it with that version')
    digest = device_checksum if stored.get('format') == DEVICE_FORMAT else checksum
    if digest is checksum and _split(arrays):
      raise UserError(f'--resume: the checkpoint at round {step} in {self.directory} was '
                      'written by one process; resume it on one process')
    if stored.get('sha256') != digest(arrays, history):
      raise ValueError('checksum mismatch')
    leaves, treedef = jax.tree.flatten(like)
    if sorted(arrays) != [f'{i:05d}' for i in range(len(leaves))]:
      raise ValueError('holds a different state structure')
    restored = [jax.random.wrap_key_data(arrays[f'{i:05d}'], impl=jax.random.key_impl(x))
                if _is_key(x) else arrays[f'{i:05d}'] for i, x in enumerate(leaves)]
    return jax.tree.unflatten(treedef, restored), history

  def restore(self, like, log=print, expect=None):
    """(state, history) of the newest intact checkpoint; `like` gives structure, shapes and
    dtypes. Damaged newer ones are reported in one line via `log` and deleted at the next
    save. Reads only: a failed restore changes nothing on disk. UserError if none is intact.

    expect: {'run_id', 'config_sha256', 'legacy'}: the checkpoint must carry this identity
    (UserError naming what differs); with 'legacy' true, one carrying none is accepted (a
    run from before the identity). None: not checked.
    """
    damaged = []
    for step in reversed(self.rounds()):
      try:
        state, history = self._restore_step(step, like)
      except UserError:  # not damage: a checkpoint this launch cannot read
        raise
      except ValueError as e:
        damaged.append((step, str(e)))
        continue
      history = dict(history) if isinstance(history, dict) else history
      found = history.pop('_run', None) if isinstance(history, dict) else None
      self._check_identity(step, found, expect)
      if damaged:
        log(f'checkpoint(s) at round {", ".join(str(s) for s, _ in damaged)} in '
            f'{self.directory} damaged ({damaged[0][1]}); resuming from round {step}')
      self._damaged = [s for s, _ in damaged]
      self.restored_round = step
      return state, history
    detail = f' (round {damaged[0][0]}: {damaged[0][1]})' if damaged else ''
    raise UserError(f'--resume: no intact checkpoint in {self.directory}{detail}; start the '
                    'run again without --resume')

  def _check_identity(self, step, found, expect):
    """UserError unless the identity `found` in checkpoint `step` is the one `expect`ed."""
    if expect is None:
      return
    where = f'--resume: the checkpoint at round {step} in {self.directory}'
    if not isinstance(found, dict):
      if expect.get('legacy'):
        return
      raise UserError(f'{where} carries no run id, so it was copied from elsewhere (or '
                      'written before fedjax-drift tied checkpoints to runs); remove it or '
                      'start a new run')
    if found.get('run_id') != expect['run_id']:
      raise UserError(f'{where} belongs to another run (run id {str(found.get("run_id"))[:12]}, '
                      f'this directory\'s is {expect["run_id"][:12]}); remove it or start a '
                      'new run')
    if found.get('config_sha256') != expect['config_sha256']:
      raise UserError(f'{where} was written with other flags than this run\'s (their sha256 '
                      f'{str(found.get("config_sha256"))[:12]}, now '
                      f'{expect["config_sha256"][:12]}); remove it or start a new run')

  def close(self):
    if self._manager is not None:
      self._manager.close()

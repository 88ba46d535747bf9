"""Checkpoints: the whole ServerState pytree plus the run's metric history, saved together.

Orbax's CheckpointManager writes each step into a temporary directory and renames it into
place when complete, so a run killed at any moment leaves only whole checkpoints behind; a
resumed run restores the state bit for bit and replays nothing. The PRNG key is stored as its
raw uint32 key data.
"""
import os

import jax

from fedjax_drift.state import ServerState


def _saveable(state: ServerState):
  return state._replace(key=jax.random.key_data(state.key))


class Checkpointer:
  """Saves and restores (state, history) under RUN_DIR/checkpoints/<round>."""

  def __init__(self, run_dir, max_to_keep=2):
    import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
    self._ocp = ocp
    self.directory = os.path.abspath(os.path.join(run_dir, 'checkpoints'))
    self._manager = ocp.CheckpointManager(
        self.directory, options=ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, create=True, enable_async_checkpointing=False))

  def latest_round(self):
    return self._manager.latest_step()

  def save(self, state: ServerState, history: dict):
    ocp = self._ocp
    self._manager.save(int(state.round), args=ocp.args.Composite(
        state=ocp.args.StandardSave(_saveable(state)), history=ocp.args.JsonSave(history)))
    self._manager.wait_until_finished()

  def restore(self, like: ServerState):
    """Returns (state, history) of the latest checkpoint; `like` gives shapes and dtypes."""
    ocp = self._ocp
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, _saveable(like))
    out = self._manager.restore(self.latest_round(), args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract), history=ocp.args.JsonRestore()))
    saved = out.state
    state = ServerState(*saved) if not isinstance(saved, ServerState) else saved
    return state._replace(key=jax.random.wrap_key_data(state.key)), out.history

  def close(self):
    self._manager.close()

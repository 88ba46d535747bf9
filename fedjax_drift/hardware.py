"""What the devices say about themselves (memory), for preflight checks."""
import jax


def device_memory_bytes(device=None):
  """Bytes of memory `device` (default: this process's first device of the default backend)
  may use, from `device.memory_stats()['bytes_limit']` (GPU and TPU report it), or None when the
  device does not say (XLA:CPU returns no memory stats: use the host's available memory)."""
  device = device if device is not None else jax.local_devices()[0]  # ours, with several
  try:
    stats = device.memory_stats()
  except (AttributeError, NotImplementedError, RuntimeError):
    return None
  limit = (stats or {}).get('bytes_limit')
  return int(limit) if limit else None

"""What the devices and the process say about their memory, for preflight checks."""
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


# Where cgroups keep a process's memory limit and use: v2 (unified), then v1.
CGROUP_FILES = (('/sys/fs/cgroup/memory.max', '/sys/fs/cgroup/memory.current'),
                ('/sys/fs/cgroup/memory/memory.limit_in_bytes',
                 '/sys/fs/cgroup/memory/memory.usage_in_bytes'))
_UNLIMITED = 1 << 60  # v1 writes "no limit" as a number near 2**63


def _read_int(path):
  """The integer in a one-line file, None for 'max', a missing or unreadable file."""
  try:
    with open(path) as f:
      text = f.read().strip()
  except OSError:
    return None
  return int(text) if text.isdigit() else None


def cgroup_memory_left(files=CGROUP_FILES):
  """Bytes this process's cgroup may still use (its limit less its use), or None when no
  limit is set or readable."""
  for limit_file, usage_file in files:
    limit = _read_int(limit_file)
    if limit is not None and limit < _UNLIMITED:
      return max(0, limit - (_read_int(usage_file) or 0))
  return None


def address_space_left():
  """Bytes of address space `ulimit -v` (RLIMIT_AS) still allows this process, or None when
  unlimited. An estimate: allocations reserve address space beyond what they touch."""
  import resource  # pylint: disable=g-import-not-at-top
  soft, _ = resource.getrlimit(resource.RLIMIT_AS)
  if soft == resource.RLIM_INFINITY:
    return None
  used = 0
  try:
    with open('/proc/self/status') as f:
      for line in f:
        if line.startswith('VmSize:'):
          used = int(line.split()[1]) * 1024
  except OSError:
    pass
  return max(0, soft - used)


def host_memory_available():
  """Bytes this process may still allocate on the host: the least of what the OS reports
  available (/proc/meminfo MemAvailable), its cgroup's limit less its use, and `ulimit -v`
  less its address space; 0 when none is known."""
  known = [n for n in (_meminfo_available(), cgroup_memory_left(), address_space_left())
           if n is not None]
  return min(known) if known else 0


def _meminfo_available():
  try:
    with open('/proc/meminfo') as f:
      for line in f:
        if line.startswith('MemAvailable:'):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return None

"""hardware.device_memory_bytes: the device's own memory limit when it reports one."""
import jax

from fedjax_drift import hardware


class _Device:
  def __init__(self, stats):
    self.stats = stats

  def memory_stats(self):
    if isinstance(self.stats, Exception):
      raise self.stats
    return self.stats


def test_reads_bytes_limit_when_the_device_reports_it():
  assert hardware.device_memory_bytes(_Device({'bytes_limit': 24e9, 'bytes_in_use': 1})) == 24e9


def test_none_when_the_device_does_not_say():
  assert hardware.device_memory_bytes(_Device(None)) is None
  assert hardware.device_memory_bytes(_Device({'bytes_in_use': 1})) is None
  assert hardware.device_memory_bytes(_Device(NotImplementedError())) is None


def test_default_device():
  got = hardware.device_memory_bytes()
  if jax.default_backend() == 'cpu':
    assert got is None  # XLA:CPU has no memory stats
  else:
    assert got > 0

"""Resources before work (issue 24 item 5): the memory preflight runs from shapes before any
state is built, and reads the limits the process really has (cgroup, ulimit -v)."""
import subprocess
import sys

import pytest

import fedjax_drift
from fedjax_drift import hardware, simulation, study
from fedjax_drift.data import federated
from helpers import tiny_config


def test_budget_refuses_before_any_state_is_built(tiny_npz, unequal_partition, tmp_path,
                                                  monkeypatch):
  def built(*_):
    raise AssertionError('the state was built before the memory preflight')
  monkeypatch.setattr(study, '_stack', built)  # stacks the runs' real states
  monkeypatch.setattr(simulation, '_compile', built)
  config = tiny_config(tiny_npz, unequal_partition, algo='scaffold', seeds=3,
                       memory_budget_gb=1e-6, out=str(tmp_path / 'r'))
  with pytest.raises(fedjax_drift.UserError,
                     match=r'MB \(data plus .* before compiling; the per-client state .*\), over --memory_budget_gb=1e-06'):
    simulation.run(config, log=lambda *_: None)
  assert not (tmp_path / 'r').exists()


def test_device_bytes_equals_what_the_study_holds(tiny_npz, unequal_partition):
  config = tiny_config(tiny_npz, unequal_partition, algo='scaffold', seeds=2)
  runs = study.plan(config)
  shared = study._load(config)  # pylint: disable=protected-access
  estimate = study.device_bytes(runs, shared, len(runs))
  built = study.build(config, runs)
  ds = shared.dataset
  tables = lambda d: federated.nbytes(d._replace(x=(), y=()))
  held = (shared.x.nbytes + ds.y_train.nbytes + ds.x_test.nbytes + ds.y_test.nbytes
          + federated.nbytes(built.state) + tables(built.data)
          + sum(federated.nbytes(e.state) + tables(e.data) for e in built.experiments))
  assert estimate == held


def test_cgroup_limits_v2_and_v1(tmp_path):
  def files(limit, usage):
    (tmp_path / 'max').write_text(limit + '\n')
    (tmp_path / 'current').write_text(usage + '\n')
    return ((str(tmp_path / 'max'), str(tmp_path / 'current')),)
  assert hardware.cgroup_memory_left(files('1000000000', '400000000')) == 600000000
  assert hardware.cgroup_memory_left(files('max', '400000000')) is None  # v2: no limit
  assert hardware.cgroup_memory_left(files('9223372036854771712', '1')) is None  # v1: none
  assert hardware.cgroup_memory_left(((str(tmp_path / 'none'), ''),)) is None


def test_ulimit_v_bounds_what_is_available():
  code = ('import resource; from fedjax_drift import hardware\n'
          'used = int([l for l in open("/proc/self/status") if l.startswith("VmSize:")][0]'
          '.split()[1]) * 1024\n'
          'resource.setrlimit(resource.RLIMIT_AS, (used + 2**30, resource.RLIM_INFINITY))\n'
          'print(hardware.address_space_left(), hardware.host_memory_available())')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                       check=True).stdout.split()
  left, available = int(out[0]), int(out[1])
  assert 0 < left <= 2**30 and available <= left


def test_paper_scale_client_table_is_refused_with_its_size(tmp_path):
  """FedADC Figs. 5-6: FedDyn with ResNet-18 on 1,000 clients keeps a 45 GB per-client table
  (11.2M float32 parameters each). The preflight refuses it from shapes, before building
  anything, and names the table's size."""
  import numpy as np
  rng = np.random.default_rng(0)
  path = tmp_path / 'c.npz'
  np.savez(path, x_train=rng.integers(0, 256, (1000, 32, 32, 3), np.uint8),
           y_train=np.arange(1000) % 10, x_test=rng.integers(0, 256, (10, 32, 32, 3), np.uint8),
           y_test=np.arange(10))
  config = fedjax_drift.Config(dataset=f'npz:{path}', model='resnet18', algo='feddyn',
                               partition='iid', num_clients=1000, clients_per_round=10, rounds=1,
                               out=str(tmp_path / 'r'))
  with pytest.raises(fedjax_drift.UserError, match=r'the per-client state of --algo=feddyn alone '
                     r'is 4[45]\.\d\d GB per run \(1,000 clients x 4[45]\.\d MB\)'):
    simulation.run(config, log=lambda *_: None)
  assert not (tmp_path / 'r').exists()

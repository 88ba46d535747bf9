"""--client_state=host: the per-client state table in host memory (issue 33 item 4).

The table stays numpy outside the compiled program and the cohort's rows go in and out each
round; everything else is the round program with the table on the device, so the results
must be bit-identical: SCAFFOLD and FedDyn, 2 of 6 clients a round (partial participation),
two seeds in one sweep, and a run stopped and resumed from its checkpoint.
"""
import csv
import re

import jax
import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import host_state
from fedjax_drift import study as study_lib
from fedjax_drift.checkpoint import Checkpointer
from fedjax_drift.errors import UserError

QUIET = dict(log=lambda *_: None)
STATEFUL = ('scaffold', 'feddyn')  # one model per client in the table


def _config(npz, out, **kw):
  base = dict(dataset=f'npz:{npz}', model='logreg', num_clients=6, clients_per_round=2,
              rounds=3, local_steps=2, local_epochs=0, batch_size=4, lr=0.1, seeds=2,
              eval_every=1, progress=False, out=str(out), save_params=str(out) + '.npz')
  base.update(kw)
  return fedjax_drift.Config(**base)


def _params(path):
  with np.load(path) as f:
    return {k: f[k] for k in f.files}


def _metrics(out):
  """metrics.csv without its wall-clock column."""
  with open(out / 'metrics.csv') as f:
    return [{k: v for k, v in row.items() if k != 'elapsed_s'} for row in csv.DictReader(f)]


def _same(a, b):
  return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize('algo', STATEFUL)
@pytest.mark.slow
def test_host_table_is_bit_identical_to_the_device_table_and_resumes(tiny_npz, tmp_path, algo):
  device, host, cut = tmp_path / 'device', tmp_path / 'host', tmp_path / 'cut'
  fedjax_drift.run(_config(tiny_npz, device, algo=algo), **QUIET)
  lines = []
  fedjax_drift.run(_config(tiny_npz, host, algo=algo, client_state='host'), log=lines.append)
  assert _same(_params(f'{device}.npz'), _params(f'{host}.npz'))
  assert _metrics(device) == _metrics(host)
  # The header states the bytes moved: 2 runs x 2 rows x 2 ways (in and out) x one row.
  header = '\n'.join(lines)
  row_bytes = int(re.search(r'per-client state 6 clients x ([\d,]+) bytes', header)[1]
                  .replace(',', ''))
  assert f'{2 * 2 * 2 * row_bytes:,} bytes per round' in header, header
  # Stopped after round 2 and resumed to 3: the checkpoint holds the whole host table.
  fedjax_drift.run(_config(tiny_npz, cut, algo=algo, client_state='host', rounds=2), **QUIET)
  like = study_lib.build(_config(tiny_npz, cut, algo=algo, client_state='host')).state
  restored, _ = Checkpointer(str(cut)).restore(like, log=lambda *_: None)
  assert all(isinstance(a, np.ndarray) for a in jax.tree.leaves(restored.clients))  # host
  fedjax_drift.resume(str(cut), rounds=3, log=lambda *_: None)
  assert _same(_params(f'{device}.npz'), _params(f'{cut}.npz'))
  assert _metrics(device) == _metrics(cut)


def test_the_table_is_numpy_and_only_the_cohort_enters_the_program(tiny_npz, tmp_path):
  config = _config(tiny_npz, tmp_path / 'x', algo='scaffold', client_state='host')
  study = study_lib.build(config)
  leaves = jax.tree.leaves(study.state.clients)
  assert leaves and all(isinstance(a, np.ndarray) and a.shape[:2] == (2, 6) for a in leaves)
  shapes = host_state.device_state(study.state, 2).clients
  assert all(s.shape[:2] == (2, 2) for s in jax.tree.leaves(shapes))
  # The cohorts the host gathers are the ones the round draws (sampling.cohort_ids).
  ids = np.asarray(host_state.cohort_program(config.clients_per_round, config.cohort_sampler)(
      study.state._replace(clients=()), study.data, study.inputs))
  assert ids.shape == (2, 2) and all(len(set(r)) == 2 for r in ids.tolist())


def test_gather_and_scatter_move_exactly_the_cohort_rows():
  table = {'c': np.arange(2 * 5 * 3, dtype=np.float32).reshape(2, 5, 3)}
  ids = np.array([[4, 1], [0, 2]])
  rows = host_state.gather(table, ids)
  np.testing.assert_array_equal(rows['c'][0], table['c'][0, [4, 1]])
  np.testing.assert_array_equal(rows['c'][1], table['c'][1, [0, 2]])
  before = table['c'].copy()
  host_state.scatter(table, ids, {'c': rows['c'] + 100})
  changed = before != table['c']
  assert changed[0, [1, 4]].all() and changed[1, [0, 2]].all()
  assert changed.sum() == 2 * 2 * 3  # those rows, and nothing else
  assert host_state.bytes_per_round(table, 2) == 2 * 2 * 2 * 3 * 4


def test_a_table_over_the_device_budget_runs_in_host_memory(tiny_npz, tmp_path):
  """The budget refuses the table on the device, naming it; in host memory it runs."""
  kw = dict(algo='scaffold', model='mlp', num_clients=30, partition='iid', seeds=1, rounds=1,
            memory_budget_gb=0.004)  # the mlp's c_i: 30 x 170 KB = 5.1 MB
  with pytest.raises(UserError, match='per-client state of --algo=scaffold alone is 5.1'):
    fedjax_drift.run(_config(tiny_npz, tmp_path / 'device', **kw), **QUIET)
  summary = fedjax_drift.run(_config(tiny_npz, tmp_path / 'host', client_state='host', **kw),
                             **QUIET)
  assert summary['runs'][0]['final_accuracy'] >= 0


def test_host_table_refuses_several_devices():
  with pytest.raises(UserError, match='--client_state=host runs on one device'):
    fedjax_drift.Config(client_state='host', devices=2, clients_per_round=2).validate()

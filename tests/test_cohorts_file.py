"""--cohorts=file:PATH: a run replays a given cohort sequence instead of sampling one."""
import dataclasses
import json
import os
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import run_data, sampling, saved, simulation
from fedjax_drift import study as study_lib
from fedjax_drift.errors import UserError
from helpers import run_rounds, tiny_config

QUIET = dict(log=lambda *_: None)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _config(npz, **kw):
  base = dict(dataset=f'npz:{npz}', partition='dirichlet', dirichlet_alpha=1.0, model='logreg',
              num_clients=6, clients_per_round=3, rounds=3, eval_every=1, local_steps=2,
              local_epochs=0, batch_size=4, lr=0.1, progress=False)
  base.update(kw)
  return fedjax_drift.Config(**base)


def _write(path, cohorts):
  path.write_text(json.dumps([[int(i) for i in c] for c in cohorts]))
  return f'file:{path}'


def _sampled(exp, rounds):
  """The cohorts the uniform sampler draws in rounds 0..rounds-1 (engine's key derivation)."""
  return [np.asarray(sampling.sample_cohort(
      jax.random.fold_in(jax.random.fold_in(exp.state.key, t), 0), len(exp.train_parts),
      exp.config.clients_per_round)) for t in range(rounds)]


def _used_ids(exp, cohorts, rounds):
  """The ids each round actually trained, read from the engine's diagnostics."""
  round_fn = jax.jit(study_lib.scheduled_round(
      exp.config, exp.model, exp.server_data, exp.schedule, exp.max_local_steps, exp.chunk,
      exp.scenario, exp.pipeline, client_probe=lambda p, c: 0.0, cohorts=cohorts))
  state, used = exp.state, []
  for _ in range(rounds):
    state, metrics = round_fn(state, exp.data)
    used.append(np.asarray(metrics['diag']['ids']).tolist())
  return used


def test_rounds_train_the_files_cohorts(tiny_npz, tmp_path):
  cohorts = [[5, 0, 2], [1, 3, 4], [2, 5, 1], [0, 1, 2]]
  exp = study_lib.prepare(_config(tiny_npz, cohorts=_write(tmp_path / 'c.json', cohorts)))
  assert _used_ids(exp, np.asarray(cohorts), 3) == cohorts[:3]


def test_the_samplers_cohorts_from_a_file_give_the_sampled_run_bit_for_bit(tiny_npz, tmp_path):
  sampled = study_lib.prepare(_config(tiny_npz))
  path = _write(tmp_path / 'c.json', _sampled(sampled, 3))
  replayed = study_lib.prepare(_config(tiny_npz, cohorts=path))
  other = study_lib.prepare(_config(tiny_npz, cohorts=_write(
      tmp_path / 'd.json', [[0, 1, 2]] * 3)))
  a, b, c = (run_rounds(e, 3).params for e in (sampled, replayed, other))
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(x, y)
  assert any(not np.array_equal(x, z) for x, z in zip(jax.tree.leaves(a), jax.tree.leaves(c)))


@pytest.mark.slow
def test_sweep_runs_use_the_file_as_lone_runs_do(tiny_npz, tmp_path):
  cohorts = [[5, 0, 2], [1, 3, 4], [2, 5, 1]]
  path = _write(tmp_path / 'c.json', cohorts)
  config = _config(tiny_npz, cohorts=path, seeds=2, grid='lr:0.05,0.1',
                   out=str(tmp_path / 'sweep'), save_params=str(tmp_path / 'sweep.npz'))
  simulation.run(config, **QUIET)
  runs = study_lib.plan(config)
  assert len(runs) == 4
  for spec in runs:
    lone = run_rounds(study_lib.prepare(dataclasses.replace(
        spec.config, seeds=1, grid='', out='', save_params='')), 3).params
    got = saved.read(str(tmp_path / 'sweep.npz'), spec.index)
    leaves = jax.tree_util.tree_flatten_with_path(lone)[0]
    assert len(leaves) == len(got)
    for key_path, leaf in leaves:
      name = '/'.join(str(getattr(k, 'key', k)) for k in key_path)
      np.testing.assert_allclose(got[name], leaf, rtol=1e-6, atol=1e-7)


def test_resume_continues_the_files_cohorts_exactly(tiny_npz, tmp_path):
  path = _write(tmp_path / 'c.json', [[5, 0, 2], [1, 3, 4], [2, 5, 1], [4, 0, 3]])
  common = dict(cohorts=path, checkpoint_every=1)
  simulation.run(_config(tiny_npz, rounds=4, out=str(tmp_path / 'straight'),
                         save_params=str(tmp_path / 'a.npz'), **common), **QUIET)
  simulation.run(_config(tiny_npz, rounds=2, out=str(tmp_path / 'split'), **common), **QUIET)
  simulation.resume(str(tmp_path / 'split'), rounds=4, save_params=str(tmp_path / 'b.npz'),
                    **QUIET)
  a, b = saved.read(str(tmp_path / 'a.npz')), saved.read(str(tmp_path / 'b.npz'))
  assert a.keys() == b.keys()
  for name in a:
    np.testing.assert_array_equal(a[name], b[name])
  (tmp_path / 'c.json').write_text(json.dumps([[0, 1, 2]] * 4))
  with pytest.raises(UserError, match='--cohorts'):
    simulation.resume(str(tmp_path / 'split'), rounds=4, **QUIET)


@pytest.mark.parametrize('content,match', [
    ([[0, 1, 2]] * 2, r'2 cohorts for --rounds=3'),
    ([[0, 1]] * 3, r"round 0's cohort has 2 clients, --clients_per_round=3"),
    ([[0, 1, 2], [0, 1, 1], [0, 1, 2]], r"round 1's cohort names a client twice"),
    ([[0, 1, 2], [0, 1, -1], [0, 1, 2]], r"round 1's cohort holds a value"),
    ({'a': 1}, r'expected a JSON list'),
])
def test_bad_files_are_one_line_errors_naming_the_flag(tmp_path, content, match):
  (tmp_path / 'c.json').write_text(json.dumps(content))
  with pytest.raises(UserError, match=match) as e:
    run_data.read_cohorts(str(tmp_path / 'c.json'), 3, 3)
  assert str(e.value).startswith('--cohorts=file:') and '\n' not in str(e.value)
  with pytest.raises(UserError, match='does not exist'):
    run_data.read_cohorts(str(tmp_path / 'none.json'), 3, 3)


def test_ids_outside_the_partition_and_conflicting_flags(tiny_npz, tmp_path):
  path = _write(tmp_path / 'c.json', [[0, 1, 2], [0, 1, 6], [0, 1, 2]])
  with pytest.raises(UserError, match=r"round 1's cohort names client 6, but "
                     r'--partition=dirichlet has 6 clients'):
    study_lib.prepare(_config(tiny_npz, cohorts=path))
  with pytest.raises(UserError, match='--cohorts=c.json must be file:PATH'):
    _config(tiny_npz, cohorts='c.json').validate()
  with pytest.raises(UserError, match='--cohort_sampler=cover_classes'):
    _config(tiny_npz, cohorts=path, cohort_sampler='cover_classes').validate()


# Two processes of one CPU device each (as tests/test_distributed.py launches them).
TWO_PROCESSES = '''
import sys
sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
import fedjax_drift
from helpers import tiny_config
pid, port = sys.argv[1:]
config = tiny_config({npz!r}, {parts!r}, model='mlp', clients_per_round=4, batch_size=4,
                     local_steps=2, rounds=3, eval_every=3, cohorts={cohorts!r},
                     out={out!r}, save_params={out!r} + '.npz',
                     coordinator_address='localhost:' + port, num_processes=2,
                     process_id=int(pid))
fedjax_drift.run(config)
print('OK', pid)
'''


@pytest.mark.slow
def test_two_processes_replay_the_file_as_one(tiny_npz, tmp_path):
  # Eight clients, four per round (two per process): the file's cohorts decide who trains.
  parts = tmp_path / 'parts.json'
  parts.write_text(json.dumps([p.tolist() for p in np.array_split(
      np.random.default_rng(1).permutation(60), 8)]))
  parts = str(parts)
  cohorts = _write(tmp_path / 'c.json', [[7, 0, 3, 5], [1, 2, 4, 6], [0, 2, 5, 7]])
  out = str(tmp_path / 'two')
  code = TWO_PROCESSES.format(root=ROOT, tests=os.path.join(ROOT, 'tests'), npz=tiny_npz,
                              parts=parts, cohorts=cohorts, out=out)
  with socket.socket() as s:
    s.bind(('localhost', 0))
    port = str(s.getsockname()[1])
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  env.pop('XLA_FLAGS', None)  # one CPU device per process
  procs = [subprocess.Popen([sys.executable, '-c', code, str(i), port], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env) for i in range(2)]
  try:
    results = [p.communicate(timeout=600) for p in procs]
  finally:
    for p in procs:  # only ours, by handle
      if p.poll() is None:
        p.kill()
        p.communicate()
  for i, (p, (stdout, stderr)) in enumerate(zip(procs, results)):
    assert p.returncode == 0 and f'OK {i}' in stdout, stderr[-3000:]
  one = {}
  for name, path in (('same', cohorts),
                     ('other', _write(tmp_path / 'd.json', [[0, 1, 2, 3]] * 3))):
    simulation.run(tiny_config(tiny_npz, parts, model='mlp', clients_per_round=4,
                               batch_size=4, local_steps=2, rounds=3, eval_every=3,
                               cohorts=path, out=str(tmp_path / name),
                               save_params=str(tmp_path / f'{name}.npz')), **QUIET)
    one[name] = saved.read(str(tmp_path / f'{name}.npz'))
  two = saved.read(out + '.npz')
  for name in two:
    np.testing.assert_allclose(two[name], one['same'][name], rtol=1e-5, atol=1e-5)
  assert any(not np.allclose(two[n], one['other'][n], rtol=1e-3) for n in two)

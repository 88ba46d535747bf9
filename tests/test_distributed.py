"""One simulation over two processes on localhost (jax.distributed, CPU, gloo collectives).

Each test starts two Python processes (process 0 and 1, one CPU device each) on a free port,
so the cohort is split over 2 global devices and per-client tables over the two processes.
"""
import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import rundir
from fedjax_drift.checkpoint import Checkpointer
from helpers import tiny_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# argv: process id, port, run dir, algo, rounds, mode ('run', 'resume' or 'rows')
SCRIPT = textwrap.dedent('''
    import sys
    sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
    import numpy as np
    import fedjax_drift
    from helpers import tiny_config
    pid, port, out, algo, rounds, mode = sys.argv[1:]
    launch = dict(coordinator_address='localhost:' + port, num_processes=2,
                  process_id=int(pid))
    config = tiny_config({npz!r}, {parts!r}, algo=algo, model='mlp', clients_per_round=4,
                         batch_size=4, local_steps=0, local_epochs=1, rounds=int(rounds),
                         eval_every=2, out=out, save_params=out + '.npz', **launch)
    if mode == 'resume':
      fedjax_drift.resume(out, rounds=int(rounds), save_params=out + '.npz', **launch)
    else:
      fedjax_drift.run(config)
    if mode == 'rows':  # the checkpointed client table as this process holds it
      import jax
      from fedjax_drift import distributed
      from fedjax_drift.checkpoint import Checkpointer
      study = distributed.place(fedjax_drift.build(distributed.setup(config)))
      state, _ = Checkpointer(out).restore(study.state)
      rows = {{}}
      for i, leaf in enumerate(jax.tree.leaves(state.clients)):
        (shard,) = leaf.addressable_shards
        assert shard.data.shape[1] == leaf.shape[1] // 2, (shard.data.shape, leaf.shape)
        rows[f'{{i}}'] = np.asarray(shard.data)
        rows[f'{{i}}_start'] = np.int64(shard.index[1].start)
      np.savez(out + f'.rows{{pid}}.npz', **rows)
    print('OK', pid)
''')


def _free_port():
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


def launch_two(argv, timeout=600):
  """Runs argv(process_id, port) as processes 0 and 1 on one free localhost port, one CPU
  device each; returns [(returncode, stdout, stderr)] of each (killing only ours if stuck)."""
  port = str(_free_port())
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  env.pop('XLA_FLAGS', None)  # one CPU device per process
  procs = [subprocess.Popen(argv(i, port), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env) for i in range(2)]
  results = []
  try:
    for p in procs:
      results.append(p.communicate(timeout=timeout))
  finally:
    for p in procs:  # only ours, by handle
      if p.poll() is None:
        p.kill()
        p.communicate()
  return [(p.returncode,) + r for p, r in zip(procs, results)]


def _launch(tiny_npz, parts, out, algo, rounds, mode='run'):
  """Runs SCRIPT as process 0 and 1; returns [(returncode, stdout, stderr)] of each."""
  code = SCRIPT.format(root=ROOT, tests=os.path.join(ROOT, 'tests'), npz=tiny_npz, parts=parts)
  return launch_two(lambda i, port: [sys.executable, '-c', code, str(i), port, str(out), algo,
                                     str(rounds), mode])


def _two_processes(tiny_npz, parts, out, algo, rounds, mode='run'):
  """Runs SCRIPT as process 0 and 1; asserts both finish; returns their stdout."""
  results = _launch(tiny_npz, parts, out, algo, rounds, mode)
  for i, (code, stdout, stderr) in enumerate(results):
    assert code == 0 and f'OK {i}' in stdout, f'process {i}:\n{stderr[-3000:]}'
  return [r[1] for r in results]


def test_every_process_refuses_a_taken_out(tiny_npz, unequal_partition, tmp_path):
  """--out holding someone else's file: both processes refuse before anything is written."""
  out = tmp_path / 'taken'
  out.mkdir()
  (out / 'notes.txt').write_text('mine')
  for code, _, stderr in _launch(tiny_npz, unequal_partition, out, 'fedavg', 2):
    assert code != 0 and 'already exists; pass --overwrite' in stderr, stderr[-2000:]
  assert os.listdir(out) == ['notes.txt']


def _params(path):
  with np.load(path) as f:
    return {k: f[k] for k in f.files}


def _assert_close(a, b, tol):
  assert sorted(a) == sorted(b)
  for name in a:
    np.testing.assert_allclose(a[name], b[name], rtol=tol, atol=tol, err_msg=name)


@pytest.fixture(scope='module')
def two_process_scaffold(tiny_npz, unequal_partition, tmp_path_factory):
  """One uninterrupted two-process SCAFFOLD run of 4 rounds, shared by the two tests that
  compare against it (a launch of two processes is most of each one's time): (its run
  directory, whose parameters are at RUN_DIR.npz, and each process's stdout). Its own empty
  dataset cache and home, as hermetic_environment gives a test."""
  root = tmp_path_factory.mktemp('two_process_scaffold')
  with pytest.MonkeyPatch.context() as patch:
    patch.setenv('FEDJAX_DRIFT_CACHE', str(root / 'cache'))
    patch.setenv('HOME', str(root))
    out = root / 'two'
    return out, _two_processes(tiny_npz, unequal_partition, out, 'scaffold', 4)


@pytest.mark.slow
def test_two_processes_equal_one(tiny_npz, unequal_partition, tmp_path, two_process_scaffold):
  """SCAFFOLD (a per-client table, split over the processes) on 2 processes x 1 device gives
  the final parameters of 1 process x 1 device; process 0 alone writes the run directory."""
  two, outputs = two_process_scaffold
  assert 'distributed: 2 processes, 2 global devices' in outputs[0]
  assert 'fedjax-drift' not in outputs[1] and 'done:' not in outputs[1]  # process 1 is quiet
  fedjax_drift.run(tiny_config(tiny_npz, unequal_partition, algo='scaffold', model='mlp',
                               clients_per_round=4, batch_size=4, local_steps=0,
                               local_epochs=1, rounds=4, eval_every=2,
                               out=str(tmp_path / 'one'), save_params=str(tmp_path / 'one.npz')),
                   log=lambda *a: None)
  _assert_close(_params(f'{two}.npz'), _params(tmp_path / 'one.npz'), 1e-5)
  saved = rundir.read_run_config(str(two))
  assert saved['devices'] == 2 and saved['_resolved']['num_clients'] == 4
  assert {'summary.json', 'metrics.csv', 'runs.csv'} <= set(os.listdir(two))


@pytest.mark.slow
def test_split_table_round_trips_through_a_checkpoint(tiny_npz, unequal_partition, tmp_path,
                                                      two_process_scaffold):
  """A SCAFFOLD table split over two processes is checkpointed (each process writes its rows),
  read back split the same way and whole by one process, and a two-process resume from
  round 2 to 4 equals an uninterrupted two-process run of 4 rounds (two_process_scaffold)."""
  out = tmp_path / 'run'
  _two_processes(tiny_npz, unequal_partition, out, 'scaffold', 2, mode='rows')
  # One process reads the same checkpoint whole: the rows each process held, side by side.
  exp_config = tiny_config(tiny_npz, unequal_partition, algo='scaffold', model='mlp',
                           clients_per_round=4, batch_size=4, local_steps=0, local_epochs=1)
  study = fedjax_drift.build(exp_config)
  whole, _ = Checkpointer(str(out)).restore(study.state)
  import jax  # pylint: disable=g-import-not-at-top
  for i, leaf in enumerate(jax.tree.leaves(whole.clients)):
    parts = []
    for pid in range(2):
      with np.load(f'{out}.rows{pid}.npz') as rows:
        parts.append((int(rows[f'{i}_start']), rows[f'{i}']))
    joined = np.concatenate([p for _, p in sorted(parts, key=lambda t: t[0])], axis=1)
    np.testing.assert_array_equal(joined, np.asarray(leaf))
  assert np.any(np.abs(np.asarray(jax.tree.leaves(whole.clients)[0])) > 0)  # trained rows
  _two_processes(tiny_npz, unequal_partition, out, 'scaffold', 4, mode='resume')
  straight, _ = two_process_scaffold
  _assert_close(_params(f'{out}.npz'), _params(f'{straight}.npz'), 1e-6)


def test_launch_flags_checked_and_off_by_default(monkeypatch):
  """One process by default (JAX untouched); contradictory launch flags are refused."""
  from fedjax_drift import distributed  # pylint: disable=g-import-not-at-top
  for name in ('SLURM_JOB_ID', 'OMPI_MCA_orte_hnp_uri', 'OMPI_COMM_WORLD_SIZE'):
    monkeypatch.delenv(name, raising=False)
  assert not distributed.wanted(fedjax_drift.Config())
  assert distributed.wanted(fedjax_drift.Config(num_processes=2, process_id=1,
                                                coordinator_address='localhost:1'))
  assert distributed.wanted(fedjax_drift.Config(distributed='on'))
  for bad, says in ((dict(distributed='off', num_processes=2), 'contradicts'),
                    (dict(num_processes=2, process_id=2), 'must be below'),
                    (dict(num_processes=-1), 'must be >= 1')):
    with pytest.raises(fedjax_drift.UserError, match=says):
      distributed.wanted(fedjax_drift.Config(**bad))


# The start-up bound the tests of a missing or duplicate peer run under (seconds, through
# $FEDJAX_DRIFT_INIT_TIMEOUT_S): what they check is the same at 10 s as at the default 60 s.
SHORT_INIT_S = 10


def _cli_pair(tiny_npz, parts, out, extra=((), ()), timeout=300, env_extra=None):
  """Two command-line processes of one run; extra: flags for process 0 and for process 1;
  env_extra: environment variables set for both. Returns [(returncode, stderr, seconds)]."""
  import time  # pylint: disable=g-import-not-at-top
  port = str(_free_port())
  env = dict(os.environ, JAX_PLATFORMS='cpu', **(env_extra or {}))
  env.pop('XLA_FLAGS', None)
  common = [f'--dataset=npz:{tiny_npz}', f'--partition=file:{parts}', '--model=logreg',
            '--num_clients=4', '--clients_per_round=4', '--rounds=2', '--progress=false',
            f'--coordinator_address=localhost:{port}', '--num_processes=2']
  start = time.time()
  procs = [subprocess.Popen([sys.executable, os.path.join(ROOT, 'experiments', 'run.py'),
                             *common, f'--process_id={i}', f'--out={out}', *extra[i]],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env) for i in range(2)]
  results = []
  try:
    for p in procs:
      _, err = p.communicate(timeout=timeout)
      results.append((p.returncode, err, time.time() - start))
  finally:
    for p in procs:  # only ours, by handle
      if p.poll() is None:
        p.kill()
        p.communicate()
  return results


@pytest.mark.slow
@pytest.mark.parametrize('flag', ['--lr=0.5', '--out=OTHER'])
def test_processes_with_different_flags_refuse_on_every_process(tiny_npz, unequal_partition,
                                                                tmp_path, flag):
  """--lr (or --out) given to one process only: both refuse in one line naming it, and
  nothing is trained."""
  out = tmp_path / 'run'
  flag = flag.replace('OTHER', str(tmp_path / 'other'))
  from fedjax_drift import distributed  # pylint: disable=g-import-not-at-top
  for code, err, took in _cli_pair(tiny_npz, unequal_partition, out, ((), (flag,))):
    lines = err.strip().splitlines()
    name = flag.split('=')[0]
    assert code == 2 and len(lines) == 1 and f'{name} differs between processes' in lines[0], err
    assert took <= distributed.INIT_TIMEOUT_S + distributed.AGREE_TIMEOUT_S, took
  assert not (out / 'summary.json').exists()


@pytest.mark.slow
def test_a_missing_peer_ends_start_up_within_the_bound(tiny_npz, unequal_partition, tmp_path):
  """Only process 0 of 2 starts: one line, exit 2, after the start-up bound (here
  SHORT_INIT_S through $FEDJAX_DRIFT_INIT_TIMEOUT_S, distributed.INIT_TIMEOUT_S unset)."""
  import time  # pylint: disable=g-import-not-at-top
  from fedjax_drift import distributed  # pylint: disable=g-import-not-at-top
  env = dict(os.environ, JAX_PLATFORMS='cpu', **{distributed.INIT_TIMEOUT_ENV: str(SHORT_INIT_S)})
  env.pop('XLA_FLAGS', None)
  start = time.time()
  result = subprocess.run(
      [sys.executable, os.path.join(ROOT, 'experiments', 'run.py'),
       f'--dataset=npz:{tiny_npz}', f'--partition=file:{unequal_partition}', '--model=logreg',
       '--num_clients=4', '--clients_per_round=4', '--rounds=1', '--progress=false',
       f'--coordinator_address=localhost:{_free_port()}', '--num_processes=2',
       '--process_id=0', f'--out={tmp_path / "run"}'],
      capture_output=True, text=True, env=env, timeout=SHORT_INIT_S + 120)
  took = time.time() - start
  lines = result.stderr.strip().splitlines()
  assert result.returncode == 2 and len(lines) == 1 and 'joined' in lines[0], result.stderr
  assert f'within {SHORT_INIT_S}s' in lines[0], lines
  assert SHORT_INIT_S <= took <= SHORT_INIT_S + 60


def test_the_start_up_bound_is_read_from_the_environment(monkeypatch):
  """$FEDJAX_DRIFT_INIT_TIMEOUT_S sets the start-up bound; unset, INIT_TIMEOUT_S; a value
  that is not whole seconds > 0 is one line naming the variable."""
  from fedjax_drift import distributed  # pylint: disable=g-import-not-at-top
  monkeypatch.delenv(distributed.INIT_TIMEOUT_ENV, raising=False)
  assert distributed.init_timeout_s() == distributed.INIT_TIMEOUT_S == 60
  monkeypatch.setenv(distributed.INIT_TIMEOUT_ENV, '7')
  assert distributed.init_timeout_s() == 7
  for bad in ('0', '-3', '1.5', 'soon'):
    monkeypatch.setenv(distributed.INIT_TIMEOUT_ENV, bad)
    with pytest.raises(fedjax_drift.UserError, match=r'\$FEDJAX_DRIFT_INIT_TIMEOUT_S='):
      distributed.init_timeout_s()


# What JAX 0.10's runtime writes on a survivor when its peer dies (abridged from real runs).
WORKER_DIED = (
    b'E1123 23:07:17.671510   29318 coordination_service.cc:1549] [59579] Use error polling to '
    b'propagate the following error to all tasks: UNAVAILABLE: The following tasks are '
    b'unhealthy (stopped sending heartbeats):\n1\nThe tasks have crashed. Check the task logs.\n'
    b'F1123 23:07:17.672281   29293 client.h:80] Terminating process because the JAX '
    b'distributed service detected fatal errors.\n*** Check failure stack trace: ***\n'
    b'    @     0x7f5ea6020634  absl::log_internal::LogMessage::SendToLog()\n')
COORDINATOR_DIED = (
    b'E1123 23:08:14.214849   29822 coordination_service_agent.cc:289] Polled an error from '
    b'coordination service (this can be an error from this or another task).\n'
    b'F1123 23:08:14.215052   29822 client.h:80] Terminating process because the JAX '
    b'distributed service detected fatal errors. absl::Status: UNAVAILABLE: Failed to send RPC '
    b'to coordination service. Either the leader task was preempted/died/restarted.\n'
    b'*** Check failure stack trace: ***\n    @     0x7f5ea6020634  (unknown)\n')


def _watched(data, me):
  """peerwatch.watch over `data` (as the run's stderr); returns (what it wrote, its line)."""
  import io  # pylint: disable=g-import-not-at-top
  from fedjax_drift import peerwatch  # pylint: disable=g-import-not-at-top
  read, write = os.pipe()
  os.write(write, data)
  os.close(write)
  sink = io.BytesIO()
  with os.fdopen(read, 'rb') as source:
    found = peerwatch.watch(source, sink, me, 30)
  return sink.getvalue().decode(), found


def test_peerwatch_turns_the_runtime_abort_into_one_line():
  out, found = _watched(b'warning: something of ours\n' + WORKER_DIED, me=0)
  assert out.splitlines() == ['warning: something of ours', found]
  assert found.startswith('error: process 1 of this multi-process run stopped')
  assert 'process 0 ended too' in found
  out, found = _watched(b'\rround 3/9\rround 4/9' + COORDINATOR_DIED, me=1)
  assert out == '\rround 3/9\rround 4/9' + found + '\n'
  assert 'process 0 of this multi-process run (the coordinator)' in found
  # The run's own error line says what happened: the runtime's lines are not added to it.
  out, _ = _watched(b'E1123 23:07:17.671510 29318 x.cc:1] joined late\nerror: one line\n', 0)
  assert out == 'error: one line\n'
  # Nothing fatal and no error of ours: the runtime's lines are kept, written at the end.
  runtime = b'W1123 23:07:17.671510   29318 x.cc:1] a warning\nits second line\n'
  out, found = _watched(runtime + b'warning: ours\n', 0)
  assert out == 'warning: ours\n' + runtime.decode() and found == ''


def _pair_killed(tiny_npz, parts, out, victim):
  """Two command-line processes of one long run; SIGKILL `victim` after a few evaluations.
  Returns the survivor's (returncode, stderr, seconds from the kill to its end)."""
  import signal  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  from fedjax_drift import distributed  # pylint: disable=g-import-not-at-top
  port = str(_free_port())
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  env.pop('XLA_FLAGS', None)
  common = [f'--dataset=npz:{tiny_npz}', f'--partition=file:{parts}', '--model=logreg',
            '--num_clients=4', '--clients_per_round=4', '--rounds=100000', '--eval_every=1',
            '--checkpoint_every=1000000', '--progress=false', f'--out={out}',
            f'--coordinator_address=localhost:{port}', '--num_processes=2']
  procs = [subprocess.Popen([sys.executable, os.path.join(ROOT, 'experiments', 'run.py'),
                             *common, f'--process_id={i}'], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=env) for i in range(2)]
  try:
    metrics, deadline = out / 'metrics.csv', time.time() + 300
    while not (metrics.exists() and len(metrics.read_text().splitlines()) > 4):
      assert time.time() < deadline and all(p.poll() is None for p in procs), 'no rounds ran'
      time.sleep(0.1)
    procs[victim].send_signal(signal.SIGKILL)
    killed = time.time()
    survivor = procs[1 - victim]
    _, err = survivor.communicate(timeout=distributed.PEER_BOUND_S + 60)
    return survivor.returncode, err.decode(), time.time() - killed
  finally:
    for p in procs:  # only ours, by handle
      if p.poll() is None:
        p.kill()
      p.communicate()


@pytest.mark.slow
@pytest.mark.parametrize('victim', [1, 0])
def test_a_peer_killed_mid_run_ends_the_other_with_one_line(tiny_npz, unequal_partition,
                                                             tmp_path, victim):
  """SIGKILL of a worker (1: noticed after the heartbeat timeout) or of the coordinator (0:
  at once): the survivor ends non-zero within distributed.PEER_BOUND_S, its standard error
  one line naming the dead process, no stack trace."""
  from fedjax_drift import distributed  # pylint: disable=g-import-not-at-top
  code, err, took = _pair_killed(tiny_npz, unequal_partition, tmp_path / 'run', victim)
  lines = err.strip().splitlines()
  assert code != 0 and len(lines) == 1, err[-3000:]
  assert f'error: process {victim} of this multi-process run' in lines[0], lines
  assert took <= distributed.PEER_BOUND_S, took


@pytest.mark.slow
def test_a_duplicate_process_id_ends_both_with_one_line(tiny_npz, unequal_partition, tmp_path):
  """Both processes given --process_id=0: each ends within the start-up bound (here
  SHORT_INIT_S through $FEDJAX_DRIFT_INIT_TIMEOUT_S), one line."""
  from fedjax_drift import distributed  # pylint: disable=g-import-not-at-top
  results = _cli_pair(tiny_npz, unequal_partition, tmp_path / 'run',
                      ((), ('--process_id=0',)), timeout=SHORT_INIT_S + 120,
                      env_extra={distributed.INIT_TIMEOUT_ENV: str(SHORT_INIT_S)})
  for code, err, took in results:
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1 and lines[0].startswith('error: '), err[-3000:]
    assert took <= SHORT_INIT_S + 30, took


def test_peerwatch_reduces_any_runtime_abort_to_one_line():
  """A fatal end that names no dead peer (here a task whose registration was cancelled, as
  with two processes given one --process_id) is one line with the runtime's status."""
  text = (b'W1123 23:16:50.632170    4048 coordination_service.cc:388] [1480] '
          b'ConnectAfterBarrierPasses: CANCELLED: /RegisterTask\n'
          b'F1123 23:16:50.632300    4048 client.h:80] Terminating process because the JAX '
          b'distributed service detected fatal errors. absl::Status: CANCELLED: RegisterTask\n'
          b'*** Check failure stack trace: ***\n    @     0x7f291c9040ee  Connect()\n')
  out, found = _watched(text, me=0)
  assert out == found + '\n' and len(out.splitlines()) == 1
  assert found == ("error: JAX's distributed runtime ended process 0 (a duplicate "
                   '--process_id?): CANCELLED: RegisterTask')

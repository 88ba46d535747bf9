"""SIGTERM to one process of a multi-process run stops every process, each with one line
(issue 34 item 3): JAX's pre-emption service, which took the signal from the Python handler
and let both processes train on, is off; the signalled process stops with its line (exit
143) and the other ends with peerwatch's line within distributed.PEER_BOUND_S."""
import os
import signal
import subprocess
import sys
import time

import pytest

from fedjax_drift import distributed
from test_distributed import ROOT, _free_port


@pytest.mark.slow
def test_sigterm_to_one_process_stops_both_with_one_line(tiny_npz, unequal_partition,
                                                         tmp_path):
  out = tmp_path / 'run'
  port = str(_free_port())
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  env.pop('XLA_FLAGS', None)
  common = [f'--dataset=npz:{tiny_npz}', f'--partition=file:{unequal_partition}',
            '--model=logreg', '--num_clients=4', '--clients_per_round=4', '--rounds=100000',
            '--eval_every=1', '--checkpoint_every=5', '--progress=false', f'--out={out}',
            f'--coordinator_address=localhost:{port}', '--num_processes=2']
  procs = [subprocess.Popen([sys.executable, os.path.join(ROOT, 'experiments', 'run.py'),
                             *common, f'--process_id={i}'], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env) for i in range(2)]
  try:
    metrics, deadline = out / 'metrics.csv', time.time() + 300
    while not (metrics.exists() and len(metrics.read_text().splitlines()) > 4):
      assert time.time() < deadline and all(p.poll() is None for p in procs), 'no rounds ran'
      time.sleep(0.1)
    procs[1].send_signal(signal.SIGTERM)
    sent = time.time()
    ends = [p.communicate(timeout=distributed.PEER_BOUND_S + 60) for p in procs]
    took = time.time() - sent
  finally:
    for p in procs:  # only ours, by handle
      if p.poll() is None:
        p.kill()
        p.communicate()
  errs = [err for _, err in ends]
  for err in errs:
    assert len(err.strip().splitlines()) == 1 and 'Traceback' not in err, errs
  assert procs[1].returncode == 143 and 'stopped by SIGTERM' in errs[1], errs
  assert procs[0].returncode != 0 and 'process 1 of this multi-process run' in errs[0], errs
  assert took <= distributed.PEER_BOUND_S + 15, took

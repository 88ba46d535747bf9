"""benchmarks/bench.py: paired ratios and their spread, and a quick interleaved run end to end."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, 'benchmarks', 'bench.py')


def _bench():
  spec = importlib.util.spec_from_file_location('bench', BENCH)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _run(impl, rep, rate, rss=1.0):
  return dict(workload='logreg_k4', implementation=impl, rep=rep, sample_grads_per_s=rate,
              peak_rss_gb=rss, compile_s=1.0)


def test_ratios_are_paired_by_repetition_with_median_and_spread():
  bench = _bench()
  # The machine drifts: torch is 2x faster in rep 1, and so is the engine; paired ratios
  # stay 2.0 although the medians of the rates alone would say otherwise.
  runs = [_run('engine-seq', 0, 200.0, 2.0), _run('torch-loop', 0, 100.0),
          _run('engine-seq', 1, 400.0, 2.0), _run('torch-loop', 1, 200.0),
          _run('engine-seq', 2, 330.0, 3.0), _run('torch-loop', 2, 110.0),
          dict(workload='logreg_k4', implementation='jit-loop', rep=0, error='boom')]
  rows = {r['implementation']: r for r in bench.summarise(runs, [{'peak_gflops': 100.0}])}
  engine = rows['engine-seq']
  assert engine['vs_torch_loop']['median'] == pytest.approx(2.0)
  assert (engine['vs_torch_loop']['min'], engine['vs_torch_loop']['max']) == pytest.approx((2.0, 3.0))
  assert engine['vs_torch_loop']['n'] == 3
  assert engine['sample_grads_per_s']['median'] == pytest.approx(330.0)
  assert engine['rss_vs_torch_loop']['median'] == pytest.approx(2.0)
  assert engine['vs_jit_loop'] is None  # the jit-loop failed: no ratio, not a wrong one
  assert rows['jit-loop']['ok'] == 0 and rows['jit-loop']['errors'] == ['boom']
  table = bench.markdown(list(rows.values()))
  assert '| logreg_k4 | engine-seq | 330 |' in table and '2.00x [2.00–3.00]' in table


@pytest.mark.slow
def test_quick_run_interleaves_and_writes_raw_json(tmp_path):
  out = tmp_path / 'bench.json'
  impls = ['engine-seq', 'jit-loop']
  try:
    import torch  # pylint: disable=g-import-not-at-top,unused-import
    impls.append('torch-loop')
  except ImportError:  # torch is the [bench] extra
    pass
  result = subprocess.run([sys.executable, BENCH, '--quick', '--workloads=logreg_k4',
                           f'--impls={",".join(impls)}', f'--out={out}'],
                          capture_output=True, text=True, cwd=ROOT, timeout=900)
  assert result.returncode == 0, result.stderr[-3000:]
  record = json.loads(out.read_text())
  assert record['reps'] == 2
  order = [(r['rep'], r['implementation']) for r in record['runs']]
  assert order == [(rep, impl) for rep in range(2) for impl in impls]  # A B C A B C
  assert all('sample_grads_per_s' in r and r['peak_rss_gb'] > 0 for r in record['runs'])
  assert len(record['peaks']) == 2 and record['host']['backend']
  rows = {r['implementation']: r for r in record['rows']}
  assert rows['engine-seq']['vs_jit_loop']['n'] == 2
  if 'torch-loop' in impls:
    assert rows['engine-seq']['vs_torch_loop']['n'] == 2
  assert '| logreg_k4 | engine-seq |' in result.stdout

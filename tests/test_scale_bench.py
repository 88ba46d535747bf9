"""benchmarks/scale.py: the memory search, the line fit, and each section's --quick run."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCALE = os.path.join(ROOT, 'benchmarks', 'scale.py')


def _scale():
  spec = importlib.util.spec_from_file_location('scale', SCALE)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _exact(need, lo, hi, budget):
  """The answer by brute force: the largest n in [lo, hi] with need(n) <= budget."""
  return max((n for n in range(lo, hi + 1) if need(n) <= budget), default=None)


@pytest.mark.parametrize('need', [
    lambda n: 1000 + 37 * n,                      # linear: a vmapped cohort, a client table
    lambda n: 1000 + n * n,                       # convex: interpolation undershoots
    lambda n: 5000 + 10 * n + 400 * (n > 300),    # a step: the preflight overtakes XLA
    lambda n: max(20000, 60 * n),                 # flat, then linear
])
def test_search_brackets_the_largest_fit_within_tol(need):
  scale = _scale()
  for budget in (4000, 15000, 30000, 90000):
    known = {}
    result = scale.largest_fitting(need, 1, 2000, budget, 0.02, known)
    exact = _exact(need, 1, 2000, budget)
    fit, over = result['largest_fit'], result['smallest_over']
    if exact is None:
      assert fit is None and need(over) > budget
      continue
    assert fit is not None and need(fit) <= budget and fit <= exact
    if result['capped']:
      assert fit == exact == 2000 and over is None
    else:
      assert need(over) > budget and over > exact
      assert over - fit <= max(1, int(0.02 * fit))  # bracketed to the tolerance
    assert result['probes'] <= 25 and len(known) == result['probes']


def test_search_is_monotone_in_the_budget_and_reuses_probes():
  scale = _scale()
  calls = []

  def need(n):
    calls.append(n)
    return 3e8 + 2.5e7 * n

  known, fits = {}, []
  for budget in (1e9, 4e9, 24e9):
    fits.append(scale.largest_fitting(need, 1, 60000, budget, 0.02, known)['largest_fit'])
  assert fits == sorted(fits) and fits[-1] == 948  # (24e9 - 3e8) / 2.5e7 = 948
  assert len(calls) == len(set(calls)) == len(known)  # no point probed twice
  assert len(calls) <= 12  # linear need: a few probes per budget, not a bisection's 16


def test_search_at_the_cap_and_below_the_floor():
  scale = _scale()
  flat = scale.largest_fitting(lambda n: 100, 10, 60000, 1e9, 0.02, {})
  assert flat == dict(largest_fit=60000, smallest_over=None, capped=True, probes=2)
  none = scale.largest_fitting(lambda n: 10 * n, 10, 60000, 50, 0.02, {})
  assert none['largest_fit'] is None and none['smallest_over'] == 10


def test_linear_fit_recovers_a_line_and_its_residuals():
  scale = _scale()
  fit = scale.linear_fit([10, 10, 100, 500], [1.5, 1.5, 10.5, 50.5])
  assert fit['intercept_s'] == pytest.approx(0.5) and fit['slope_s'] == pytest.approx(0.1)
  assert fit['r2'] == pytest.approx(1.0) and max(map(abs, fit['residuals_s'])) < 1e-9
  bent = scale.linear_fit([10, 100, 500], [1.0, 10.0, 200.0])
  assert bent['r2'] < 0.99


def _quick(section, tmp_path, *flags):
  out = tmp_path / f'{section}.json'
  done = subprocess.run([sys.executable, SCALE, section, '--quick', f'--out={out}', *flags],
                        capture_output=True, text=True, cwd=ROOT, timeout=900)
  assert done.returncode == 0, done.stderr[-3000:]
  assert f'raw results: {out}' in done.stdout and '|---|' in done.stdout  # docs/scale.md's table
  record = json.loads(out.read_text())
  assert record['section'] == section and record['quick'] is True
  host = record['host']
  assert host['git_commit'] and host['cpu_count'] >= 1 and host['versions']['jax']
  assert isinstance(host['git_dirty'], bool) and record['load_1min_at_start'] >= 0
  assert host['backend'] and host['memory_total_gb'] > 0 and host['H'] == 10
  return record['result']


@pytest.mark.slow
def test_quick_memory_fits_grow_with_the_budget_and_a_round_runs(tmp_path):
  result = _quick('memory', tmp_path)
  assert result['budgets_gb'] == [0.02, 0.05] and 0 < result['baseline_rss_gb'] < 4
  (row,) = result['models']
  assert row['model'] == 'logreg' and row['train_examples'] == 400
  # Clients one after another: memory does not grow with K, every K up to the cap fits.
  seq = row['cohort']['sequential']
  assert seq['0.02']['capped'] and seq['0.02']['largest_fit'] == 400
  sizes = [b for _, b in sorted((int(n), b) for n, b in seq['bytes_by_n'].items())]
  assert sizes[-1] < 1.5 * sizes[0]
  for search in (row['cohort']['vmap'], row['clients']['scaffold']):
    bytes_by_n = {int(n): b for n, b in search['bytes_by_n'].items()}
    ns = sorted(bytes_by_n)
    assert all(bytes_by_n[a] <= bytes_by_n[b] for a, b in zip(ns, ns[1:]))  # monotone
    small, large = search['0.02'], search['0.05']
    assert small['largest_fit'] <= large['largest_fit']
    for budget, found in ((0.02e9, small), (0.05e9, large)):
      assert bytes_by_n[found['largest_fit']] <= budget
      if not found['capped']:
        assert bytes_by_n[found['smallest_over']] > budget
        assert found['binding'].startswith(('preflight', 'XLA'))
  probes = row['probes']
  assert all(p['xla_gb'] > 0 and p['preflight_gb'] > 0 and p['compile_s'] > 0 for p in probes)
  assert {p['kind'] for p in probes} == {'cohort-sequential', 'cohort-vmap', 'clients-scaffold'}
  # SCAFFOLD's table: one model's worth of floats per client (logreg: 7,850).
  table = next(p for p in probes if p['kind'] == 'clients-scaffold' and p['n'] == 10)
  assert table['client_state_gb'] == pytest.approx(10 * 7850 * 4 / 1e9)
  check = row['validation']
  assert check['clients_per_round'] == row['cohort']['vmap']['validate:0.02']['largest_fit']
  assert check['cohort_chunk'] == check['clients_per_round']  # vmapped, as probed
  assert check['run_xla_estimate_gb'] == pytest.approx(check['probe_xla_gb'], rel=0.05)
  assert check['peak_rss_gb'] > check['run_xla_estimate_gb'] and check['train_s'] > 0


@pytest.mark.slow
def test_quick_rounds_times_every_k_and_fits_a_line(tmp_path):
  result = _quick('rounds', tmp_path)
  assert result['model'] == 'logreg' and result['conv_impl_flag'] == 'auto'
  assert result['client_parallelism_flag'] == 'auto'
  assert result['resolved'] and result['resolved'][0]['chunk'] == 1  # CPU: one after another
  runs = result['runs']
  assert [(r['k'], r['rep']) for r in runs] == [(2, 0), (4, 0), (2, 1), (4, 1)]  # interleaved
  for r in runs:
    assert len(r['round_s']) >= 2 and min(r['round_s']) > 0 and r['compile_s'] > 0
    assert r['peak_rss_gb'] > 0 and 'load_1min_at_start' in r
  assert [p['k'] for p in result['per_k']] == [2, 4]
  for p in result['per_k']:
    s = p['seconds_per_round']
    assert 0 < s['min'] <= s['median'] <= s['max'] and s['n'] == 2
    assert p['seconds_per_round_per_client']['median'] == pytest.approx(
        s['median'] / p['k'])
  # The line goes through every process's median (its sign is noise at quick sizes).
  fit = result['fit']
  assert fit['r2'] <= 1 and len(fit['residuals_s']) == len(runs)
  for r, residual in zip(runs, fit['residuals_s']):
    assert fit['intercept_s'] + fit['slope_s'] * r['k'] + residual == pytest.approx(
        r['seconds_per_round'])


@pytest.mark.slow
def test_quick_compile_times_each_segment_length(tmp_path):
  result = _quick('compile', tmp_path)
  assert result['flag'] == 'eval_every'
  assert [p['eval_every'] for p in result['per_length']] == [1, 4]
  for r in result['runs']:
    assert r['lower_s'] > 0 and r['compile_s'] > 0
    assert r['total_s'] == pytest.approx(r['lower_s'] + r['compile_s'])
  assert result['fit'] is not None

"""docs/new_method.md, the walk-through of writing a method, runs as the page shows it.

Its ```python blocks are concatenated in order and run in one fresh process (its
registrations must not reach this test process's registry). The page's claims are asserts in
its own code (the term and the aggregator against numpy, mu = 0 giving FedAvg's parameters
bit for bit), so a page that stops telling the truth fails here; the quick test checks those
asserts are still there.
"""
import ast
import os
import subprocess
import sys

import pytest

from test_readme import page_commands

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join('docs', 'new_method.md')


def page_source():
  """The page's ```python blocks, concatenated in order (the page as one program)."""
  with open(os.path.join(ROOT, PAGE), encoding='utf-8') as f:
    blocks = [body for kind, body in page_commands(f.read()) if kind == 'python']
  assert blocks, f'{PAGE} shows no Python'
  return '\n'.join(blocks)


def _asserts(source):
  """The source text of every assert statement of `source`."""
  tree = ast.parse(source)
  return [ast.get_source_segment(source, node) for node in ast.walk(tree)
          if isinstance(node, ast.Assert)]


def test_the_page_asserts_its_claims():
  """The numpy references and the reduction to FedAvg are asserts in the page's code."""
  source = page_source()
  asserts = ' '.join(_asserts(source))
  assert "registry.registers('part', 'l1prox'" in source
  assert "registry.register('aggregator', 'inv_norm'" in source
  assert "algorithm('l1prox'" in source
  assert "registry.flag('l1_mu'" in source and "reads=('l1_mu',)" in source  # a flag of its own
  assert "applies.unread_flags(fedjax_drift.Config(algo='fedavg', l1_mu=0.5))" in asserts
  assert 'np.sign(w[k] - w_t[k])' in asserts  # the term's gradient against numpy
  assert 'np.tensordot(a, deltas[k]' in asserts  # the aggregator against numpy
  assert 'np.array_equal(fedavg[k], l1prox[k])' in asserts  # mu = 0 is FedAvg, bit for bit
  assert "sweep['runs']" in asserts


@pytest.mark.slow
def test_the_page_runs_as_one_program(tmp_path):
  """Every block, in order, in one process: registrations, numpy checks, runs and sweep."""
  env = dict(os.environ, PYTHONPATH=ROOT, TMPDIR=str(tmp_path))
  result = subprocess.run([sys.executable, '-c', page_source()], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=1200)
  assert result.returncode == 0, f'{result.stdout[-2000:]}\n{result.stderr[-3000:]}'
  assert "done: 3 runs" in result.stdout + result.stderr  # the sweep ran its three values

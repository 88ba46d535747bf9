"""benchmarks/crosscheck: the README's smallest-size block, and what the scripts export."""
import importlib.util
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.join(ROOT, 'benchmarks', 'crosscheck')


def _module(name):
  spec = importlib.util.spec_from_file_location(f'crosscheck_{name}',
                                                os.path.join(HERE, f'{name}.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _readme_block():
  with open(os.path.join(HERE, 'README.md')) as f:
    text = f.read()
  section = text.split('## The smallest size')[1]
  return re.search(r'```\n(.*?)```', section, re.S).group(1)


@pytest.mark.slow
def test_the_readme_block_replays_our_run_exactly(tiny_npz, tmp_path):
  env = dict(os.environ, DATA=tiny_npz, DIR=str(tmp_path))
  result = subprocess.run(['bash', '-euc', _readme_block()], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900, check=False)
  assert result.returncode == 0, result.stderr[-2000:]
  rows = [line.split() for line in result.stdout.splitlines() if re.match(r'\s+\d+\s', line)]
  assert [int(r[0]) for r in rows] == [0, 1, 2, 3]
  assert all(float(r[1]) == 0 for r in rows)
  with open(tmp_path / 'ours' / 'cohorts.json') as f:
    cohorts = json.load(f)
  with open(tmp_path / 'ours' / 'partition.json') as f:
    parts = json.load(f)
  assert len(cohorts) == 3 and all(len(c) == 3 and len(set(c)) == 3 for c in cohorts)
  assert len(parts) == 10 and {len(p) for p in parts} == {6}  # feddf: 60 / 10 each

  # The same partition, cohorts and init with another seed: only the minibatches differ.
  export, compare = _module('export'), _module('compare')
  flags = _readme_block().split('--dir=$DIR/replay')[1].split('\n')[:4]
  argv = ' '.join(line.strip(' \\') for line in flags).replace('$DIR', str(tmp_path))
  argv = argv.replace('$DATA', tiny_npz).split()
  assert export.main([f'--dir={tmp_path}/reseeded', '--seed=5', '--fedgen_json', *argv]) == 0
  rows = compare.compare(compare.load_rounds(tmp_path / 'ours' / 'rounds'),
                         compare.load_rounds(tmp_path / 'reseeded' / 'rounds'))
  assert rows[0][1] == 0  # the same initial weights
  assert all(r[1] > 0 for r in rows[1:])  # other minibatches, other models

  with open(tmp_path / 'reseeded' / 'fedgen' / 'train' / 'train.json') as f:
    fedgen = json.load(f)
  assert fedgen['users'] == sorted(fedgen['users']) == [f'f_{i:05d}' for i in range(10)]
  data = np.load(tiny_npz)
  for name, part in zip(fedgen['users'], parts):
    np.testing.assert_allclose(fedgen['user_data'][name]['x'], data['x_train'][part],
                               rtol=1e-6)
    assert fedgen['user_data'][name]['y'] == data['y_train'][part].tolist()


def test_compare_reports_relative_and_update_shares(tmp_path):
  compare = _module('compare')
  ours = {0: {'w': np.array([1.0, 2.0])}, 1: {'w': np.array([1.5, 4.0])}}
  theirs = {0: {'w': np.array([1.0, 2.0])}, 1: {'w': np.array([1.5, 3.9])}}
  (t0, rel0, _, _), (t1, rel1, upd1, worst) = compare.compare(ours, theirs)
  assert (t0, rel0) == (0, 0.0) and t1 == 1 and worst == 'w'
  np.testing.assert_allclose([rel1, upd1], [0.1 / 4.0, 0.1 / 2.0])
  torch_conv = np.arange(2 * 3 * 4 * 5.0).reshape(5, 4, 2, 3)  # [out, in, h, w]
  assert compare.rename({'c': torch_conv}, {'c': 'conv/kernel'}, True)['conv/kernel'].shape \
      == (2, 3, 4, 5)
  for side, rounds in (('a', ours), ('b', theirs)):
    os.makedirs(tmp_path / side)
    for t, params in rounds.items():
      np.savez(tmp_path / side / f'round_{t:04d}.npz', **params)
  assert compare.main([str(tmp_path / 'a'), str(tmp_path / 'b'), '--tolerance=0.05']) == 0
  assert compare.main([str(tmp_path / 'a'), str(tmp_path / 'b'), '--tolerance=0.01']) == 1

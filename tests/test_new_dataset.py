"""docs/new_dataset.md, the walk-through of adding a dataset, runs as the page shows it.

The page's first ```python block is the plugin file `my_dataset.py`; the test writes it, and a
small readings CSV of its own, into a temporary folder and runs the page's other ```python
blocks there, concatenated in order, in one fresh process (its registrations must not reach
this test process's registry), then the page's `fedjax-drift` commands. The page's claims are
asserts in its own code, so a page that stops telling the truth fails here; the quick test
checks those asserts are still there.
"""
import ast
import json
import os
import shlex
import subprocess
import sys

import numpy as np
import pytest

from test_readme import FENCE, page_commands

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join('docs', 'new_dataset.md')
PLUGIN = 'my_dataset.py'


def _page():
  with open(os.path.join(ROOT, PAGE), encoding='utf-8') as f:
    return f.read()


def page_blocks():
  """(the plugin file's source, the rest of the page's Python as one program)."""
  blocks = [body for kind, body in page_commands(_page()) if kind == 'python']
  assert len(blocks) >= 2, f'{PAGE} shows no plugin and program'
  return blocks[0], '\n'.join(blocks[1:])


def page_command_lines():
  """The page's `fedjax-drift` commands (its ```text blocks), as argv lists."""
  found = []
  for lang, body in FENCE.findall(_page()):
    if lang == 'text':
      found += [shlex.split(line, comments=True) for line in body.splitlines()
                if line.startswith('fedjax-drift ')]
  return found


def write_readings(path, clients=6, rows=40, features=6, classes=3, seed=0):
  """A readings CSV as the page describes it (client,label,x0,...): each class a cluster."""
  rng = np.random.default_rng(seed)
  lines = ['client,label,' + ','.join(f'x{i}' for i in range(features))]
  centres = 2.0 * rng.normal(size=(classes, features))
  for client in range(clients):
    for label in rng.integers(0, classes, rows):
      x = centres[label] + rng.normal(size=features)
      lines.append(f'{client},{label},' + ','.join(f'{v:.4f}' for v in x))
  with open(path, 'w', encoding='utf-8') as f:
    f.write('\n'.join(lines) + '\n')


def _asserts(source):
  """The source text of every assert statement of `source`."""
  tree = ast.parse(source)
  return [ast.get_source_segment(source, node) for node in ast.walk(tree)
          if isinstance(node, ast.Assert)]


def test_the_page_asserts_its_claims():
  """The registration, the flag and the checks against the file are in the page's code."""
  plugin, program = page_blocks()
  assert "common.register_dataset(\n    'readings'" in plugin
  assert "registry.flag('readings_test_fraction'" in plugin
  assert "reads=('readings_test_fraction',)" in plugin
  asserts = ' '.join(_asserts(program))
  assert "'readings' in sources.datasets()" in asserts
  assert 'len(dataset.y_train) + len(dataset.y_test) == len(table)' in asserts
  assert "applies.unread_flags(fedjax_drift.Config(readings_test_fraction=0.5))" in asserts
  assert "summary['runs'][0]['status'] == 'ok'" in asserts
  commands = page_command_lines()
  assert [c[:2] for c in commands] == [['fedjax-drift', f'--plugin={PLUGIN}']] * 3
  assert {'--list', '--help'} <= {a for c in commands for a in c}


def _cli(argv, tmp_path, env):
  """One page command, `fedjax-drift` as `python -m fedjax_drift.cli`, run in tmp_path."""
  command = [sys.executable, '-m', 'fedjax_drift.cli'] + argv[1:]
  if not {'--list', '--help'} & set(argv):
    command += [f'--out={tmp_path / "cli_run"}', '--progress=false']
  return subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env,
                        timeout=600)


@pytest.mark.slow
def test_the_page_runs_as_one_program(tmp_path):
  """The plugin written as the page says, the program run beside it, then its commands."""
  plugin, program = page_blocks()
  (tmp_path / PLUGIN).write_text(plugin, encoding='utf-8')
  write_readings(tmp_path / 'readings.csv')
  env = dict(os.environ, PYTHONPATH=ROOT, TMPDIR=str(tmp_path))
  result = subprocess.run([sys.executable, '-c', program], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=1200)
  assert result.returncode == 0, f'{result.stdout[-2000:]}\n{result.stderr[-3000:]}'
  with open(tmp_path / 'runs' / 'readings' / 'summary.json', encoding='utf-8') as f:
    assert json.load(f)['final_accuracy'] > 0.5  # it trains: the clusters, not chance (1/3)
  said = {}
  for argv in page_command_lines():
    result = _cli(argv, tmp_path, env)
    assert result.returncode == 0, f'{argv}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}'
    said[next(a for a in ('--list', '--help', 'run') if a in argv + ['run'])] = result.stdout
  assert 'readings' in said['--list']
  assert '--readings_test_fraction' in said['--help']
  assert 'model: mlp, the usual one for --dataset=readings' in said['run']
  assert (tmp_path / 'cli_run' / 'summary.json').exists()

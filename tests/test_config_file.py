"""--config=FILE reruns a run directory's config.json, the flags given replacing its settings
(issue 34 item 6)."""
import json

import pytest

from test_cli import cli

SKIP = ('out', 'rounds', '_resolved')


def _settings(run_dir):
  with open(run_dir / 'config.json') as f:
    return {k: v for k, v in json.load(f).items() if k not in SKIP}


@pytest.mark.slow
def test_a_rerun_from_config_json_has_the_same_settings(tmp_path, tiny_npz, unequal_partition):
  first = tmp_path / 'first'
  done = cli(f'--dataset=npz:{tiny_npz}', f'--partition=file:{unequal_partition}',
             '--model=logreg', '--rounds=1', '--num_clients=4', '--clients_per_round=3',
             '--local_steps=2', '--local_epochs=0', '--lr=0.07', '--progress=false',
             f'--out={first}')
  assert done.returncode == 0, done.stderr
  again = tmp_path / 'again'
  done = cli(f'--config={first / "config.json"}', '--rounds=2', f'--out={again}')
  assert done.returncode == 0, done.stderr
  assert _settings(again) == _settings(first)
  assert json.loads((again / 'config.json').read_text())['rounds'] == 2
  third = tmp_path / 'third'  # a run directory stands for its config.json
  assert cli(f'--config={first}', f'--out={third}').returncode == 0
  assert _settings(third) == _settings(first)


def test_config_file_mistakes_are_one_line(tmp_path):
  bad = tmp_path / 'bad.json'
  for content, expected in (('{"algo": "fedavg", "colour": 3}', "unknown setting 'colour'"),
                            ('[1, 2]', 'is not a JSON object'), ('{oops', 'not valid JSON')):
    bad.write_text(content)
    done = cli(f'--config={bad}', f'--out={tmp_path / "run"}')
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and expected in lines[0], done.stderr
  done = cli(f'--config={bad}', '--resume', f'--out={tmp_path / "run"}')
  assert done.returncode == 2 and 'starts a new run' in done.stderr

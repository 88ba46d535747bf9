"""The first hour of a new user: --help, --list, did-you-mean, --local_steps alone, hints."""
import importlib.util
import os
import subprocess
import sys

import pytest

import fedjax_drift
from fedjax_drift import algorithms, catalog, config, core_flags, errors, registry
from fedjax_drift.models import zoo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, 'experiments', 'run.py')


def _run_module():
  spec = importlib.util.spec_from_file_location('run_cli', RUN)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def cli(*args):
  return subprocess.run([sys.executable, RUN, *args], capture_output=True, text=True, cwd=ROOT,
                        timeout=300)


def test_help_groups_flags_and_lists_values():
  result = cli('--help')
  assert result.returncode == 0, result.stderr
  text = result.stdout
  positions = [text.index(f'\n{g} flags:') for g in core_flags.GROUPS]
  assert positions == sorted(positions)
  assert 'other flags:' not in text
  for name in list(algorithms.names()) + list(zoo.models()) + ['tfds:NAME', 'dirichlet_client',
                                                          'concept_shift']:
    assert name in text, name
  assert '90%' in text  # a % in a help string is printed, not a crash


def test_every_field_has_a_help_group():
  for f in config.fields():  # the flags modules declare (registry.flag) too
    assert f.metadata.get('group') in core_flags.GROUPS, f.name
    assert f.metadata.get('help'), f.name


def test_list_prints_one_line_per_value():
  result = cli('--list')
  assert result.returncode == 0, result.stderr
  lines = result.stdout.splitlines()
  for title, _, entries in catalog.sections():
    assert any(line.startswith(title) for line in lines), title
    for name, summary in entries.items():
      assert summary, name
      assert any(line.split()[:1] == [name] for line in lines), name


def test_list_descriptions_end_on_a_whole_phrase():
  for _, _, entries in catalog.sections():  # what --list prints (above)
    for name, summary in entries.items():
      text = summary.rstrip()
      assert text.count('(') == text.count(')'), (name, text)
      assert not text.endswith((',', ';', ':', ' and', ' or', ' the', ' a', ' of', '-', '(')), \
          (name, text)


@pytest.mark.parametrize('args,hint', [
    (['--round=3'], 'did you mean --rounds?'),
    (['--local_step=3'], 'did you mean --local_steps?'),
    (['--weighting=uniorm'], 'did you mean uniform?'),
    (['--algo=fedprx'], 'did you mean fedprox?'),
    (['--model=cnn_mnst'], 'did you mean cnn_mnist?'),
    (['--partition=dirichlet_clients'], 'did you mean dirichlet_client?'),
    (['--dataset=fashion-mnist'], 'did you mean fashion_mnist?'),
])
def test_did_you_mean(args, hint, tmp_path):
  result = cli(*args, f'--out={tmp_path / "run"}', '--progress=false')
  assert result.returncode == 2, result.stderr
  assert hint in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_local_steps_alone_means_steps():
  run = _run_module()
  args = vars(run.build_parser(fedjax_drift.Config).parse_args(['--local_steps=5']))
  cfg = fedjax_drift.Config(**args).validate()
  assert (cfg.local_steps, cfg.local_epochs) == (5, 0)
  assert fedjax_drift.Config(local_steps=5).validate().local_epochs == 0
  assert fedjax_drift.Config().local_epochs == 1
  assert fedjax_drift.Config(local_epochs=3).local_epochs == 3
  assert config.from_dict({'local_steps': 2}).local_epochs == 0
  with pytest.raises(errors.UserError, match='--local_steps=5 and --local_epochs=2 conflict'):
    fedjax_drift.Config(local_steps=5, local_epochs=2).validate()


def test_fedbn_refused_without_norm_layers(tiny_npz, unequal_partition):
  from helpers import tiny_config
  with pytest.raises(errors.UserError, match='--algo=fedbn needs a model with BatchNorm'):
    fedjax_drift.prepare(tiny_config(tiny_npz, unequal_partition, algo='fedbn', model='mlp'))


def test_devices_hint_names_xla_flags():
  message = str(errors.too_many_devices(4, 1, 'cpu'))
  assert 'XLA_FLAGS=--xla_force_host_platform_device_count=4' in message
  assert 'XLA_FLAGS' not in str(errors.too_many_devices(4, 1, 'gpu'))


def test_list_names_every_choice_help_names():
  """Issue 45 item 8: --list shows the aggregators and local terms (and every other registry
  kind's selectable choices), not only --help."""
  text = catalog.text()
  for kind, (flag, _) in registry.KINDS.items():
    assert f'(--{flag}):' in text, kind
    if kind != 'dataset':
      for name, entry in registry.entries(kind).items():
        if entry.prefix or entry.info == registry.INTERNAL:
          continue
        assert any(line.split()[:1] == [name] for line in text.splitlines()), (kind, name)
  assert 'aggregators (--aggregator):' in text and 'local terms (--local_terms):' in text


def test_dataset_typo_and_missing_npz_refused_by_the_flag_checks(tmp_path):
  """Issue 45 item 9: --dataset=femnst and a missing npz: file are refused by Config.validate,
  before the run prints "loading data and compiling..." (as an --algo typo is)."""
  with pytest.raises(errors.UserError, match=r'^--dataset=femnst is unknown.*did you mean femnist'):
    fedjax_drift.Config(dataset='femnst').validate()
  missing = tmp_path / 'missing.npz'
  with pytest.raises(errors.UserError, match=f'^--dataset=npz:{missing}: data file {missing} '):
    fedjax_drift.Config(dataset=f'npz:{missing}').validate()
  result = cli(f'--dataset=npz:{missing}', f'--out={tmp_path / "run"}', '--progress=false')
  assert result.returncode == 2 and 'loading data' not in result.stderr, result.stderr
  assert result.stderr.strip().splitlines() == [
      f'error: --dataset=npz:{missing}: data file {missing} does not exist']

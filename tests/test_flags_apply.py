"""Flags and --grid axes the chosen algorithm, scenario or options do not read (issue 26 item 2).

The check is derived from fedjax_drift/applies.py's tables (each part, server optimizer, local
optimizer and choice declares the Config fields it reads): an unread --grid axis is refused,
an unread single-run flag set away from its default gets one warning line naming it.
"""
import os
import subprocess
import sys

import pytest

import fedjax_drift
from fedjax_drift import registry, algorithms, applies, config as config_lib
from fedjax_drift.config import Config, parse_grid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, 'experiments', 'run.py')


def _grid_error(**kw):
  c = Config(**kw)
  try:
    applies.check_grid(c, parse_grid(c.grid))
  except fedjax_drift.UserError as e:
    return str(e)
  return None


@pytest.mark.parametrize('kw,refused', [
    (dict(grid='lr:0.01,0.05;beta:0.8,0.9'), 'beta'),                  # the README's old line
    (dict(algo='slowmo', grid='lr:0.01,0.05;beta:0.8,0.9'), None),
    (dict(algo='fedprox', grid='prox_mu:0.01,0.1'), None),
    (dict(algo='fedavg', grid='prox_mu:0.01,0.1'), 'prox_mu'),
    (dict(algo='fedavg', local_terms='prox', grid='prox_mu:0.01,0.1'), None),
    (dict(algo='fedavg', server_momentum=0.9, grid='beta:0.8,0.9'), 'beta'),  # replaced
    (dict(algo='fedadc', grid='beta:0.8,0.9'), None),                   # via beta_local = -1
    (dict(algo='fedadc', beta_local=0.5, beta_global=0.5, grid='beta:0.8,0.9'), 'beta'),
    (dict(algo='fedadagrad', grid='server_beta2:0.9,0.99'), 'server_beta2'),
    (dict(algo='fedadam', grid='server_beta2:0.9,0.99'), None),
    (dict(algo='fedavg', local_optimizer='adam', grid='local_momentum:0.1,0.5'),
     'local_momentum'),
    (dict(algo='fedadc_dm', grid='phi:0.5,0.9'), None),
    (dict(algo='fedavg', grid='phi:0.5,0.9'), 'phi'),
    (dict(algo='igfl', grid='attention_temperature:0.5,1'), None),
    (dict(algo='fedavg', grid='lr:0.01,0.05;server_lr:0.5,1;weight_decay:0,0.001'), None),
])
def test_grid_axis_nothing_reads_is_refused(kw, refused):
  error = _grid_error(**kw)
  if refused is None:
    assert error is None, error
  else:
    assert error is not None and error.startswith(f'--grid: {refused} is not read'), error
    assert '\n' not in error


@pytest.mark.parametrize('kw,named', [
    (dict(prox_mu=0.1), ['--prox_mu=0.1']),
    (dict(algo='fedprox', prox_mu=0.1), []),
    (dict(algo='fedadc_dm', beta_global=0.5), ['--beta_global=0.5']),  # Alg. 4: = beta_local
    (dict(partition='iid', dirichlet_alpha=0.3, concept_shift_prob=0.2),
     ['--dirichlet_alpha=0.3', '--concept_shift_prob=0.2']),
    (dict(scenario='concept_shift', concept_shift_prob=0.2), []),
    (dict(algo='moon', moon_mu=5.0, moon_projection_dim=64), []),
    (dict(algo='igfl', aggregator='attention_global', attention='time'), ['--attention=time']),
    (dict(personalize='calibrate', test_partition='like_train', personalize_term='prox',
          prox_mu=0.1), []),
])
def test_single_run_flags_nothing_reads_are_warned(kw, named):
  c = Config(**kw)
  line = applies.warning(c)
  assert {f'--{n}={getattr(c, n)}' for n in applies.unread_flags(c)} == set(named)
  if named:
    assert line.startswith('warning: ') and '\n' not in line
    for flag in named:
      assert flag in line
  else:
    assert line == ''


def test_every_declared_field_is_a_config_field_and_every_recipe_resolves():
  names = config_lib.field_names()  # the core flags and those modules declare (registry.flag)
  assert applies.declared() <= names
  assert 'fedadc' in set(registry.names('server')) - set(registry.names('server', selectable=True))
  for algo in algorithms.names():  # each algorithm reads its own hyperparameters
    reads = applies.reads(Config(algo=algo))
    assert reads <= names, algo
  assert 'beta' in applies.reads(Config(algo='slowmo'))
  assert 'prox_mu' in applies.reads(Config(algo='fedprox'))
  assert 'gkd_buffer' in applies.reads(Config(algo='fedgkd_vote'))


def test_every_gridable_hyperparameter_is_read_by_some_algorithm():
  read_somewhere = set().union(*(applies.reads(Config(algo=a)) for a in algorithms.names()),
                               *(applies.reads(Config(local_terms=p))
                                 for p in registry.names('part')),
                               applies.reads(Config(local_optimizer='sgd')),
                               *(applies.reads(Config(lr_schedule=s))
                                 for s in ('step', 'cosine')),
                               applies.reads(Config(scenario='concept_shift')))
  gridable = set(config_lib.gridable_fields())  # a module's own gridable flags too
  unchecked = gridable - applies.declared()  # read by every run
  assert gridable <= read_somewhere | unchecked


def test_cli_refuses_the_grid_and_warns_in_one_line(tiny_npz, tmp_path):
  common = [f'--dataset=npz:{tiny_npz}', '--model=logreg', '--num_clients=4',
            '--clients_per_round=2', '--rounds=1', '--progress=false']
  refused = subprocess.run([sys.executable, RUN, *common, "--grid=lr:0.01,0.05;beta:0.8,0.9",
                            f'--out={tmp_path / "a"}'], capture_output=True, text=True,
                           cwd=ROOT, timeout=300)
  assert refused.returncode == 2
  assert refused.stderr.strip() == ('error: --grid: beta is not read with --algo=fedavg (its '
                                    'points would repeat the same run); drop it from --grid')
  assert not os.path.exists(tmp_path / 'a')


def test_run_warns_about_a_flag_its_algorithm_does_not_read(tiny_npz, unequal_partition,
                                                            tmp_path):
  from helpers import tiny_config  # pylint: disable=g-import-not-at-top
  lines = []
  fedjax_drift.run(tiny_config(tiny_npz, unequal_partition, prox_mu=0.1,
                               out=str(tmp_path / 'run')), log=lines.append)
  warnings = [line for line in lines if line.startswith('warning:')]
  assert warnings == ['warning: --prox_mu=0.1 not read with --algo=fedavg (no effect)']


def test_diag_features_n_is_read_only_with_diag_features_rounds():
  assert applies.unread_flags(Config(diag_features_n=100)) == ['diag_features_n']
  assert applies.unread_flags(Config(diag_features_n=100, diag_features_rounds='0,5')) == []


def test_init_is_unread_with_init_params_and_init_params_run_without():
  assert applies.unread_flags(Config(init='zeros', init_params='a.npz')) == ['init']
  assert applies.unread_flags(Config(init_params_run=1)) == ['init_params_run']
  assert applies.unread_flags(Config(init_params='a.npz', init_params_run=1)) == []


def test_readme_algorithm_table_flags_are_read_by_their_algorithms():
  """docs/algorithms.md's 'its flags' column and applies.py's tables say the same."""
  import re  # pylint: disable=g-import-not-at-top
  with open(os.path.join(ROOT, 'docs', 'algorithms.md'), encoding='utf-8') as f:
    text = f.read()
  table = text[text.index('| name | what it is | its flags |'):]
  table = table[:table.index('\n\n')]
  checked = 0
  for line in table.splitlines()[2:]:
    cells = line.split(' | ')
    names = [n for n in re.findall(r'`(\w+)`', cells[0]) if n in algorithms.names()]
    flags = [f for f in re.findall(r'--(\w+)', cells[2]) if f in applies.declared()]
    for flag in flags:
      assert any(flag in applies.reads(Config(algo=n)) for n in names), (names, flag)
      checked += 1
  assert checked > 20


@pytest.mark.parametrize('dataset,unread', [
    ('embedded', {'cifar100_labels', 'emnist_split', 'hf_train_split'}),
    ('cifar100', {'emnist_split', 'hf_train_split'}),
    ('emnist_letters', {'cifar100_labels', 'hf_train_split'}),
    ('hf:some/name', {'cifar100_labels', 'emnist_split'}),
    ('tfds:cifar100', {'cifar100_labels', 'emnist_split', 'hf_train_split'}),
])
def test_loader_options_of_another_dataset_are_warned(dataset, unread):
  c = Config(dataset=dataset, cifar100_labels='coarse', emnist_split='letters',
             hf_train_split='other')
  assert set(applies.unread_flags(c)) == unread


def test_no_preset_grid_is_refused():
  """The presets give shared settings to every method (warned about, never refused)."""
  sys.path.insert(0, os.path.join(ROOT, 'experiments'))
  import presets  # pylint: disable=g-import-not-at-top
  checked = 0
  for name in presets.PRESETS:
    for mode in ('short', 'full'):
      for _, _, values, grid, seeds, pending in presets.plan(name, mode):
        if values.get('algo') not in algorithms.names() or pending:  # pending: no data or method
          continue
        c = presets.to_config(values, grid, seeds)
        applies.check_grid(c, parse_grid(c.grid))
        checked += 1
  assert checked > 100

"""`python experiments/run.py --algo=X` works for every X on defaults (issue 44 item 5).

The personalised methods (ditto, fedrep, pfedme, apfl, local_only) are scored by their
clients' own models, which needs client test splits: on the command line, with neither
--test_partition nor an --eval_protocol other than auto, the test set is carved like the
clients' training labels (--test_partition=like_train) and the run says so in one line,
instead of the refusal evaluation.resolve gives a Config without splits."""
import dataclasses
import json
import os

import pytest

from fedjax_drift import Config, cli, config_checks, evaluation, results, study
from fedjax_drift.algorithms import dp
from fedjax_drift.errors import UserError
from test_cli import cli as run_cli

DEFAULTS = {f: getattr(Config(), f) for f in ('algo', 'test_partition', 'eval_protocol',
                                               'partition', 'grid')}


def _scored(config):
  config_checks.personalization(config)
  return study.eval_protocol(config)


def _split(argv, **flags):
  return cli._with_personal_split({**DEFAULTS, **flags}, argv)  # pylint: disable=protected-access


@pytest.mark.parametrize('algo', evaluation.personal_algorithms())
def test_a_personalised_algo_gets_client_test_splits_and_says_so(algo, capsys):
  with pytest.raises(UserError, match='test split'):  # the library alone still refuses
    _scored(Config(algo=algo))
  flags = _split([f'--algo={algo}'], algo=algo)
  assert flags['test_partition'] == 'like_train'
  assert capsys.readouterr().out.startswith(f'test split: like_train, each client\'s share '
                                            f'of the test set carved like its training '
                                            f'labels, so --algo={algo} is scored')
  assert _scored(dataclasses.replace(Config(), **flags)) == 'local'


@pytest.mark.parametrize('argv,flags', [
    (['--algo=fedavg'], {'algo': 'fedavg'}),
    (['--algo=ditto', '--test_partition=none'], {'algo': 'ditto'}),
    (['--algo=ditto', '--eval_protocol=global'], {'algo': 'ditto', 'eval_protocol': 'global'}),
    (['--algo=ditto', '--partition=domains'], {'algo': 'ditto', 'partition': 'domains'}),
])
def test_otherwise_nothing_changes(argv, flags, capsys):
  assert _split(argv, **flags) == {**DEFAULTS, **flags}
  assert capsys.readouterr().out == ''


def test_a_methods_grid_with_a_personalised_method(capsys):
  flags = _split(['--grid=algo:fedavg,ditto'], grid='algo:fedavg,ditto')
  assert flags['test_partition'] == 'like_train'
  assert '--algo=ditto is scored' in capsys.readouterr().out
  assert _split(['--grid=algo:fedavg,fedprox'], grid='algo:fedavg,fedprox') == {
      **DEFAULTS, 'grid': 'algo:fedavg,fedprox'}


@pytest.mark.slow
def test_ditto_runs_on_the_command_line_defaults(tmp_path):
  out = run_cli('--algo=ditto', '--rounds=1', '--local_steps=1', '--local_epochs=0',
                '--num_clients=4', '--clients_per_round=2', '--progress=false',
                f'--out={tmp_path / "run"}')
  assert out.returncode == 0, out.stderr
  assert out.stdout.startswith('test split: like_train'), out.stdout
  with open(tmp_path / 'run' / 'config.json', encoding='utf-8') as f:
    assert json.load(f)['test_partition'] == 'like_train'  # --config and --resume: the same
  with open(os.path.join(tmp_path, 'run', 'summary.json'), encoding='utf-8') as f:
    assert json.load(f)['scored_model'] == 'personal'


def test_dp_noise_that_drowns_the_updates_is_said():
  """DP-FedAvg on defaults (sigma = 1, S = 1, K = 10, cnn_mnist's 1,663,370 parameters) ended
  below chance (0.078 after 5 rounds at E=8): its noise, norm about sigma sqrt(d) / K = 129 x S
  per round, drowns a mean of norm <= S. The paper's sigma stays; the run says why."""
  line = dp.noise_warning('dp_gaussian', 1.0, 1.0, 10, 1_663_370)
  assert line.startswith('warning: --dp_noise=1 adds noise of norm about 129 x --dp_clip')
  assert 'raise --clients_per_round' in line and '\n' not in line
  assert dp.noise_warning('dp_gaussian', 1.0, 1.0, 5000, 4_000_000) == ''  # the paper's scale
  assert dp.noise_warning('mean', 1.0, 1.0, 10, 1_663_370) == ''
  assert dp.noise_warning('dp_gaussian', 1.0, 0.0, 10, 1_663_370) == ''
  assert dp.noise_warning('dp_gaussian', float('inf'), 1.0, 10, 1_663_370) == ''


@pytest.mark.slow
def test_a_dp_run_says_it_and_its_summary_lists_it(tmp_path):
  out = run_cli('--algo=dp_fedavg', '--model=logreg', '--rounds=1', '--local_steps=1',
                '--local_epochs=0', '--num_clients=4', '--clients_per_round=2',
                '--progress=false', f'--out={tmp_path / "run"}')
  assert out.returncode == 0, out.stderr
  said = [l for l in out.stdout.splitlines() if l.startswith('warning: --dp_noise=1')]
  assert len(said) == 1 and 'd = 7,850 parameters, K = 2' in said[0], out.stdout
  with open(tmp_path / 'run' / 'summary.json', encoding='utf-8') as f:
    assert said[0].removeprefix('warning: ') in json.load(f)['warnings']


@pytest.mark.parametrize('argv,flags,model', [
    (['--algo=fedbn'], {'algo': 'fedbn'}, 'cnn_mnist_bn'),
    (['--local_terms=fedbn'], {'local_terms': 'fedbn'}, 'cnn_mnist_bn'),
    (['--algo=fedbn', '--model=mlp'], {'algo': 'fedbn', 'model': 'mlp'}, 'mlp'),  # given
    (['--algo=fedavg'], {'algo': 'fedavg'}, 'cnn_mnist'),
    (['--algo=fedbn'], {'algo': 'fedbn', 'model': 'logreg'}, 'logreg'),  # no logreg_bn
])
def test_fedbn_gets_the_models_batchnorm_twin_and_says_so(argv, flags, model, capsys):
  """--algo=fedbn on defaults refused (cnn_mnist has no BatchNorm layers): the command line
  runs it on cnn_mnist_bn instead when --model is not given."""
  base = {'algo': 'fedavg', 'model': Config().model, 'local_terms': ''}
  got = cli._with_bn_model({**base, **flags}, argv)  # pylint: disable=protected-access
  assert got['model'] == model
  said = capsys.readouterr().out
  assert said == ('' if model == flags.get('model', base['model']) else
                  'model: cnn_mnist_bn, --model=cnn_mnist with BatchNorm layers, which FedBN '
                  'keeps local (--model picks another)\n')


def test_fedgens_own_weights_are_named_by_a_divergence():
  """FedGen on defaults (alpha = beta = 10, the code's, at --lr=0.05 and 80 local steps) jumps
  in round 2 (mean client update norm 1.2 -> 56) and ends at chance: its weights are the knobs
  a divergence line names beside --lr."""
  config = Config(algo='fedgen')
  own_knobs = results._own_knobs  # pylint: disable=protected-access
  assert own_knobs(config.algo, lambda k: getattr(config, k)) == (
      ', --fedgen_alpha (now 10), --fedgen_beta (now 10)')

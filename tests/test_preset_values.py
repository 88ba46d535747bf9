"""The audited preset values (issue 37 item 6), read from the loaded tables and resolved as the
runner resolves them: where a validation split is carved, the client sizes the papers state,
FedGKD's code conventions, FedGen's grid, FedFOR's input sizes and IGFL's attention record."""
import dataclasses
import json
import os
import sys
import types

import jax
import numpy as np
import pytest

from fedjax_drift import models, run_data, tables

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'experiments'))
from presetlib.loading import PRESETS  # noqa: E402
from presetlib.plans import to_config  # noqa: E402
from presetlib.running import _finish_preset  # noqa: E402
from presetlib.tiers import REPORT_KEYS, TRAIN_SIZE, half_round, method_grid, resolve  # noqa: E402

FEDGKD = [n for n in PRESETS if n.startswith('fedgkd_') and n != 'fedgkd_toy']
FEDGKD_CV = [n for n in FEDGKD if n not in ('fedgkd_text', 'fedgkd_loss_sst5')]


def runs(name):
  """(scenario, label, Config values, grid) of every run of the preset at the paper's set-up."""
  preset = PRESETS[name]
  return [(s, label) + resolve(name, 'full', s, label)[:2]
          for s in preset['scenarios'] for label in preset['methods']]


def client_examples(values):
  """Training examples per client: the training set less the carved split, over N clients."""
  return TRAIN_SIZE[values['dataset']] * (1 - values['val_fraction']) / values['num_clients']


def tuned(name):
  preset = PRESETS[name]
  return any(len(v) > 1 for m in preset['methods'].values()
             for v, _ in method_grid(preset, m).values())


@pytest.mark.parametrize('name', list(PRESETS))
def test_a_split_is_carved_from_clients_only_where_a_grid_is_tuned(name):
  for s, label, values, _ in runs(name):
    if values['val_fraction'] and values['val_source'] == 'clients':
      assert tuned(name), f'{name} {s} {label}: carves a split but tunes nothing'


@pytest.mark.parametrize('name', [n for n in PRESETS if n.startswith('fedadc')])
def test_fedadc_clients_hold_500_images(name):
  for s, label, values, _ in runs(name):
    if values['num_clients'] == 100:  # Table I's population (Fig. 5/6 grow it to 500, 1,000)
      assert client_examples(values) == 500, (s, label)


def test_igfl_table4_local_steps():
  steps = {}
  for s, _, values, _ in runs('igfl_steps'):
    per_client = client_examples(values)
    steps[s] = per_client / values['batch_size'] * values['local_epochs']
  assert sorted(steps.values()) == [50, 250, 250, 1250]  # Table 4's T


@pytest.mark.parametrize('name', FEDGKD)
def test_fedgkd_presets_use_feddf_partitions(name):
  assert {values['partition'] for *_, values, _ in runs(name)} == {'feddf'}


@pytest.mark.parametrize('name', FEDGKD_CV)
def test_fedgkd_cv_presets_follow_the_code(name):
  for s, label, values, _ in runs(name):
    assert values['normalize'] == 'fedgkd_code' and values['init'] == 'torch', (s, label)
    assert values['weight_decay_skip'] == 'norm_except_shortcut', (s, label)
    # The paper's 90%: the code's first 90% in file order; the last 10% on the server.
    assert (values['val_fraction'], values['val_source'], values['val_order']) == (
        0.1, 'server', 'tail')
    assert client_examples(values) * values['num_clients'] == 0.9 * TRAIN_SIZE[values['dataset']]
    if values['algo'] == 'fedgkd_vote':  # votes on the held-out 10%: clients keep the 90%
      assert values['vote_val_size'] <= values['val_fraction'] * TRAIN_SIZE[values['dataset']]


@pytest.mark.parametrize('name', [n for n in FEDGKD if 'fedgen' in PRESETS[n]['methods']])
def test_fedgkd_tunes_fedgen_coefficient(name):
  for s, label, values, grid in runs(name):
    if values['algo'] == 'fedgen':
      assert grid['fedgen_alpha'] == (0.1, 1.0, 10.0), s  # §5.1 {0.1, 1, 10}


def test_fedgkd_text_shares_follow_table2():
  sizes = {values['dataset']: TRAIN_SIZE[values['dataset']] * (1 - values['val_fraction'])
           for *_, values, _ in runs('fedgkd_text')}
  assert sizes == {'ag_news': 60_000, 'sst5': 8_544}


def test_fedfor_input_sizes():
  assert {v['image_size'] for *_, v, _ in runs('fedfor_domainnet')} == {256}  # FedBN's Resize
  concept = {(v['model'], v['image_size']) for *_, v, _ in runs('fedfor_concept')}
  assert len(concept) == 1
  model, size = concept.pop()
  m = models.get(model, 10, (size, size, 3))
  count = models.num_params(jax.eval_shape(m.init, jax.random.PRNGKey(0)))
  assert round(count / 1e6, 1) == 14.2  # the six-layer ConvNet's 14.2M at 28x28
  digits = {(v['image_size'], v['digits5_parts']) for *_, v, _ in runs('fedfor_digits')}
  assert digits == {(28, 1)}  # FedBN's Resize([28, 28]) and --percent=0.1 (part 0)
  for name in ('fedfor_domainnet', 'fedfor_digits', 'fedfor_concept'):  # FedBN's PyTorch code
    assert {v['init'] for *_, v, _ in runs(name)} == {'torch'}


def test_igfl_paired_records_attention():
  assert all(v['diag_attention'] for *_, v, _ in runs('igfl_paired'))


def test_fedfor_concept_reports_the_average_best():
  assert PRESETS['fedfor_concept']['metric'] == 'avg_best'  # Table 5 "average best"
  assert PRESETS['fedfor_domainnet']['metric'] == 'best'  # Tables 3-4: best up to t


def _half_rounds(name, mode='full'):
  """{scenario: (rounds, half round)} of a preset's runs in `mode`."""
  preset = PRESETS[name]
  label = next(iter(preset['methods']))
  out = {}
  for s in preset['scenarios']:
    rounds = resolve(name, mode, s, label)[0]['rounds']
    out[s] = (rounds, half_round(preset, s, rounds))
  return out


def test_fedfor_half_budget_rounds_are_the_tables():
  # Tables 2-3 (and Fig. 3's E=8): half of even budgets; Table 4: E=16's header t=15 of 25.
  halves = {(200, 100), (100, 50), (50, 25)}
  for name in ('fedfor_epochs', 'fedfor_alpha', 'fedfor_domainnet'):
    assert set(_half_rounds(name).values()) <= halves, name
  assert _half_rounds('fedfor_digits') == {'E=1': (100, 50), 'E=2': (100, 50),
                                           'E=4': (50, 25), 'E=8': (50, 25),
                                           'E=16': (25, 15)}


def test_half_round_is_reporting_data_not_a_run_setting():
  for name, preset in PRESETS.items():
    for s, items in preset['scenarios'].items():
      if 'half_round' in items:  # within the run, and never a Config value
        assert 0 < items['half_round'][0] < items['rounds'][0], (name, s)
      for label in preset['methods']:
        assert not set(REPORT_KEYS) & set(resolve(name, 'full', s, label)[0]), (name, s)
  # A cut run keeps the paper's share of the rounds: 15/25 of 10 is 6; without one, 10 // 2.
  assert half_round(PRESETS['fedfor_digits'], 'E=16', 10) == 6
  assert half_round(PRESETS['fedfor_digits'], 'E=8', 10) == 5


def test_runner_reports_best_by_half_budget_at_the_scenario_round(tmp_path):
  """fedfor_digits E=16's table takes the half budget at round 15 (Table 4), E=8 at 25."""
  preset, live, done = PRESETS['fedfor_digits'], [], []
  for s in ('E=16', 'E=8'):
    config = to_config(*resolve('fedfor_digits', 'full', s, 'fedbn'))
    config = dataclasses.replace(config, out=str(tmp_path / 'runs' / s))
    curve = [(t, t / 100) for t in range(config.rounds + 1)]  # accuracy rises by 0.01/round
    live.append((s, 'fedbn', config))
    done.append(('ok', [tables.Run(seed, {}, curve, []) for seed in range(3)]))
  results = {'preset': 'fedfor_digits', 'mode': 'full', 'title': preset['title'],
             'paper': preset['paper'], 'metric': preset['metric'],
             'accuracy': 'test_accuracy', 'cuts': [], 'date': 'today', 'scenarios': {},
             'selection': {'select_on': 'test'}, 'references': []}
  _finish_preset('fedfor_digits', 'full', None, None, 'test', lambda *_: None, preset,
                 str(tmp_path), results, live, done)
  with open(tmp_path / 'results.json') as f:
    rows = {s: r[0] for s, r in json.load(f)['scenarios'].items()}
  assert rows['E=16']['half_round'] == 15 and rows['E=8']['half_round'] == 25
  assert rows['E=16']['best_half']['mean'] == pytest.approx(0.15)  # was round 25 // 2 = 12
  assert rows['E=8']['best_half']['mean'] == pytest.approx(0.25)


def test_fedgkd_vote_on_sst5_votes_on_a_training_carve():
  """SST-5 selects on its dev split; the vote's 854 (10% of 8,544, as §5.1's CV split) are
  training sentences drawn apart from every client, never the test or dev split."""
  preset = PRESETS['fedgkd_text']
  values, grid, seeds = resolve('fedgkd_text', 'full', 'SST-5', 'fedgkd_vote')
  assert (values['val_fraction'], values['val_source']) == (0.0, 'dataset')
  assert values['vote_val_size'] == round(0.1 * TRAIN_SIZE['sst5'])
  assert preset['methods']['fedgkd_vote']['algo'] == 'fedgkd_vote'
  n = TRAIN_SIZE['sst5']
  data = types.SimpleNamespace(x_train=np.arange(n)[:, None], y_train=np.arange(n) % 5)
  keep, server = run_data.validation_split(to_config(values, grid, seeds), data)
  vote = np.asarray(server['x_val'])[:, 0]
  assert len(vote) == 854 and len(keep) == n - 854  # the clients hold 7,690
  assert not set(vote) & set(keep) and set(vote) | set(keep) == set(range(n))

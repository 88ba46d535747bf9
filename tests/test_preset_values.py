"""The audited preset values (issue 37 item 6), read from the loaded tables and resolved as the
runner resolves them: where a validation split is carved, the client sizes the papers state,
FedGKD's code conventions, FedGen's grid, FedFOR's input sizes and IGFL's attention record."""
import os
import sys

import jax
import pytest

from fedjax_drift import models

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'experiments'))
from presetlib.loading import PRESETS  # noqa: E402
from presetlib.tiers import TRAIN_SIZE, method_grid, resolve  # noqa: E402

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

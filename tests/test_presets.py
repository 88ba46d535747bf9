"""experiments/presets.py and its tables (experiments/presets/*.toml): every preset is each
paper's own set-up, cited; short mode cuts only what it says; a missing dataset is one line;
earlier results are not replaced without --overwrite; one short preset runs end to end (slow)."""
import dataclasses
import os
import subprocess
import sys

import pytest

import fedjax_drift
from fedjax_drift import algorithms

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'experiments'))
import presets  # noqa: E402

# Fields short mode may change: the cut itself, and the grid collapsed to one point.
CUT = {'rounds', 'seeds', 'grid', 'eval_every',
       'concept_shift_count'}  # scaled with the rounds: the paper's shifts per round


def test_cut_rounds_keep_the_papers_shifts_per_round():
  full, short = _by('fedfor_concept', 'full'), _by('fedfor_concept', 'short')
  assert {c.concept_shift_count for c in full.values()} == {10}  # Table 5: 10 in 200 rounds
  for c in short.values():
    assert c.concept_shift_count == presets.scaled_shift_count(10, 200, c.rounds) >= 1
    c.validate()
  assert presets.scaled_shift_count(10, 200, 100) == 5
  assert presets.scaled_shift_count(10, 200, 5) == 1 and presets.scaled_shift_count(10, 20, 8) == 4
  assert presets.scaled_shift_count(10, 10, 8) == 7  # at most rounds - 1


def _by(name, mode):
  return {(s, m): c for s, m, c in presets.configs(name, mode)}


@pytest.mark.parametrize('name', sorted(presets.PRESETS))
@pytest.mark.parametrize('mode', ['full', 'short', 'cpu'])
def test_every_config_validates_and_builds_its_algorithm(name, mode):
  todo = presets.configs(name, mode)
  if not todo:  # every run waits for a piece this build lacks; the reason is named
    waiting = presets.pending(name, mode)
    assert waiting
    pytest.skip(f'{name} is pending: {"; ".join(waiting)}')
  for _, _, config in todo:
    algorithms.recipe(config)  # validates the algorithm's flags too


@pytest.mark.parametrize('name', sorted(presets.PRESETS))
def test_every_value_has_a_source(name):
  preset = presets.PRESETS[name]
  items = list(preset['setting'].values()) + [preset['seeds']] + list(preset['grid'].values())
  items += [x for scen in preset['scenarios'].values() for x in scen.values()]
  items += [x for extra in preset['scenario_extra'].values()
            for t in extra['methods'].values() for x in t.values()]
  items += [x for m in preset['methods'].values()
            for x in list(m.get('set', {}).values()) + list(m.get('grid', {}).values())]
  assert all(isinstance(src, str) and len(src) > 3 for _, src in items)


@pytest.mark.parametrize('name', sorted(presets.PRESETS))
def test_short_mode_keeps_model_data_and_hyperparameters(name):
  full, short = _by(name, 'full'), _by(name, 'short')
  assert set(short) <= set(full)
  grid_fields = set()
  for key, c in short.items():
    f = full[key]
    grid_fields |= set(presets.parse_grid(f.grid))
    diff = {k for k in dataclasses.asdict(c) if getattr(c, k) != getattr(f, k)}
    assert diff <= CUT | grid_fields, (key, diff - CUT)
    for k in diff & grid_fields:  # a grid collapses to one of the paper's own values
      assert getattr(c, k) in presets.parse_grid(f.grid)[k]
    assert c.rounds <= f.rounds and c.seeds <= f.seeds
  cuts = presets.cuts(name, 'short')
  assert any(x.startswith('rounds:') for x in cuts) and any(x.startswith('seeds:') for x in cuts)


# What the cpu tier keeps from the paper's set-up (presets.cpu_values changes only data, model,
# pipeline, rounds, seeds, evaluation spacing, the client cap and server-side example counts).
CPU_KEEPS = ('algo', 'partition', 'dirichlet_alpha', 'classes_per_client', 'clients_per_round',
             'local_epochs', 'local_steps', 'batch_size', 'lr', 'weight_decay', 'grid',
             'scenario', 'local_terms', 'weighting', 'personalize', 'test_partition')


@pytest.mark.parametrize('name', sorted(presets.PRESETS))
def test_cpu_tier_keeps_methods_partition_participation_and_grids(name):
  full, cpu = _by(name, 'full'), _by(name, 'cpu')
  if not cpu:  # left out: the reason is named (text or multi-domain data) or it is pending
    assert presets.pending(name, 'cpu')
    return
  assert set(cpu) == set(full)
  for key, c in cpu.items():
    f = full[key]
    assert [getattr(c, k) for k in CPU_KEEPS] == [getattr(f, k) for k in CPU_KEEPS], key
    assert c.dataset == 'embedded' and c.model in ('logreg', 'mlp_bn')
    assert c.seeds == presets.CPU_SEEDS >= 3 and c.rounds == min(f.rounds, presets.CPU_ROUNDS)
    assert c.num_clients == (f.num_clients if f.num_clients <= presets.CPU_CLIENTS else
                             max(round(f.num_clients * 6_000 / presets.TRAIN_SIZE[f.dataset]),
                                 f.clients_per_round))
    if f.algo == 'fedgen':  # the FedGen code's MNIST generator, whatever the paper's size
      assert (c.fedgen_hidden, c.fedgen_noise_dim) == (256, 32) != (f.fedgen_hidden,
                                                                     f.fedgen_noise_dim)
  cuts = presets.cuts(name, 'cpu')
  assert any(x.startswith('dataset:') for x in cuts) and any(x.startswith('model:') for x in cuts)


def test_cpu_tier_evaluates_every_round_where_the_table_reports_the_last_10_percent():
  # Every 3 of 20 rounds, the last 10% (rounds 19-20) would hold round 20 only: last10 = final.
  for name, preset in presets.PRESETS.items():
    for c in _by(name, 'cpu').values():
      assert c.eval_every == (1 if preset['metric'] == 'last10' else 3), (name, c.eval_every)


def test_a_preset_that_calibrates_every_evaluation_is_reported_by_personalised_accuracy(tmp_path):
  # fedadc_personalize (FedADC Fig. 7): the table's cells are the clients' calibrated accuracy,
  # not the global model's, so its three calibration variants can differ.
  for c in _by('fedadc_personalize', 'cpu').values():
    assert c.personalize_every_eval and presets.accuracy_column(c) == 'personalized_accuracy'
  assert presets.accuracy_column(_by('fedadc_table', 'cpu')['C=0.1', 'fedavg']) == 'test_accuracy'
  (tmp_path / 'runs.csv').write_text('run,seed\n0,0\n')
  (tmp_path / 'metrics.csv').write_text(
      'run,round,test_accuracy,personalized_accuracy\n0,0,0.1,0.5\n0,3,0.4,0.8\n')
  c = _by('fedadc_personalize', 'cpu')['calibrate', 'fedadc+']
  [run] = presets.read_runs(str(tmp_path), dataclasses.replace(c, grid=''))
  assert run.curve == [(0, 0.5), (3, 0.8)]
  [run] = presets.tables.read_runs(str(tmp_path))
  assert run.curve == [(0, 0.1), (3, 0.4)]


def test_cpu_tier_leaves_out_text_and_multi_domain_presets_in_one_line():
  for name in ('fedgkd_text', 'fedfor_digits', 'fedfor_domainnet'):
    assert not presets.configs(name, 'cpu')
    with pytest.raises(fedjax_drift.UserError, match='not in the cpu tier'):
      presets.run_preset(name, 'cpu', out_root='/nonexistent/never-written')


def test_fedadc_uses_the_papers_cohorts_and_weight_decay():
  fig1 = _by('fedadc_shards', 'full')
  for c in fig1.values():
    assert (c.num_clients, c.clients_per_round, c.local_steps, c.batch_size) == (100, 20, 8, 64)
    assert c.weight_decay == 4e-4 and c.rounds == 500 and c.seeds == 10
  table = _by('fedadc_table', 'full')
  for (scen, method), c in table.items():
    assert c.num_clients == 100 and c.clients_per_round == {'C=0.1': 10, 'C=0.2': 20}[scen]
    assert (c.local_epochs, c.batch_size, c.rounds, c.seeds) == (2, 50, 500, 4)
  c = table['C=0.2', 'fedadc']
  assert c.weight_decay == 5e-5 and presets.parse_grid(c.grid)['lr'] == [0.1, 0.05, 0.03]
  c = table['C=0.2', 'moon']
  assert (c.lr, c.weight_decay, c.moon_temperature) == (0.01, 1e-5, 0.5)
  assert presets.parse_grid(c.grid) == {'moon_mu': [1.0, 5.0]}
  c = table['C=0.2', 'fedgkd']
  assert (c.kd_temperature, c.gkd_gamma, c.local_momentum) == (0.5, 0.2, 0.9)
  assert table['C=0.2', 'fedntd'].local_momentum == 0.9
  assert table['C=0.2', 'fedrs'].local_momentum == 0.9
  assert table['C=0.2', 'fedprox'].local_momentum == 0.0
  assert table['C=0.2', 'feddyn'].weight_decay == 1e-3
  assert table['C=0.2', 'fedadc+'].kd_lambda == 0.35
  assert presets.parse_grid(table['C=0.2', 'fedavg'].grid)['weight_decay'] == \
      [0.0, 1e-5, 5e-5, 1e-4]


def test_fedfor_is_resnet20_bn_on_imbalanced_cifar10():
  budget = {'E=1': 200, 'E=2': 200, 'E=4': 100, 'E=8': 100, 'E=16': 50}
  for (scen, _), c in _by('fedfor_epochs', 'full').items():
    assert (c.model, c.dataset, c.scenario) == ('resnet20_bn', 'cifar10', 'longtail_stateless')
    assert (c.batch_size, c.lr, c.local_momentum, c.weight_decay) == (128, 0.01, 0.0, 0.0)
    assert (c.imbalance_ratio, c.client_fraction, c.seeds) == (0.01, 0.1, 3)
    assert c.rounds == budget[scen] and c.local_epochs == int(scen[2:])
    if c.algo == 'fedfor':
      assert c.for_alpha == 5.0


def test_fedgkd_is_resnet8_gn16_at_section_5_1():
  scen = set()
  for (s, _), c in _by('fedgkd_dirichlet', 'full').items():
    scen.add(c.dirichlet_alpha)
    assert (c.model, c.num_clients, c.clients_per_round, c.rounds) == ('resnet8', 20, 4, 100)
    assert (c.local_epochs, c.batch_size, c.lr, c.local_momentum, c.weight_decay) == \
        (20, 64, 0.05, 0.9, 1e-5)
  assert scen == {1.0, 0.5, 0.1}


def test_igfl_is_mcmahans_cifar_cnn_at_section_5_1():
  seen = set()
  for (s, m), c in _by('igfl', 'full').items():
    assert (c.model, c.dataset, c.batch_size) == ('cnn_mcmahan_cifar', 'cifar10', 100)
    seen.add((c.local_epochs, c.clients_per_round / c.num_clients))
    lrs = presets.parse_grid(c.grid)['lr']
    assert lrs == [1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1]
    if m == 'fedavgm':
      assert (c.algo, c.beta, c.server_lr) == ('slowmo', 0.9, 1.0)
  assert seen == {(1, 1.0), (5, 1.0), (1, 0.1), (5, 0.1)}


def test_every_experiment_of_the_five_papers_has_a_row_and_a_preset():
  ids = [e['id'] for e in presets.EXPERIMENTS]
  want = ([f'J{i}' for i in range(1, 11)] + ['C1', 'C2'] + [f'F{i}' for i in range(1, 6)] +
          [f'G{i}' for i in range(1, 14)] + [f'I{i}' for i in range(1, 8)])
  assert ids == want
  doc = presets.document()
  for e in presets.EXPERIMENTS:
    assert e['where'] and e['compares'] and e['presets']
    for name in e['presets']:
      assert name in presets.PRESETS and presets.command(name) in doc
      assert set(e.get('only', ())) <= set(presets.PRESETS[name]['methods'])
  # The text experiments point at the text issue until it lands.
  for name in ('fedgkd_text', 'fedgkd_loss'):
    if presets.pending(name):
      assert any('issue #20' in r for r in presets.pending(name))


def test_pending_is_what_the_build_lacks():
  values = {'algo': 'fedavg', 'dataset': 'cifar10', 'model': 'cnn_cifar'}
  assert presets.missing(values) == []
  assert presets.missing({**values, 'no_such_flag': 1}) == ['flag --no_such_flag']
  assert presets.missing({**values, 'dataset': 'no_such_data'}) == ['dataset no_such_data']
  assert presets.missing({**values, 'model': 'no_such_model'}) == ['model no_such_model']
  assert presets.missing({**values, 'algo': 'no_such_algo'}) == ['algorithm no_such_algo']
  assert presets.missing({**values, 'partition': 'no_such'}) == ['--partition=no_such']


def test_doc_is_current():
  # (That nothing points outside the repository is test_readme's check, for every file.)
  with open(presets.DOC) as f:
    assert f.read() == presets.document(), 'run: python experiments/presets.py all --write_doc'


def test_run_metrics_as_the_papers_report_them():
  curve = [(0, 0.1)] + [(t, t / 100) for t in range(10, 101, 10)]
  m = presets.run_metrics(curve, 100, 0.55)
  assert m['final'] == 1.0 and m['best'] == 1.0 and m['best_half'] == 0.5
  assert m['last10'] == 1.0 and m['rounds_to_target'] == 60


def test_missing_dataset_is_one_line(tmp_path):
  env = dict(os.environ, FEDJAX_DRIFT_CACHE=str(tmp_path))
  proc = subprocess.run([sys.executable, os.path.join(ROOT, 'experiments', 'presets.py'),
                         'igfl', '--mode=short'], env=env, capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode == 2
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and 'cifar10' in lines[0] and 'import' in lines[0], proc.stderr


def test_earlier_results_are_not_replaced_without_overwrite(tmp_path):
  (tmp_path / 'results.json').write_text('{}')
  with pytest.raises(fedjax_drift.UserError, match='--overwrite'):
    presets.check_out(str(tmp_path), overwrite=False)
  presets.check_out(str(tmp_path), overwrite=True)
  committed = os.path.join(presets.COMMITTED, 'fedadc_shards-cpu')
  if os.path.exists(os.path.join(committed, 'results.json')):
    with pytest.raises(fedjax_drift.UserError, match='committed'):
      presets.check_out(committed, overwrite=False)
  assert not presets.default_out('igfl', 'short').startswith(presets.COMMITTED)


@pytest.mark.slow
def test_short_igfl_runs_one_round_on_the_embedded_data(tmp_path):
  # One local step per client, not an epoch (6 steps a cross-silo client): what is checked
  # (scenarios, model, rounds, the table's notes) is the same, at half the work.
  results = presets.run_preset('igfl', 'short', dataset='embedded', rounds=1,
                               out_root=str(tmp_path), only=('igfl',),
                               log=lambda *_: None, flags={'local_steps': 1, 'local_epochs': 0})
  assert set(results['scenarios']) == {'cross-silo E=1', 'cross-device rho=0.1 E=1'}
  for rows in results['scenarios'].values():
    assert [r['method'] for r in rows] == ['igfl']
    for r in rows:
      assert 0.0 <= r['final']['mean'] <= 1.0
      assert r['config']['model'] == 'cnn_mcmahan_cifar' and r['config']['rounds'] == 1
  table = open(tmp_path / 'table.md').read()
  assert 'Mode `short`' in table and 'dataset embedded instead' in table
  assert '--local_epochs=0 --local_steps=1' in table


# Tiny stand-in files in each dataset's official layout: dataset -> (module, writer, file name).
# tests/layouts.py (cifar100, tiny_imagenet, emnist, svhn, digits5, domainnet) is written by
# the data readers' work; rows whose writer is not there yet are skipped, saying so.
WRITERS = {'cifar10': ('fixtures', 'write_cifar10_python', 'cifar-10-python.tar.gz'),
           'cifar100': ('layouts', 'write_cifar100_tar', None),
           'tiny_imagenet': ('layouts', 'write_tiny_imagenet_zip', None, {'per_class': 6}),
           'emnist': ('layouts', 'write_emnist_zip', None),
           'digits5': ('layouts', 'write_digits5', None),
           'domainnet': ('layouts', 'write_domainnet', None),  # None: the writer takes --data_dir
           'ag_news': ('layouts', 'write_ag_news_tgz', None, {'per_class': 12}),
           'sst5': ('layouts', 'write_sst5_zip', None, {'per_class': 12})}


def _one_per_program():
  """One live full-mode config per (preset, dataset, model, algorithm, local terms, scenario
  kind): what building can tell apart; the other rows differ only in numbers."""
  seen, out = set(), []
  for name in presets.PRESETS:
    for scen, label, c in presets.configs(name, 'full'):
      key = (c.dataset, c.model, c.algo, c.local_terms, c.scenario)
      if key not in seen:
        seen.add(key)
        out.append(pytest.param(name, scen, label, id=f'{name}-{scen}-{label}'))
  return out


@pytest.mark.slow
@pytest.mark.parametrize('name,scen,label', _one_per_program())
def test_full_preset_builds_on_tiny_official_files(name, scen, label, tmp_path):
  import importlib
  from fedjax_drift import study
  c = {(s, m): c for s, m, c in presets.configs(name, 'full')}[scen, label]
  if c.dataset not in WRITERS:
    pytest.skip(f'no tiny writer for --dataset={c.dataset}')
  module, writer, file_name, *kwargs = WRITERS[c.dataset]
  try:
    write = getattr(importlib.import_module(module), writer)
  except (ImportError, AttributeError):
    pytest.skip(f'tests/{module}.py has no {writer} yet')
  write(str(tmp_path / file_name) if file_name else str(tmp_path), **(kwargs or [{}])[0])
  # Shrink only what the tiny files cannot hold: clients (not below one per domain), the
  # validation split, one seed and one grid point (the grid is validated above); model,
  # algorithm, partition kind and pipeline stay.
  small = dataclasses.replace(
      c, data_dir=str(tmp_path), seeds=1, grid='',
      num_clients=c.num_clients if c.partition == 'domains' else min(c.num_clients, 4),
      clients_per_round=min(c.clients_per_round, 4 if c.partition != 'domains' else 6),
      vote_val_size=min(c.vote_val_size, 2), classes_per_client=min(c.classes_per_client, 2),
      # a carved split of half, so that the few examples of each tiny client still give one
      val_fraction=0.5 if c.val_fraction else 0.0)
  if c.pretrained:  # a tiny base checkpoint in Hugging Face's layout stands in for DistilBERT's
    from test_text_models import write_tiny_distilbert  # pylint: disable=g-import-not-at-top
    small = dataclasses.replace(small, pretrained=write_tiny_distilbert(str(tmp_path / 'ckpt')))
  built = study.build(small.validate())
  assert built.experiments and built.state is not None


def _preset_cli(*args, timeout=600):
  return subprocess.run([sys.executable, os.path.join(ROOT, 'experiments', 'presets.py'), *args],
                        capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_jobs_run_methods_in_worker_processes_with_the_same_results(tmp_path):
  """--jobs=2 runs FedADC's cohort preset's two methods side by side: same results.json
  numbers as one at a time (the same programs on the same seeds)."""
  args = ['fedadc_cohort', '--mode=cpu', '--rounds=2', '--seeds=2']
  one = _preset_cli(*args, f'--out={tmp_path / "one"}')
  two = _preset_cli(*args, '--jobs=2', f'--out={tmp_path / "two"}')
  assert one.returncode == 0 and two.returncode == 0, one.stderr + two.stderr
  import json  # pylint: disable=g-import-not-at-top
  a, b = (json.load(open(tmp_path / d / 'results.json')) for d in ('one', 'two'))
  strip = lambda res: {s: [{k: v for k, v in r.items() if k != 'config'} for r in rows]
                       for s, rows in res['scenarios'].items()}
  assert strip(a) == strip(b) and len(a['scenarios']) >= 1


def test_all_skips_presets_with_no_live_run_and_jobs_below_one_is_refused(tmp_path):
  proc = _preset_cli('all', '--mode=cpu', '--jobs=0', f'--out={tmp_path}', timeout=120)
  assert proc.returncode == 2 and proc.stderr.strip() == 'error: --jobs=0 must be at least 1'
  assert presets.pending_line('fedgkd_text', 'cpu').startswith('not in the cpu tier: text')
  assert presets.pending_line('fedgkd_toy', 'cpu').startswith('pending: this build lacks')

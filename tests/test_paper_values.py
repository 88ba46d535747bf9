"""The papers' stated values (experiments/presets/paper_values/*.toml, issue 43 item 1) against
what every preset resolves to in full mode, and how presets inherit (item 2: `unset` never
removes a preset's own setting; --show lists every value that differs from the defaults)."""
import dataclasses
import math
import os
import sys
import tomllib

import pytest

import fedjax_drift

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'experiments'))
from presetlib import loading  # noqa: E402
from presetlib.documents import resolved_rows  # noqa: E402
from presetlib.loading import EXPERIMENTS, PAPERS, PRESETS  # noqa: E402
from presetlib.tiers import TRAIN_SIZE, half_round, resolve  # noqa: E402

TABLES = os.path.join(ROOT, 'experiments', 'presets', 'paper_values')
DEFAULTS = {f.name: f.default for f in dataclasses.fields(fedjax_drift.Config)}
GN_CHANNELS = {'resnet8': 16}  # models whose GroupNorm rule (gn_group_size 0) is 16 channels a group


def _examples(v):
  """Training examples the clients hold: the training set less the held-out split (and the
  examples FedGKD-Vote draws apart when nothing else is held out)."""
  n = TRAIN_SIZE[v['dataset']] * (1 - v['val_fraction'])
  return n - (v.get('vote_val_size', 0) if v['algo'] == 'fedgkd_vote' and not v['val_fraction']
              else 0)


# Values the papers state that are not one Config field: how each is read off a resolved run.
DERIVED = {
    'seeds': lambda run: run['seeds'],
    'participation': lambda run: run['values']['clients_per_round'] / run['values']['num_clients'],
    'train_examples': lambda run: _examples(run['values']),
    'examples_per_client': lambda run: _examples(run['values']) / run['values']['num_clients'],
    'steps_per_round': lambda run: (_examples(run['values']) / run['values']['num_clients'] /
                                    run['values']['batch_size'] * run['values']['local_epochs']),
    'half_round': lambda run: half_round(PRESETS[run['preset']], run['scenario'],
                                         run['values']['rounds']),
    'gn_channels_per_group': lambda run: (run['values'].get('gn_group_size') or
                                          GN_CHANNELS.get(run['values']['model'], 0)),
}
SCOPE = ('experiments', 'presets', 'scenarios', 'methods', 'algos', 'datasets')


def load_tables():
  """{paper: table} of experiments/presets/paper_values/<paper>.toml, one per paper."""
  out = {}
  for paper in PAPERS:
    with open(os.path.join(TABLES, f'{paper}.toml'), 'rb') as f:
      out[paper] = tomllib.load(f)
  return out


PAPER_TABLES = load_tables()
EXPERIMENT_PRESETS = {e['id']: e['presets'] for e in EXPERIMENTS}
_RUNS = {}


def run_of(preset, scenario, label):
  """One run resolved in full mode, as the runner resolves it (cached)."""
  key = (preset, scenario, label)
  if key not in _RUNS:
    values, grid, seeds = resolve(preset, 'full', scenario, label)
    _RUNS[key] = {'preset': preset, 'scenario': scenario, 'label': label, 'values': values,
                  'grid': grid, 'seeds': seeds}
  return _RUNS[key]


def scope(entry):
  """The runs (preset, scenario, method label) an entry covers: its experiments' presets (or
  its own `presets`), narrowed by `scenarios`, `methods` (labels), `algos` and `datasets`."""
  names = entry.get('presets') or [p for e in entry['experiments'] for p in EXPERIMENT_PRESETS[e]]
  out = []
  for name in dict.fromkeys(names):
    preset = PRESETS[name]
    for s in preset['scenarios']:
      if 'scenarios' in entry and s not in entry['scenarios']:
        continue
      for label, m in preset['methods'].items():
        if 'methods' in entry and label not in entry['methods']:
          continue
        if 'algos' in entry and m['algo'] not in entry['algos']:
          continue
        if 'datasets' in entry and run_of(name, s, label)['values']['dataset'] not in \
            entry['datasets']:
          continue
        out.append((name, s, label))
  return out


def actual(field, run):
  """The resolved value of `field` (a Config field, a tuned grid, or one of DERIVED)."""
  if field in DERIVED:
    return DERIVED[field](run)
  if field in run['grid']:
    return list(run['grid'][field])
  return run['values'].get(field, DEFAULTS[field])


def same(stated, ours):
  if isinstance(stated, list):
    return isinstance(ours, list) and len(stated) == len(ours) and all(
        same(a, b) for a, b in zip(stated, ours))
  if isinstance(stated, (int, float)) and not isinstance(stated, bool):
    return (isinstance(ours, (int, float)) and not isinstance(ours, bool) and
            math.isclose(stated, ours, rel_tol=1e-9, abs_tol=1e-12))
  return stated == ours


def check(paper):
  """(mismatches, the departures used): every stated value against every run it covers."""
  table, wrong, used = PAPER_TABLES[paper], [], set()
  departures = table.get('departures', [])
  for i, entry in enumerate(table['stated']):
    for field, stated in entry['values'].items():
      for run_key in scope(entry):
        ours = actual(field, run_of(*run_key))
        if same(stated, ours):
          continue
        excused = [j for j, d in enumerate(departures) if d['field'] == field and
                   run_key in scope(d) and same(d['ours'], ours)]
        if excused:
          used.update(excused)
        else:
          wrong.append(f'{"/".join(run_key)}: {field} = {ours!r}, the paper states {stated!r} '
                       f'({entry["where"]}: "{entry["quote"]}")')
  return wrong, used


@pytest.mark.parametrize('name', ['fedgkd_text', 'fedgkd_loss_sst5'])
def test_text_presets_keep_their_own_lr_and_weight_decay(name):
  """FedGKD §5.1: "Adam ... learning rate is set 1e-5, weight decay is set 0" on every run."""
  preset = PRESETS[name]
  for s in preset['scenarios']:
    for label in preset['methods']:
      values = resolve(name, 'full', s, label)[0]
      assert (values['lr'], values['weight_decay'], values['local_optimizer']) == (
          1e-5, 0.0, 'adam'), (s, label)
      assert 'local_momentum' not in values, (s, label)  # unset: the CV presets' 0.9 is gone


def _raw(**child):
  base = {'setting': {'lr': {'v': 0.05, 'src': 'b'}, 'augment': {'v': 'crop_flip', 'src': 'b'}},
          'scenarios': {}, 'methods': {}}
  return {'base': base, 'child': dict(child, base='base')}


def test_unset_removes_inherited_values_only():
  out = loading._inherit('child', _raw(unset=['augment'], setting={'lr': {'v': 1e-5, 'src': 'c'}}))
  assert out['setting'] == {'lr': {'v': 1e-5, 'src': 'c'}}
  with pytest.raises(ValueError, match='child: both sets and unsets lr'):
    loading._inherit('child', _raw(unset=['lr'], setting={'lr': {'v': 1e-5, 'src': 'c'}}))
  with pytest.raises(ValueError, match='unset names momentum, which its base does not set'):
    loading._inherit('child', _raw(unset=['momentum']))


def test_show_lists_every_value_off_the_defaults_with_its_source():
  rows = {(k, v): (where, src) for k, v, where, src in resolved_rows('fedgkd_text')}
  assert rows[('lr', 1e-5)] == ('every run', '§5.1 "learning rate is set 1e-5"')
  assert ('weight_decay', 0.0) not in rows  # the Config default
  assert rows[('gkd_buffer', 3)][0] == 'AG News / fedgkd_vote, SST-5 / fedgkd_vote'
  for name in PRESETS:
    for k, v, where, src in resolved_rows(name):
      assert src and where, (name, k, v)


def test_tables_are_well_formed():
  fields = set(DEFAULTS) | set(DERIVED)
  for paper, table in PAPER_TABLES.items():
    assert table['stated'], paper
    for entry in table['stated'] + table.get('departures', []):
      assert set(entry) <= set(SCOPE) | {'where', 'quote', 'values', 'field', 'ours', 'why'}, entry
      assert entry.get('experiments'), (paper, entry)
      assert set(entry['experiments']) <= set(EXPERIMENT_PRESETS), (paper, entry)
      assert scope(entry), (paper, entry)  # every filter names something that exists
      for key, at in (('scenarios', 1), ('methods', 2)):  # every name it filters by exists
        if key in entry:
          rest = {k: v for k, v in entry.items() if k != key}
          assert set(entry[key]) <= {r[at] for r in scope(rest)}, (paper, key, entry)
    for entry in table['stated']:
      assert entry['where'].strip() and entry['quote'].strip() and entry['values'], entry
      assert set(entry['values']) <= fields, (paper, set(entry['values']) - fields)
    for d in table.get('departures', []):
      assert d['field'] in fields and d['why'].strip() and 'ours' in d, d


@pytest.mark.parametrize('paper', PAPERS)
def test_presets_resolve_to_the_papers_stated_values(paper):
  wrong, _ = check(paper)
  assert not wrong, f'{len(wrong)} resolved value(s) differ from the paper:\n' + '\n'.join(wrong)


@pytest.mark.parametrize('paper', PAPERS)
def test_every_departure_is_in_use(paper):
  _, used = check(paper)
  stale = [d for j, d in enumerate(PAPER_TABLES[paper].get('departures', [])) if j not in used]
  assert not stale, f'departures that excuse nothing: {stale}'


def test_every_experiment_and_every_preset_run_is_covered():
  stated = [e for t in PAPER_TABLES.values() for e in t['stated']]
  assert {x for e in stated for x in e['experiments']} == set(EXPERIMENT_PRESETS)
  covered = {r for e in stated for r in scope(e)}
  every = {(name, s, label) for name, p in PRESETS.items() for s in p['scenarios']
           for label in p['methods']}
  assert not every - covered, f'runs no stated value covers: {sorted(every - covered)}'
  assert {r[0] for r in covered} == set(PRESETS), set(PRESETS) - {r[0] for r in covered}


def test_table_counts():
  """How many values the tables hold (the issue's note): at least one per experiment."""
  counts = {paper: sum(len(e['values']) for e in t['stated']) for paper, t in PAPER_TABLES.items()}
  assert all(counts.values()) and sum(counts.values()) >= 37, counts

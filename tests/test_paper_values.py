"""The papers' stated values (experiments/presets/paper_values/*.toml, issue 43 item 1) against
what every preset resolves to in full mode, and how presets inherit (item 2: `unset` never
removes a preset's own setting; --show lists every value that differs from the defaults)."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'experiments'))
from presetlib import loading  # noqa: E402
from presetlib.documents import resolved_rows  # noqa: E402
from presetlib.loading import PRESETS  # noqa: E402
from presetlib.tiers import resolve  # noqa: E402


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

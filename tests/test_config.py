"""Config's field metadata: every field is documented and grouped, the gridable ones are floats,
and each field's Bounds refuse what validate() refused before, in the same words."""
import dataclasses
import math

import pytest

from fedjax_drift import bounds as bounds_lib
from fedjax_drift import config, config_checks, core_flags
from fedjax_drift.config import Config
from fedjax_drift.errors import UserError

# What follows 'must be' in each bounded field's error, as validate() has always worded it.
RULES = {
    '>= 0': ('init_params_run', 'local_steps', 'local_epochs', 'batch_size', 'cohort_chunk',
             'checkpoint_every', 'run_chunk', 'classes_per_client', 'fedgen_steps',
             'fedgen_batch', 'gn_groups', 'gn_group_size', 'projection_hidden', 'augment_pad',
             'weight_decay', 'krum_byzantine'),
    '>= 0 (0 = only evaluate the start)': ('rounds',),
    '>= 0 (0 = off)': ('clip_grad_norm',),
    '>= 1': ('num_clients', 'clients_per_round', 'eval_every', 'eval_batch_size', 'devices',
             'seeds', 'keep_checkpoints', 'fedgen_noise_dim', 'fedgen_hidden',
             'fedgen_client_batch', 'moon_projection_dim', 'gkd_buffer', 'vote_val_size',
             'personalize_epochs', 'krum_select', 'qsgd_levels', 'straggler_min_steps',
             'pfedme_inner_steps'),
    'a number >= 0': ('memory_budget_gb',),
    'a finite number > 0': ('lr', 'server_lr', 'dirichlet_alpha', 'pfedme_personal_lr'),
    '> 0': ('kd_temperature', 'attention_temperature', 'ntd_temperature', 'server_tau',
            'moon_temperature', 'adam_eps', 'dp_clip'),
    'a finite number >= 0': ('for_alpha', 'gkd_gamma', 'vote_lambda', 'igfl_group', 'prox_mu',
                             'dyn_alpha', 'curv_lambda', 'ntd_beta', 'moon_mu', 'distill_lambda',
                             'fedgen_alpha', 'fedgen_beta', 'fedgen_lr', 'fedgen_weight_decay',
                             'fedgen_diversity', 'dp_noise', 'ditto_lambda', 'pfedme_lambda',
                             'apfl_alpha_lr'),
    'in [0, 1]': ('beta', 'phi', 'kd_lambda', 'server_momentum', 'rs_alpha', 'server_beta1',
                  'server_beta2', 'concept_shift_prob', 'target_accuracy', 'straggler_frac',
                  'fedrep_head_fraction', 'apfl_alpha'),
    'in [0, 1] (or -1 for --beta)': ('beta_local', 'beta_global'),
    'in [0, 1] (a fraction of --lr)': ('lr_min',),
    'in (0, 1]': ('imbalance_ratio', 'client_fraction', 'fedgen_decay', 'topk_fraction'),
    'in (0, 1)': ('dp_delta',),
    'in [0, 0.5)': ('trim_beta',),
    'in [0, 1)': ('local_momentum', 'adam_b1', 'adam_b2', 'dropout_prob'),
    "in [0, 1) (or -1 for the model's own)": ('dropout',),
    "a finite number > 0 (or -1 for the model's own)": ('gn_eps',),
    'in [0, 1) (0 = no validation split)': ('val_fraction',),
    'in [0, 180]': ('augment_degrees',),
}
RULE_OF = {name: rule for rule, names in RULES.items() for name in names}
JOINT = ('image_size', 'digits5_parts')  # one message names both

# The flags --grid has always swept.
SWEPT = {'lr', 'server_lr', 'beta', 'beta_local', 'beta_global', 'phi', 'kd_lambda',
         'kd_temperature', 'for_alpha', 'gkd_gamma', 'vote_lambda', 'attention_temperature',
         'igfl_group', 'prox_mu', 'dyn_alpha', 'curv_lambda', 'distill_lambda', 'ntd_beta',
         'fedgen_alpha', 'fedgen_beta', 'fedgen_decay', 'fedgen_lr', 'fedgen_weight_decay',
         'fedgen_diversity', 'ntd_temperature', 'rs_alpha', 'moon_mu', 'moon_temperature',
         'server_tau', 'server_beta1', 'server_beta2', 'local_momentum', 'weight_decay',
         'lr_decay', 'lr_min', 'dropout_prob', 'straggler_frac', 'ditto_lambda',
         'fedrep_head_fraction', 'pfedme_lambda', 'pfedme_personal_lr', 'apfl_alpha',
         'apfl_alpha_lr', 'concept_shift_prob'}

BOUNDED = [f.name for f in config.fields() if f.metadata.get('bounds') is not None]
# The core flags (core_flags.py); config.fields() adds the flags modules declare (registry.flag).
CORE = frozenset(f.name for f in dataclasses.fields(Config))


def _kind(name):
  """The field's type (int or float), from its default."""
  return type(config.config_class().__dataclass_fields__[name].default)


def edges(bounds, kind):
  """Values on the bounds' edges that it accepts: closed ends and the sentinel."""
  values = [bounds.low] if not bounds.low_open and math.isfinite(bounds.low) else []
  values += [bounds.high] if not bounds.high_open and math.isfinite(bounds.high) else []
  values += [bounds.allow] if bounds.allow is not None else []
  return [kind(v) for v in values]


def outside(bounds, kind):
  """Values just outside the bounds: an open end itself, a closed end +- a step, NaN and inf
  where the rule refuses them."""
  step = 1 if kind is int else 0.5
  values = [kind(bounds.low if bounds.low_open else bounds.low - step)]
  if math.isfinite(bounds.high):
    values.append(kind(bounds.high if bounds.high_open else bounds.high + step))
  if kind is float:
    values.append(math.nan)
    if bounds.finite or math.isfinite(bounds.high):
      values.append(math.inf)
  return values


def test_every_field_has_a_group_and_a_help_text():
  for f in config.fields():
    assert f.metadata.get('group') in core_flags.GROUPS, f.name
    assert f.metadata.get('help'), f.name
    assert config.metadata(f.name) == f.metadata


def test_every_gridable_field_is_a_float():
  for name in config.gridable_fields():
    assert config.metadata(name)['gridable'] is True
    assert config.config_class().__dataclass_fields__[name].type is float, name
    assert _kind(name) is float, name


def test_gridable_is_derived_from_the_fields_marked_gridable():
  marked = tuple(f.name for f in config.fields() if f.metadata.get('gridable'))
  assert marked == config.gridable_fields()
  core = tuple(n for n in marked if n in CORE)  # GRIDABLE: the core fields' (core_flags.py)
  assert config.GRIDABLE == core
  assert set(config.GRIDABLE) == SWEPT and len(config.GRIDABLE) == len(SWEPT)


def test_the_bounded_fields_are_those_validate_has_always_checked():
  assert {n for n in BOUNDED if n in CORE} == set(RULE_OF) | set(JOINT)
  for name in BOUNDED:
    assert config.bounds_of(name) is config.metadata(name)['bounds']
  assert config.bounds_of('algo') is None


def test_the_default_config_validates():
  default = Config()
  assert default.validate() is default


@pytest.mark.parametrize('name', sorted(RULE_OF))
def test_a_bound_refuses_outside_values_in_its_words(name):
  bounds, kind = config.bounds_of(name), _kind(name)
  assert bounds.rule() == RULE_OF[name]
  for value in outside(bounds, kind):
    assert not bounds.accepts(value), (name, value)
    with pytest.raises(UserError) as raised:  # the field loop runs before every other rule
      Config(**{name: value}).validate()
    assert str(raised.value) == f'--{name}={value} must be {RULE_OF[name]}'


@pytest.mark.parametrize('name', BOUNDED)
def test_a_bound_accepts_its_edges(name):
  bounds = config.bounds_of(name)
  for value in edges(bounds, _kind(name)):
    assert bounds.accepts(value), (name, value)
    config_checks.each_field(Config(**{name: value}))


@pytest.mark.parametrize('values,message', [
    ({'image_size': -1}, '--image_size=-1 must be >= 0 and --digits5_parts=1 in 1..10'),
    ({'digits5_parts': 0}, '--image_size=0 must be >= 0 and --digits5_parts=0 in 1..10'),
    ({'digits5_parts': 11, 'image_size': 28},
     '--image_size=28 must be >= 0 and --digits5_parts=11 in 1..10'),
])
def test_image_size_and_digits5_parts_share_one_message(values, message):
  with pytest.raises(UserError) as raised:
    Config(**values).validate()
  assert str(raised.value) == message


def test_bound_kinds_say_their_interval():
  assert bounds_lib.UNIT_EXCL_0.rule() == 'in (0, 1]'
  assert bounds_lib.Bounds(2, 5, high_open=True).rule() == 'in [2, 5)'
  assert bounds_lib.ABOVE_0.accepts(math.inf) and not bounds_lib.POSITIVE.accepts(math.inf)
  assert bounds_lib.UNIT.but(allow=-1).accepts(-1) and not bounds_lib.UNIT.accepts(-1)
  assert bounds_lib.NONNEG.but(hint='0 = off').rule() == 'a finite number >= 0 (0 = off)'


def test_choices_are_checked_from_the_metadata():
  with pytest.raises(UserError, match=r'--init=zero is not one of default, zeros'):
    Config(init='zero').validate()

"""The registry (fedjax_drift/registry.py): every entry's declaration holds to what its code reads.

Each entry with a build is built through a Config that records the fields read. The fields it
reads beyond those every run reads (no entry declares them) must be exactly its declared
`reads` (with a declared FALLBACKS field, its fallback too): a build that reads an undeclared
field fails (registry.Values refuses it), and a declaration that names a field its build never
reads fails here, unless that field is read elsewhere for the entry (READ_ELSEWHERE).
"""
import dataclasses
import inspect
import types

import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import algorithms, applies, catalog, cli, evaluation, models, registry, study
from fedjax_drift.algorithms.parts import PartNeeds
from fedjax_drift.config import Config
from fedjax_drift.data import partitions, scenarios
from fedjax_drift.models import zoo
from fedjax_drift.models.info import ModelInfo


def _read_elsewhere(kind, name):
  """The declared fields another module reads for the entry: a part's validation_size
  (PartNeeds: run_data.py carves the server split of that size)."""
  info = registry.get(kind, name).info
  if kind == 'part' and info is not None and info.validation_size:
    return {info.validation_size}
  return set()


class _Recording:
  """A Config that records which fields are read."""

  def __init__(self, config):
    object.__setattr__(self, '_config', config)
    object.__setattr__(self, 'read', set())

  def __getattr__(self, name):
    self.read.add(name)
    return getattr(self._config, name)


def _model():
  # A BatchNorm MLP with a projection head serves every part (FedBN's norms, MOON's features).
  return models.get('mlp_bn', 10, (28, 28, 1), projection_dim=8)


def _context(kind):
  if kind == 'part':
    x_val = np.zeros((4, 28, 28, 1), np.float32)
    return dict(model=_model(), server_data={'x_val': x_val, 'y_val': np.zeros(4, np.int32)},
                parts=('igfl_c',))
  if kind == 'aggregator':
    return dict(parts=('igfl_c',))
  if kind == 'scenario':
    return dict(num_classes=10, y_train=np.arange(100) % 10)
  if kind == 'algorithm':  # a method's build wraps the composed algorithm (algorithms.get)
    model = models.get('mlp', 10, (28, 28, 1))
    return algorithms.method_context(Config(), model, algorithms.get('fedavg', Config(), model))
  if kind == 'model':  # token sequences of 16 over 100 ids serve the text models
    return dict(num_classes=10, input_shape=(2, 16), vocab_size=100)
  if kind == 'partition':  # labels, domain ids and a group column serve every partition
    dataset = types.SimpleNamespace(y_train=np.arange(40) % 4, domains_train=np.arange(40) % 2,
                                    domains_test=np.arange(10) % 2,
                                    groups={'writer': np.arange(40) % 5})
    return dict(dataset=dataset, keep=np.arange(40))
  return {}


def _config(kind, name, tmp_path):
  """The Config an entry is built from: the defaults, but for a partition its own --partition
  value (a file for file:, a column for natural:) and two clients."""
  if kind != 'partition':
    return Config()
  value = {'file:': f'file:{tmp_path / "parts.json"}', 'natural:': 'natural:writer'}.get(name,
                                                                                        name)
  (tmp_path / 'parts.json').write_text('[[0, 1], [2, 3]]')
  return Config(partition=value, num_clients=2)


BUILT = [(kind, name) for kind in registry.KINDS for name, e in registry.entries(kind).items()
         if e.build is not None]


@pytest.mark.parametrize('kind,name', BUILT, ids=[f'{k}:{n}' for k, n in BUILT])
def test_each_build_reads_exactly_what_it_declares(kind, name, tmp_path):
  entry = registry.get(kind, name)
  recording = _Recording(_config(kind, name, tmp_path))
  registry.build(kind, name, recording, **_context(kind))
  common = registry.field_names(Config) - registry.declared()
  fallbacks = {registry.FALLBACKS[f] for f in entry.reads if f in registry.FALLBACKS}
  read = recording.read - common - fallbacks
  assert read == set(entry.reads) - _read_elsewhere(kind, name)


def test_an_undeclared_read_is_refused():
  entry = registry.Entry('part', 'probe', 'reads prox_mu without declaring it')
  with pytest.raises(AttributeError, match='does not declare'):
    registry.Values(entry, Config()).prox_mu  # pylint: disable=expression-not-assigned


def test_every_declared_field_is_a_config_field_and_every_entry_has_a_summary():
  fields = fedjax_drift.config.field_names()  # the flags modules declare (registry.flag) too
  for kind in registry.KINDS:
    for name, entry in registry.entries(kind).items():
      assert set(entry.reads) <= fields, (kind, name)
      assert entry.summary and '\n' not in entry.summary, (kind, name)


def test_partition_functions_take_one_value_per_declared_field():
  """partitions.partition hands each label partition the values of its `reads`, in order;
  every partition is built through its entry (no partition is dispatched by hand)."""
  for name, entry in registry.entries('partition').items():
    assert entry.build is not None and isinstance(entry.info, partitions.PartitionInfo), name
    if entry.info.split is not None:
      params = inspect.signature(entry.info.split).parameters.values()
      required = [p for p in params if p.default is inspect.Parameter.empty][3:]
      assert len(required) == len(entry.reads), name


def test_lists_derive_from_the_registry():
  assert algorithms.names() == registry.names('algorithm')
  assert tuple(algorithms.recipes.registered()) == registry.names('algorithm')
  assert 'fedadc' not in registry.names('server', selectable=True)  # a recipe's, not a flag's
  assert tuple(catalog.values('algo')) == registry.names('algorithm')
  fields = {f.name: f for f in dataclasses.fields(Config)}
  assert tuple(zoo.models()) == registry.names('model') == tuple(catalog.values('model'))
  for kind in ('model', 'init', 'scenario', 'augment', 'lr_schedule', 'personalize',
               'personalize_term', 'local_optimizer'):
    flag = registry.KINDS[kind][0]
    assert tuple(fields[flag].metadata['choices']) == registry.names(kind, selectable=True)


def test_a_registered_part_is_usable_at_once():
  """A new part registers in one place; the flags, checks and builder see it."""
  name = 'test_registry_probe'
  registry.register('part', name, 'a probe term that adds nothing', reads=('prox_mu',),
                    build=lambda v, **_: algorithms.fedprox.proximal_term(0.0 * v.prox_mu))
  try:
    config = Config(local_terms=name, prox_mu=0.5)
    assert name in algorithms.recipe(config).parts
    assert 'prox_mu' in applies.reads(config)
    assert applies.unread_flags(config) == []
  finally:
    registry._ENTRIES['part'].pop(name)  # pylint: disable=protected-access
    registry._DECLARED.clear()  # pylint: disable=protected-access


def test_an_algorithm_registered_after_import_is_listed():
  """No table is a snapshot taken at import (issue 47 item 2): a recipe registered now is in
  algorithms.names(), recipes.registered(), the --algo choices and --list's values."""
  name = 'test_registry_late'
  algorithms.recipes.algorithm(name, algorithms.Recipe(('prox',), summary='a late recipe'))
  try:
    assert name in algorithms.names() and name in algorithms.recipes.registered()
    assert name in catalog.values('algo')
    Config(algo=name).validate()
    assert 'prox_mu' in applies.reads(Config(algo=name))
  finally:
    registry._ENTRIES['algorithm'].pop(name)  # pylint: disable=protected-access
    registry._DECLARED.clear()  # pylint: disable=protected-access


def test_unknown_choice_names_the_flag():
  with pytest.raises(fedjax_drift.UserError, match=r'^--scenario=statc is unknown.*static'):
    registry.get('scenario', 'statc')


def test_a_model_option_is_checked_through_its_entry():
  """--gn_eps is read by the GroupNorm models alone: applies tracks it, models.get refuses it
  on another model, and a --grid axis over it on a model without GroupNorm is refused."""
  assert 'gn_eps' in applies.reads(Config(model='resnet8'))
  assert applies.unread_flags(Config(model='mlp', gn_eps=1e-5)) == ['gn_eps']
  with pytest.raises(fedjax_drift.UserError, match='--gn_eps=1e-05 does not apply'):
    models.get('mlp', 10, (28, 28, 1), gn_eps=1e-5)
  with pytest.raises(fedjax_drift.UserError, match='--grid: gn_eps is not read with --model=mlp'):
    applies.check_grid(Config(model='mlp'), {'gn_eps': [1e-5, 1e-6]})


def test_generic_code_reads_a_part_s_needs_not_its_name():
  """algorithms.recipe, projection_dim and server_validation read the part entry's PartNeeds
  (issue 47 item 1): a new part asking for a server, a projection head and a server validation
  split gets them with no edit elsewhere."""
  name = 'test_registry_needs'
  needs = PartNeeds(server='fedadc', servers=('fedadc_dm',), server_note='the probe\'s server',
                    projection=True, validation_size='vote_val_size', local_norms=True)
  registry.register('part', name, 'a probe with every need', reads=('prox_mu',), info=needs,
                    build=lambda v, **_: algorithms.fedprox.proximal_term(0.0 * v.prox_mu))
  try:
    config = Config(local_terms=name, moon_projection_dim=8)
    assert algorithms.recipe(config).server == 'fedadc'
    assert algorithms.projection_dim(config) == 8
    assert algorithms.server_validation(config) == 'vote_val_size'
    assert algorithms.server_validation(Config()) == '' and algorithms.projection_dim(Config()) == 0
    assert evaluation.keeps_norms_local(algorithms.recipe(config))
    assert not evaluation.keeps_norms_local(algorithms.recipe(Config()))
    server = registry.names('server', selectable=True)[0]
    with pytest.raises(fedjax_drift.UserError, match='do not combine with the probe\'s server'):
      algorithms.recipe(Config(local_terms=name, server_optimizer=server))
  finally:
    registry._ENTRIES['part'].pop(name)  # pylint: disable=protected-access
    registry._DECLARED.clear()  # pylint: disable=protected-access


def test_a_partition_s_test_split_and_a_recipe_without_server_are_properties():
  """evaluation, the flag checks and the CLI read PartitionInfo.splits_test and
  Recipe.federated, not 'domains' or 'local_only' (issue 47 item 1)."""
  assert partitions.splits_test('domains') and not partitions.splits_test('dirichlet')
  assert not partitions.splits_test('no_such_partition')
  assert [n for n, e in registry.entries('algorithm').items() if not e.info.federated] == [
      'local_only']
  with pytest.raises(fedjax_drift.UserError, match='--algo=local_only tests each client'):
    Config(algo='local_only').validate()
  Config(algo='local_only', partition='domains', dataset='digits5').validate()


def _unregister(*kinds_names):
  for kind, name in kinds_names:
    registry._ENTRIES[kind].pop(name, None)  # pylint: disable=protected-access
  registry._DECLARED.clear()  # pylint: disable=protected-access


def test_generic_code_reads_recipe_scenario_model_and_term_properties():
  """The last name tests of generic code are entry properties (issue 47 item 1): a recipe's
  aggregator_flag (IGFL's --attention), its own local optimizer and masks_cohort, a scenario's
  ScenarioInfo.fresh_clients, a model's ModelInfo.twin, a calibration term's build. Probes
  registered under new names get each with no edit elsewhere."""
  recipe = algorithms.Recipe((), 'attention', aggregator_flag='attention',
                             local_optimizer='fedadc_dm', masks_cohort=True)
  algorithms.recipes.algorithm('test_registry_probe', recipe, reads=('attention',))
  registry.register('scenario', 'test_registry_fresh', 'fresh clients every round',
                    build=lambda v, **_: None, info=scenarios.ScenarioInfo(fresh_clients=True))
  registry.register('model', 'test_registry_plain', 'a model whose twin is mlp_bn',
                    build=lambda v, num_classes, **_: None,
                    info=ModelInfo('dense', twin='mlp_bn'))
  try:
    config = Config(algo='test_registry_probe', attention='time')
    assert algorithms.recipe(config).aggregator == 'attention_time'
    assert algorithms.recipe(Config(algo='test_registry_probe', aggregator='median')
                             ).aggregator == 'median'
    assert 'attention' not in applies.reads(Config(algo='test_registry_probe',
                                                   aggregator='median'))
    assert algorithms.local_optimizer_name(config) == 'fedadc_dm'
    with pytest.raises(fedjax_drift.UserError, match=r'^--local_optimizer=adam does not combine '
                       'with --algo=test_registry_probe, whose local optimizer'):
      Config(algo='test_registry_probe', local_optimizer='adam').validate()
    assert 'test_registry_probe' in study.cohort_axis_algos()
    assert study.cohort_axis_algos()[:2] == ('fedavg', 'fedprox')
    assert scenarios.fresh_clients('test_registry_fresh')
    assert not scenarios.fresh_clients('static') and not scenarios.fresh_clients('nope')
    with pytest.raises(fedjax_drift.UserError,
                       match='--scenario=test_registry_fresh draws every client'):
      Config(scenario='test_registry_fresh', val_fraction=0.1).validate()
    flags = {'algo': 'fedbn', 'model': 'test_registry_plain', 'local_terms': ''}
    assert cli._with_bn_model(flags, [])['model'] == 'mlp_bn'  # pylint: disable=protected-access
    assert cli._with_bn_model({**flags, 'algo': 'fedavg'}, [])[  # pylint: disable=protected-access
        'model'] == 'test_registry_plain'
  finally:
    _unregister(('algorithm', 'test_registry_probe'), ('scenario', 'test_registry_fresh'),
                ('model', 'test_registry_plain'))
  assert registry.build('personalize_term', 'none', Config()) is None
  assert registry.build('personalize_term', 'prox', Config()).loss is not None

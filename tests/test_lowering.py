"""Every round program lowers for GPU and TPU with nothing CPU-only in it (issue 33 item 1).

jax lowers a traced program for a platform this host does not have
(`jit(f).trace(...).lower(lowering_platforms=('cuda',))`). Each case builds a study for the
target platform (study.build(..., platform=)), so --conv_impl=auto and
--client_parallelism=auto choose what they would choose there, and lowers one compiled segment
(simulation.lower_segment) for it. The StableHLO text names every custom call the program
makes: none may be CPU-only (the oneDNN convolutions of models/onednn.py, XLA:CPU's host
callbacks), and none may be one this file does not know (a new custom call is reviewed here
first). A host callback cannot even lower for a platform that is absent, so one would fail
here too.

The cases derive from the registry: every algorithm (recipe), every local part added to
FedAvg (--local_terms) and every aggregator (--aggregator), so a new entry is covered when it
registers. Every case lowers on the dense family; every family (dense, conv, BatchNorm,
GroupNorm, text) lowers FedAvg and its evaluation; the full product of cases and families is
marked slow. The data are tiny and shared: 12x12x3 images and 8-token texts, 48 examples,
6 clients, 4 per round (Krum needs 4).
"""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_drift
from fedjax_drift.errors import UserError
from fedjax_drift import engine, evaluation, registry, simulation
from fedjax_drift import study as study_lib
from fedjax_drift.algorithms import recipes
from fedjax_drift.models import onednn

PLATFORMS = ('cuda', 'tpu')
# A small model of every family; resnet8 is the GroupNorm ResNet.
FAMILIES = {'dense': 'logreg', 'conv': 'cnn_mnist', 'batchnorm': 'cnn_mnist_bn',
            'groupnorm': 'resnet8', 'text': 'text_bag'}
BATCHNORM_DENSE = 'mlp_bn'  # the dense family's model for cases that need BatchNorm (FedBN)
# Custom calls only XLA:CPU runs: oneDNN's convolutions and the CPU host callbacks.
CPU_ONLY = tuple(onednn.TARGETS.values()) + ('xla_python_cpu_callback',
                                             'xla_ffi_python_cpu_callback')
# Custom calls an accelerator program may hold: XLA's own sharding annotations.
PORTABLE = ('Sharding', 'SPMDFullToShardShape', 'SPMDShardToFullShape')


def _cases():
  """(id, Config overrides) of every registered algorithm, part and aggregator."""
  cases = [(f'algo={a}', dict(algo=a)) for a in registry.names('algorithm')]
  cases += [(f'part={p}', dict(algo='fedavg', local_terms=p))
            for p in registry.names('part', selectable=True)]
  cases += [(f'aggregator={a}', dict(algo='fedavg', aggregator=a))
            for a in registry.names('aggregator', selectable=True)]
  return cases


CASES = _cases()


def _needs_batchnorm(case):
  """FedBN keeps the BatchNorm layers local: it refuses a model without them."""
  return case.get('local_terms') == 'fedbn' or 'fedbn' in recipes.get(case['algo']).parts


def _weighting(case):
  """--weighting for a part or aggregator added to FedAvg: that of the first recipe using it
  (DP-FedAvg's Gaussian aggregator needs its uniform p_i), else the default."""
  for entry in registry.entries('algorithm').values():
    recipe = entry.info
    if case.get('aggregator') == recipe.aggregator or case.get('local_terms') in recipe.parts:
      return {'weighting': recipe.weighting}
  return {}


def _images(rng, n):
  return rng.integers(0, 256, (n, 12, 12, 3)).astype(np.uint8), rng.integers(0, 3, n)


def _tokens(rng, n, vocab=30, length=8):
  ids = rng.integers(1, vocab, (n, length))
  mask = (np.arange(length)[None] < rng.integers(2, length + 1, n)[:, None]).astype(np.int32)
  return np.stack([ids * mask, mask], 1).astype(np.int32), rng.integers(0, 3, n)


@pytest.fixture(scope='module')
def datasets(tmp_path_factory):
  """{'images': npz path, 'tokens': npz path}, 48 training and 12 test examples each."""
  root, rng = tmp_path_factory.mktemp('lowering'), np.random.default_rng(0)
  (x, y), (xt, yt) = _images(rng, 48), _images(rng, 12)
  np.savez(root / 'images.npz', x_train=x, y_train=y, x_test=xt, y_test=yt)
  (x, y), (xt, yt) = _tokens(rng, 48), _tokens(rng, 12)
  np.savez(root / 'tokens.npz', x_train=x, y_train=y, x_test=xt, y_test=yt,
           vocab_size=np.int32(30))
  return {'images': str(root / 'images.npz'), 'tokens': str(root / 'tokens.npz')}


def _config(datasets, model, case):
  data = datasets['tokens' if model.startswith('text') else 'images']
  personal = recipes.get(case['algo']).personal  # clients' own models need own test splits
  return fedjax_drift.Config(
      dataset=f'npz:{data}', model=model, num_clients=6, clients_per_round=4, local_steps=1,
      local_epochs=0, batch_size=4, rounds=1, eval_every=1, vote_val_size=8, progress=False,
      test_partition='like_train' if personal else 'none', **_weighting(case), **case)


def custom_calls(text):
  """The custom-call targets a lowered program's StableHLO text names."""
  return set(re.findall(r'custom_call @([\w.$-]+)', text))


def check_portable(text, where):
  """Fails, naming `where` and the target, if the program calls anything CPU-only or unknown."""
  calls = custom_calls(text)
  cpu_only = sorted(calls & set(CPU_ONLY))
  assert not cpu_only, f'{where}: CPU-only custom call(s) {cpu_only}'
  callbacks = sorted(c for c in calls if 'callback' in c)
  assert not callbacks, f'{where}: host callback(s) {callbacks}'
  unknown = sorted(calls - set(PORTABLE))
  assert not unknown, f'{where}: custom call(s) {unknown} not known to run on GPU and TPU'


def _choices(config, platform):
  """What a study built for `platform` chooses there: (conv_impl, client chunk width)."""
  family = registry.get('model', config.model).info.family
  return (study_lib.target_choices(config, platform)[0],
          study_lib.parallelism(config, family, platform)[0])


def lower_for_accelerators(config, with_evaluation=False):
  """Builds `config`'s study for each of PLATFORMS and lowers its segment (and, if asked,
  its evaluation) for that platform. Platforms that choose alike share one study and one
  trace (a study is built for a platform only through those choices; building it was a
  fifth of a case's time). Returns {platform: (study, [lowered program texts])}."""
  out, built = {}, {}
  for platform in PLATFORMS:
    choice = _choices(config, platform)
    if choice not in built:
      study = study_lib.build(config, platform=platform)
      exp = study.experiments[0]
      assert (exp.model.conv_impl, exp.chunk) == choice, (platform, choice, exp.strategy)
      traces = [simulation.segment_program(study, platform).trace(
          study.state, study.data, study.inputs, jnp.int32(1))]
      if with_evaluation:
        ev = evaluation.make(study, study_lib.eval_protocol(study.config))
        traces.append(ev.evaluate.trace(study.state, ev.inputs))
      built[choice] = study, traces
    study, traces = built[choice]
    out[platform] = (study, [t.lower(lowering_platforms=(platform,)).as_text() for t in traces])
  return out


@pytest.mark.parametrize('platform', PLATFORMS)
@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_auto_choices_resolve_for_a_target_platform(family, platform):
  """--conv_impl=auto and --client_parallelism=auto choose for the target platform, not for
  this CPU: the native convolution, the cohort vmapped, no XLA:CPU option."""
  config = fedjax_drift.Config(model=FAMILIES[family], clients_per_round=6)
  conv_impl, backend = study_lib.target_choices(config, platform)
  assert (conv_impl, backend) == ('lax', platform)
  kind = registry.get('model', config.model).info.family  # 'dense', 'conv' or 'text'
  assert engine.choose_parallelism('auto', kind, backend, 6)[0] == 6
  assert engine.compiler_options(kind == 'conv', platform) == {}


@pytest.mark.parametrize('family', sorted(FAMILIES))
@pytest.mark.slow
def test_every_family_lowers_fedavg_and_its_evaluation(datasets, family):
  config = _config(datasets, FAMILIES[family], dict(algo='fedavg'))
  for platform, (study, texts) in lower_for_accelerators(config, True).items():
    exp = study.experiments[0]
    assert exp.model.conv_impl == 'lax' and exp.chunk == 4, (platform, exp.strategy)
    for what, text in zip(('segment', 'evaluation'), texts):
      check_portable(text, f'{family} {what} on {platform}')


@pytest.mark.parametrize('case', [c for _, c in CASES], ids=[i for i, _ in CASES])
def test_every_registered_choice_lowers_on_the_dense_family(datasets, case):
  model = BATCHNORM_DENSE if _needs_batchnorm(case) else FAMILIES['dense']
  for platform, (_, texts) in lower_for_accelerators(_config(datasets, model, case)).items():
    check_portable(texts[0], f'{case} on {model} for {platform}')


PRODUCT = [(f'{family}-{i}', family, c) for family in sorted(FAMILIES) if family != 'dense'
           for i, c in CASES if family == 'batchnorm' or not _needs_batchnorm(c)]


@pytest.mark.slow
@pytest.mark.parametrize('family,case', [(f, c) for _, f, c in PRODUCT],
                         ids=[i for i, _, _ in PRODUCT])
def test_every_registered_choice_lowers_on_every_family(datasets, family, case):
  config = _config(datasets, FAMILIES[family], case)
  try:
    lowered = lower_for_accelerators(config)
  except UserError as e:  # a method that refuses this model family (pFedMe, APFL: BatchNorm)
    if 'without BatchNorm' not in str(e):
      raise
    pytest.skip(str(e))
  for platform, (_, texts) in lowered.items():
    check_portable(texts[0], f'{case} on {FAMILIES[family]} for {platform}')


def test_the_check_catches_a_cpu_study_lowered_for_an_accelerator(datasets):
  """The same CNN built for this CPU (auto = oneDNN where it builds) and lowered for a GPU
  carries oneDNN's custom calls: what building for the target platform prevents."""
  if not onednn.available():
    pytest.skip(f'oneDNN extension unavailable: {onednn.unavailable_reason()}')
  study = study_lib.build(_config(datasets, FAMILIES['conv'], dict(algo='fedavg')))
  assert study.experiments[0].model.conv_impl == 'onednn'
  text = simulation.lower_segment(study, 'cuda').as_text()
  assert set(onednn.TARGETS.values()) <= custom_calls(text)
  with pytest.raises(AssertionError, match='CPU-only custom call'):
    check_portable(text, 'cpu study')


def test_a_host_callback_cannot_reach_an_accelerator_program():
  """A callback in the round would fail to lower for an absent platform; on CPU it is a
  custom call the check refuses."""
  def round_with_callback(x):
    return jax.pure_callback(lambda a: a, jax.ShapeDtypeStruct((), jnp.float32), x)
  traced = jax.jit(round_with_callback).trace(jnp.float32(1))
  with pytest.raises(ValueError, match='lowering platform cuda'):
    traced.lower(lowering_platforms=('cuda',))
  with pytest.raises(AssertionError, match='CPU-only custom call'):
    check_portable(traced.lower(lowering_platforms=('cpu',)).as_text(), 'callback')

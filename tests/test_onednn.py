"""--conv_impl=onednn: oneDNN's convolutions as XLA FFI custom calls (models/onednn.py).

Values and gradients equal lax.conv_general_dilated for every convolution shape of the zoo, under
jit, vmap (vmapped clients with their own kernels, a shared kernel, nested vmaps) and lax.scan,
and a whole run equals the im2col run. Tests that need the extension skip, saying why, where it
cannot be built (no `pip install ".[onednn]"`, no compiler, not x86-64 Linux).
"""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import models
from fedjax_drift.models import layers, onednn, zoo
from helpers import tiny_config

TOL = dict(rtol=2e-4, atol=2e-5)  # as tests/test_layers.py: float32 sums in another order


def assert_close(ours, ref, what=''):
  """Leaf by leaf within TOL, the absolute part scaled to the leaf's largest value: a float32
  sum in another order differs by a few ulps of its largest terms, and gradients of the wide
  layers (ResNet-50's 1x1 convs) reach values of 30."""
  for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(ref)):
    b = np.asarray(b)
    scale = max(1.0, float(np.abs(b).max(initial=0.0)))
    np.testing.assert_allclose(a, b, rtol=TOL['rtol'], atol=TOL['atol'] * scale, err_msg=what)


@pytest.fixture(scope='module')
def extension():
  """Builds the extension once (into the session's build cache, conftest.py), or skips."""
  if not onednn.available():
    pytest.skip(f'oneDNN extension unavailable: {onednn.unavailable_reason()}')
  return onednn.version()


def _lax(x, kernel, strides, padding):
  return jax.lax.conv_general_dilated(x, kernel, strides, padding,
                                      dimension_numbers=('NHWC', 'HWIO', 'NHWC'),
                                      precision=jax.lax.Precision.HIGHEST)


def _value_and_grads(conv, x, kernel, cot):
  """conv(x, kernel) and the gradients of <conv(x, kernel), cot> in x and kernel."""
  return jax.value_and_grad(lambda x, w: jnp.sum(conv(x, w) * cot), (0, 1))(x, kernel), \
      conv(x, kernel)


# --- every convolution of the zoo -------------------------------------------------------------

# Input sizes the models are built for (their papers'; the rest take 32x32x3).
_INPUTS = {'cnn_mnist': (28, 28, 1), 'cnn_mnist_bn': (28, 28, 1), 'cnn_emnist': (28, 28, 1),
           'digit_cnn_bn': (28, 28, 3), 'alexnet_bn': (224, 224, 3),
           'resnet50_gn': (64, 64, 3), 'resnet50_bn': (64, 64, 3)}
CONV_MODELS = [name for name, (_, family) in zoo.models().items() if family == 'conv']


def _convs(jaxpr, found):
  """Adds (input [H, W, C], kernel shape, strides, padding) of each conv in `jaxpr` to found."""
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == 'conv_general_dilated':
      found.add((tuple(eqn.invars[0].aval.shape[1:]), tuple(eqn.invars[1].aval.shape),
                 tuple(eqn.params['window_strides']),
                 tuple(tuple(p) for p in eqn.params['padding'])))
    for param in eqn.params.values():  # pjit, custom_vjp, scan, remat bodies
      inner = getattr(param, 'jaxpr', None)
      if inner is not None:
        _convs(getattr(inner, 'jaxpr', inner), found)
  return found


def zoo_conv_shapes(name):
  """The convolutions of model `name` as --conv_impl=lax traces them (its init, batch 1)."""
  model = models.get(name, 10, _INPUTS.get(name, (32, 32, 3)), conv_impl='lax')
  return sorted(_convs(jax.make_jaxpr(model.init)(jax.random.key(0)).jaxpr, set()))


def _small(size, k, stride):
  """A spatial size no larger than 16 (same parity; the kernel still fits at least twice)."""
  return size if size <= 16 else max(16 + size % 2, k + stride)


def _first_seen():
  """{model: the convolutions no model before it in the zoo has}; models adding none (the *_bn
  twins, resnet20, cnn_cifar_moon) are left out."""
  seen, new = set(), {}
  for name in CONV_MODELS:
    shapes = [s for s in zoo_conv_shapes(name) if s not in seen]
    seen.update(shapes)
    if shapes:
      new[name] = shapes
  return new


ZOO_CONVS = _first_seen()


@pytest.mark.parametrize('name', list(ZOO_CONVS))
def test_every_zoo_convolution_equals_lax_conv(extension, name):
  """Value and both gradients of each convolution the model adds (batch 2, inside jit)."""
  del extension
  shapes = ZOO_CONVS[name]
  cases = []
  for i, ((h, w, c), kernel_shape, strides, padding) in enumerate(shapes):
    k = kernel_shape[0]
    keys = jax.random.split(jax.random.key(i), 3)
    x = jax.random.normal(keys[0], (2, _small(h, k, strides[0]), _small(w, k, strides[1]), c))
    kernel = jax.random.normal(keys[1], kernel_shape) / np.sqrt(k * k * c)
    cot = jax.random.normal(keys[2], _lax(x, kernel, strides, padding).shape)
    cases.append((x, kernel, cot, strides, padding))

  @jax.jit
  def both(args):
    ours, ref = [], []
    for (x, kernel, cot), (_, _, _, strides, padding) in zip(args, cases):
      ours.append(_value_and_grads(lambda x, w, s=strides, p=padding: onednn.conv(x, w, s, p),
                                   x, kernel, cot))
      ref.append(_value_and_grads(lambda x, w, s=strides, p=padding: _lax(x, w, s, p),
                                  x, kernel, cot))
    return ours, ref

  ours, ref = both([c[:3] for c in cases])
  for shape, a, b in zip(shapes, ours, ref):
    assert_close(a, b, str(shape))


def test_zoo_shapes_cover_the_cases_the_issue_names():
  """1, 3 and more input channels, stride 1 and 2, SAME and VALID padding all occur."""
  shapes = {s for name in ('cnn_mnist', 'cnn_emnist', 'cnn_cifar', 'resnet50_gn', 'alexnet_bn')
            for s in zoo_conv_shapes(name)}
  c_in = {kernel[2] for _, kernel, _, _ in shapes}
  assert {1, 3} <= c_in and max(c_in) > 3
  assert {strides for _, _, strides, _ in shapes} >= {(1, 1), (2, 2), (4, 4)}
  assert ((0, 0), (0, 0)) in {padding for _, kernel, _, padding in shapes if kernel[0] == 3}


@pytest.mark.parametrize('padding', ['SAME', 'VALID', ((0, 1), (2, 0))])
@pytest.mark.parametrize('k,stride', [(3, 1), (4, 1), (3, 2)])
def test_padding_strings_and_pairs_mean_what_lax_means(extension, padding, k, stride):
  """Odd sizes, even kernels and SAME with strides (lax pads more at the end), explicit
  asymmetric pairs."""
  del extension
  keys = jax.random.split(jax.random.key(3), 3)
  x = jax.random.normal(keys[0], (3, 9, 8, 5))
  kernel = jax.random.normal(keys[1], (k, k, 5, 4))
  cot = jax.random.normal(keys[2], _lax(x, kernel, (stride, stride), padding).shape)
  ours = jax.jit(lambda x, w: _value_and_grads(
      lambda x, w: onednn.conv(x, w, (stride, stride), padding), x, w, cot))(x, kernel)
  ref = _value_and_grads(lambda x, w: _lax(x, w, (stride, stride), padding), x, kernel, cot)
  assert_close(ours, ref)


@pytest.mark.parametrize('stride,padding', [(2, 1), (4, 2)])
def test_strided_conv_of_the_zoo_with_onednn(extension, stride, padding):
  """zoo.conv2d_strided (torch's Conv2d: AlexNet's 11x11/4, ResNet-50's 3x3/2) equals lax."""
  del extension
  keys = jax.random.split(jax.random.key(7), 3)
  k = 3 if stride == 2 else 11
  x = jax.random.normal(keys[0], (2, 23, 22, 3))
  kernel = jax.random.normal(keys[1], (k, k, 3, 4)) / k

  def run(impl):
    return jax.jit(lambda x, w: jax.value_and_grad(lambda x, w: jnp.sum(jnp.sin(
        zoo.conv2d_strided(x, w, stride, padding, impl))), (0, 1))(x, w))(x, kernel)

  assert_close(run('onednn'), run('lax'))


@pytest.mark.parametrize('stride,padding', [(1, 'SAME'), (2, 'VALID')])
def test_gradients_of_gradients_equal_lax(extension, stride, padding):
  """The backward convolutions have VJPs too (each other): grad of a gradient penalty."""
  del extension
  x = jax.random.normal(jax.random.key(8), (2, 7, 6, 3))
  kernel = jax.random.normal(jax.random.key(9), (3, 3, 3, 4)) / 3

  def second(conv):
    loss = lambda x, w: jnp.sum(jnp.tanh(conv(x, w, (stride, stride), padding)))
    penalty = lambda x, w: sum(jnp.sum(jnp.sin(g)) for g in jax.grad(loss, (0, 1))(x, w))
    return jax.jit(jax.grad(penalty, (0, 1)))(x, kernel)

  assert_close(second(onednn.conv), second(_lax))


# --- jit, vmap, scan ---------------------------------------------------------------------------

def _clients():
  """3 clients' batches [3, 2, 7, 7, 2] and kernels [3, 3, 3, 2, 4]."""
  kx, kw = jax.random.split(jax.random.key(5))
  return jax.random.normal(kx, (3, 2, 7, 7, 2)), jax.random.normal(kw, (3, 3, 3, 2, 4)) / 3


def _loss(conv):
  return lambda x, w: jnp.sum(jnp.sin(conv(x, w, (1, 1), 'SAME')))


def _both(fn):
  """fn(conv) with the oneDNN and the lax convolution, compared."""
  assert_close(fn(onednn.conv), fn(_lax))


def test_vmapped_clients_with_their_own_or_a_shared_kernel(extension):
  del extension
  xs, ws = _clients()
  for axes in ((0, 0), (0, None), (None, 0)):  # own kernels, shared kernel, shared batch
    _both(lambda conv, axes=axes: jax.jit(jax.vmap(jax.value_and_grad(_loss(conv), (0, 1)),
                                                   axes))(xs if axes[0] == 0 else xs[0],
                                                          ws if axes[1] == 0 else ws[0]))
  # A shared kernel's gradient sums over the vmapped clients (the custom VJP's batching).
  _both(lambda conv: jax.jit(jax.grad(lambda w: jnp.sum(jax.vmap(_loss(conv), (0, None))(
      xs, w))))(ws[0]))


def test_nested_vmaps_as_a_sweep_over_clients(extension):
  """Runs x clients (the --seeds/--grid axis over the cohort axis), and crossed axes."""
  del extension
  xs, ws = _clients()
  runs_x, runs_w = jnp.stack([xs, 2 * xs]), jnp.stack([ws, ws / 2])
  _both(lambda conv: jax.jit(jax.vmap(jax.vmap(jax.grad(_loss(conv), (0, 1)))))(runs_x, runs_w))
  _both(lambda conv: jax.jit(jax.vmap(jax.vmap(jax.grad(_loss(conv), (0, 1)), (0, None)),
                                      (None, 0)))(xs, ws))


def test_local_sgd_in_a_scan_sequential_and_vmapped(extension):
  """Three SGD steps in lax.scan, for one client and for vmapped clients."""
  del extension
  xs, ws = _clients()

  def train(conv, w):
    def step(w, x):
      return w - 0.1 * jax.grad(_loss(conv), 1)(x, w), None
    return jax.lax.scan(step, w, xs)[0]

  _both(lambda conv: jax.jit(lambda w: train(conv, w))(ws[0]))
  _both(lambda conv: jax.jit(jax.vmap(lambda w: train(conv, w)))(ws))
  _both(lambda conv: jax.jit(lambda ws: jax.lax.map(lambda w: train(conv, w), ws))(ws))


# --- models and whole runs ---------------------------------------------------------------------

@pytest.mark.parametrize('name,shape', [
    ('cnn_mnist', (12, 12, 1)), ('cnn_emnist', (10, 10, 1)),
    pytest.param('cnn_cifar', (8, 8, 3), marks=pytest.mark.slow)])
def test_models_equal_with_onednn_and_im2col(extension, name, shape):
  """Same parameters: same logits and parameter gradients (as test_layers does for lax)."""
  del extension
  built = {impl: models.get(name, 10, shape, conv_impl=impl) for impl in ('im2col', 'onednn')}
  assert built['onednn'].conv_impl == 'onednn'
  params = built['im2col'].init(jax.random.key(0))
  x = jax.random.uniform(jax.random.key(1), (3,) + shape)

  def loss_and_grad(model):
    def loss(p):
      logits, _ = model.train_apply(p, x)
      return jnp.mean(jax.nn.log_softmax(logits)[:, 0]), logits
    return jax.jit(jax.value_and_grad(loss, has_aux=True))(params)

  assert_close(loss_and_grad(built['onednn']), loss_and_grad(built['im2col']))


@pytest.fixture(scope='module')
def images(tmp_path_factory):
  """48 uint8 8x8 grey training images (3 classes), 12 test images, 4 clients."""
  root = tmp_path_factory.mktemp('images')
  rng = np.random.default_rng(0)
  y = rng.integers(0, 3, 60)
  x = np.clip(rng.normal(60 + 50 * y[:, None, None, None], 40, (60, 8, 8, 1)), 0,
              255).astype(np.uint8)
  np.savez(root / 'img.npz', x_train=x[:48], y_train=y[:48], x_test=x[48:], y_test=y[48:])
  parts = [list(range(0, 7)), list(range(7, 19)), list(range(19, 30)), list(range(30, 48))]
  (root / 'parts.json').write_text(json.dumps(parts))
  return str(root / 'img.npz'), str(root / 'parts.json')


def _final_params(images, out, **kw):
  cfg = tiny_config(*images, model='cnn_mnist', batch_size=4, local_steps=3, rounds=2, seeds=2,
                    out=str(out), save_params=str(out) + '.npz', **kw)
  summary = fedjax_drift.run(cfg, log=lambda *a: None)
  with np.load(str(out) + '.npz') as f:
    return summary, {k: f[k] for k in f.files}


@pytest.mark.slow
@pytest.mark.parametrize('strategy', ['sequential', 'vmap'])
def test_whole_run_equals_the_im2col_run(extension, images, tmp_path, strategy):
  """Two seeds (one vmapped program) x 2 rounds of FedAvg on the MNIST CNN, per client strategy."""
  del extension
  runs = {impl: _final_params(images, tmp_path / impl, conv_impl=impl,
                              client_parallelism=strategy) for impl in ('im2col', 'onednn')}
  (summary_a, params_a), (summary_b, params_b) = runs['onednn'], runs['im2col']
  assert params_a.keys() == params_b.keys()
  for name in params_a:
    np.testing.assert_allclose(params_a[name], params_b[name], rtol=1e-4, atol=1e-5,
                               err_msg=name)
  assert summary_a['strategy'] == summary_b['strategy']
  assert (summary_a['conv_impl'], summary_b['conv_impl']) == ('onednn', 'im2col')
  for run_a, run_b in zip(summary_a['runs'], summary_b['runs']):  # the seeds' test metrics
    assert run_a['final_loss'] == pytest.approx(run_b['final_loss'], rel=1e-4)
    assert run_a['final_accuracy'] == pytest.approx(run_b['final_accuracy'], abs=1e-6)


def test_a_default_run_uses_onednn_and_says_so_in_header_and_summary(extension, images,
                                                                    tmp_path):
  """--conv_impl=auto (the default) on this CPU: the header line and summary.json name onednn."""
  del extension
  lines = []
  cfg = tiny_config(*images, model='cnn_mnist', batch_size=4, local_steps=1, rounds=1,
                    out=str(tmp_path / 'run'))
  assert cfg.conv_impl == 'auto'
  summary = fedjax_drift.run(cfg, log=lambda *a: lines.append(' '.join(map(str, a))))
  assert summary['conv_impl'] == 'onednn'
  assert json.load(open(tmp_path / 'run' / 'summary.json'))['conv_impl'] == 'onednn'
  assert [l for l in lines if l.startswith('client parallelism:')][0].endswith(
      '; conv_impl=onednn')


# --- choosing the implementation and falling back -----------------------------------------------

def test_auto_picks_onednn_on_the_cpu_where_it_runs_and_lax_elsewhere(extension):
  del extension  # built here (x86-64 Linux): auto uses it on the CPU backend
  assert layers.resolve_conv_impl('auto', 'cpu') == 'onednn'
  assert layers.resolve_conv_impl('auto', 'gpu') == 'lax'
  assert layers.resolve_conv_impl('auto', 'tpu') == 'lax'
  assert models.get('cnn_mnist', 10, (12, 12, 1)).conv_impl == 'onednn'
  for impl in ('im2col', 'lax', 'onednn'):  # explicit choices stay what they say
    assert models.get('cnn_mnist', 10, (12, 12, 1), conv_impl=impl).conv_impl == impl


def test_auto_falls_back_to_im2col_saying_why_once(monkeypatch, capsys):
  monkeypatch.setattr(layers, '_said', set())
  monkeypatch.setattr(onednn, '_state', {'reason': 'oneDNN is not installed (pip ...)'})
  assert layers.resolve_conv_impl('auto', 'cpu') == 'im2col'
  assert models.get('cnn_mnist', 10, (12, 12, 1)).conv_impl == 'im2col'
  assert capsys.readouterr().err == ('--conv_impl=auto: oneDNN extension unavailable: '
                                     'oneDNN is not installed (pip ...); using im2col\n')
  assert layers.resolve_conv_impl('auto', 'gpu') == 'lax'  # no oneDNN wanted: nothing said
  assert capsys.readouterr().err == ''


def test_models_without_convolutions_never_build_the_extension(monkeypatch, capsys):
  """auto on a dense or text model: nothing to convolve, so no build, no libdnnl loaded."""
  monkeypatch.setattr(onednn, '_state', {})
  monkeypatch.setattr(onednn, 'build', lambda: pytest.fail('built for a dense model'))
  assert models.get('mlp', 3, (6,)).conv_impl == 'im2col'
  assert layers.resolve_conv_impl('auto', 'cpu', convolves=False) == 'im2col'
  assert onednn._state == {} and capsys.readouterr().err == ''  # pylint: disable=protected-access


def test_onednn_falls_back_with_one_line_where_it_cannot_run(monkeypatch, capsys):
  monkeypatch.setattr(layers, '_said', set())
  assert layers.resolve_conv_impl('onednn', 'gpu') == 'lax'
  assert layers.resolve_conv_impl('onednn', 'gpu') == 'lax'
  assert capsys.readouterr().err.count('CPU backend only') == 1  # said once
  monkeypatch.setattr(onednn, '_state', {'reason': 'oneDNN is not installed (pip ...)'})
  assert layers.resolve_conv_impl('onednn', 'cpu') == 'im2col'
  assert models.get('cnn_mnist', 10, (12, 12, 1), conv_impl='onednn').conv_impl == 'im2col'
  err = capsys.readouterr().err
  assert err.strip() == '--conv_impl=onednn: oneDNN is not installed (pip ...); using im2col'


def test_build_reports_why_without_onednn_or_compiler(monkeypatch, tmp_path):
  """No oneDNN found, or no compiler: a RuntimeError naming what is missing, nothing built."""
  monkeypatch.setenv('FEDJAX_DRIFT_ONEDNN_CACHE', str(tmp_path))
  monkeypatch.setattr(onednn, 'find_onednn', lambda: None)
  if os.uname().machine.lower() in ('x86_64', 'amd64'):
    with pytest.raises(RuntimeError, match='not installed'):
      onednn.build()
    monkeypatch.setattr(onednn, 'find_onednn', lambda: ('/nowhere/include', '/nowhere/lib'))
    monkeypatch.setattr(onednn, '_compiler', lambda: None)
    with pytest.raises(RuntimeError, match='no C\\+\\+ compiler'):
      onednn.build()
  else:
    with pytest.raises(RuntimeError, match='x86-64'):
      onednn.build()
  assert not os.listdir(tmp_path)


def test_build_cache_is_its_own_variable_or_under_the_dataset_cache(monkeypatch, tmp_path):
  monkeypatch.setenv('FEDJAX_DRIFT_ONEDNN_CACHE', str(tmp_path / 'shared'))
  assert onednn.cache_dir() == str(tmp_path / 'shared')
  monkeypatch.delenv('FEDJAX_DRIFT_ONEDNN_CACHE')
  monkeypatch.setenv('FEDJAX_DRIFT_CACHE', str(tmp_path / 'cache'))
  assert onednn.cache_dir() == str(tmp_path / 'cache' / 'onednn')


@pytest.mark.skipif(os.uname().machine.lower() not in ('x86_64', 'amd64'), reason='x86-64 only')
def test_concurrent_builders_compile_once_and_never_see_a_partial_file(monkeypatch, tmp_path):
  """Four threads (each its own lock file handle, as separate processes have) build into one
  directory: one compiles, the others wait and load its finished library."""
  import threading  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  monkeypatch.setenv('FEDJAX_DRIFT_ONEDNN_CACHE', str(tmp_path))
  monkeypatch.setattr(onednn, 'find_onednn', lambda: ('/inc', '/lib'))
  monkeypatch.setattr(onednn, '_compiler', lambda: 'g++')
  monkeypatch.setattr(onednn, '_library_path', lambda *a: str(tmp_path / 'onednn_conv-x.so'))
  compiled = []

  def fake_compile(compiler, found, path):
    del compiler, found
    compiled.append(path)
    with open(path + '.tmp', 'w') as f:  # written slowly, then renamed as _compile does
      f.write('half')
      time.sleep(0.2)
      f.write(' and whole')
    os.replace(path + '.tmp', path)
    with open(path + '.sha256', 'w') as f:  # as _compile writes it, after the library
      f.write(onednn._sha256(path) + '\n')  # pylint: disable=protected-access

  monkeypatch.setattr(onednn, '_compile', fake_compile)
  paths = []
  threads = [threading.Thread(target=lambda: paths.append(onednn.build())) for _ in range(4)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert compiled == [str(tmp_path / 'onednn_conv-x.so')]
  assert paths == compiled * 4
  assert open(paths[0]).read() == 'half and whole'


# --- the benchmark's comparison ------------------------------------------------------------------

def test_bench_runs_each_jax_implementation_per_conv_impl_and_pairs_them():
  """--conv_impls=im2col,onednn: A B C order, and each row's paired ratio against im2col."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'benchmarks',
                      'bench.py')
  spec = importlib.util.spec_from_file_location('bench', path)
  bench = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(bench)
  assert bench.with_conv_impls(['engine-seq', 'torch-loop'], 'im2col,onednn') == [
      'engine-seq+im2col', 'engine-seq+onednn', 'torch-loop']
  assert bench.with_conv_impls(['engine-seq', 'torch-loop'], '') == ['engine-seq', 'torch-loop']
  runs = [dict(workload='cnn_mnist_k2', implementation=impl, rep=rep, sample_grads_per_s=rate,
               peak_rss_gb=1.0, compile_s=1.0)
          for rep, rates in enumerate([(100, 150, 120), (200, 260, 250)])
          for impl, rate in zip(['engine-seq+im2col', 'engine-seq+onednn', 'torch-loop'], rates)]
  rows = {r['implementation']: r for r in bench.summarise(runs, [])}
  assert rows['engine-seq+onednn']['vs_im2col']['median'] == pytest.approx((1.5 + 1.3) / 2)
  assert rows['engine-seq+onednn']['vs_torch_loop']['min'] == pytest.approx(1.04)
  assert 'vs_im2col' not in rows['torch-loop']

"""How much work a mode is: an estimate from FLOPs, not a measurement."""
import math
import sys

import jax
import jax.numpy as jnp

from fedjax_drift import models
from fedjax_drift.config import grid_points, parse_grid
from fedjax_drift.data import multidomain
from presetlib import datasizes
from presetlib.plans import configs

CPU_GFLOPS = 60  # the README's benchmark: CNN training ran at ~62 GFLOP/s on the 2-core CPU
# MFLOP per sample-gradient of the cpu tier's models (forward + backward = 3x the forward
# multiply-adds x 2 on a 28x28 input: logreg 7,840 MACs, the 2x200 MLP 198,800).
CPU_MFLOP = {'logreg': 0.047, 'mlp': 1.2, 'mlp_bn': 1.2}
UNKNOWN_MFLOP = 100  # a run whose model and input have no measured cost (said so)


# --- What a run trains on: from its resolved Config, not a per-dataset constant ---
# The input shape of the datasets whose readers give one size (one example, no batch axis);
# domainnet and digits5 are read at --image_size (0: the reader's default size), text at
# --max_seq_len tokens (ids and attention mask).
NATIVE_SHAPES = {'cifar10': (32, 32, 3), 'cifar100': (32, 32, 3), 'tiny_imagenet': (64, 64, 3),
                 'emnist': (28, 28, 1), 'embedded': (28, 28, 1)}
RESIZED = {'domainnet': multidomain.DOMAINNET_SIZE, 'digits5': multidomain.DIGITS5_SIZE}
TEXT = ('ag_news', 'sst5')
NUM_CLASSES = {'cifar10': 10, 'cifar100': 100, 'tiny_imagenet': 200, 'domainnet': 10,
               'digits5': 10, 'emnist': 62, 'ag_news': 4, 'sst5': 5, 'embedded': 10}
EMNIST_CLASSES = {'byclass': 62, 'bymerge': 47, 'balanced': 47, 'letters': 26, 'digits': 10,
                  'mnist': 10}
TEXT_VOCAB = 30522  # DistilBERT's tokenizer


def input_shape(c):
  """One example's input shape in the run `c` (a Config), None for a dataset not known here."""
  if c.dataset in TEXT:
    return (2, c.max_seq_len)
  if c.dataset in RESIZED:
    size = c.image_size or RESIZED[c.dataset]
    return (size, size, 3)
  return NATIVE_SHAPES.get(c.dataset)


def num_classes(c):
  if c.dataset == 'cifar100' and c.cifar100_labels == 'coarse':
    return 20
  if c.dataset == 'emnist':
    return EMNIST_CLASSES.get(c.emnist_split, 62)
  return NUM_CLASSES.get(c.dataset)


def cost_key(c):
  """(model, input shape, classes): the XLA_COST entry that prices the run `c`."""
  return c.model, input_shape(c), num_classes(c)


def client_examples(c):
  """Mean training examples of a client of the run `c`: datasizes.client_sizes (the run's
  own dataset, parts, validation share and clients), or the stateless long-tail draw
  (client_fraction of the training set trimmed to the long tail). None: size unknown."""
  total = sum(datasizes.train_sizes(c) or ()) or None
  if total and c.scenario == 'longtail_stateless':
    share = sum(c.imbalance_ratio ** (i / 9) for i in range(10)) / 10
    return total * c.client_fraction * share
  sizes = datasizes.client_sizes(c)
  return sum(sizes) / len(sizes) if sizes else None


def sample_gradients(c):
  """Sample-gradients of one config: rounds x cohort x local work x seeds x grid points. A
  local epoch is each client's ceil(examples / batch) batches (its own examples: clients of
  different domains differ); a dataset of unknown size counts 50,000 examples (said so)."""
  if c.local_steps:
    per_client = c.local_steps * c.batch_size
  elif c.scenario == 'longtail_stateless' or datasizes.client_sizes(c) is None:
    n = client_examples(c) or 50_000 * (1 - c.val_fraction) / c.num_clients
    per_client = c.local_epochs * math.ceil(n / c.batch_size) * c.batch_size
  else:
    batches = datasizes.mean_batches(datasizes.client_sizes(c), c.batch_size)
    per_client = c.local_epochs * batches * c.batch_size
  points = len(grid_points(parse_grid(c.grid)))
  return c.rounds * c.clients_per_round * per_client * c.seeds * points


def mflop(c):
  """MFLOP per sample-gradient of the run `c`: XLA_COST's at its own input, CPU_MFLOP for
  the cpu tier's models, else None."""
  if cost_key(c) in XLA_COST:
    return XLA_COST[cost_key(c)][0]
  return CPU_MFLOP.get(c.model)


def estimate(name, mode, **overrides):
  """(sample-gradients, CPU hours at CPU_GFLOPS, what is of unknown cost or size) of the
  live runs."""
  total = flops = 0
  unknown = set()
  for _, _, c in configs(name, mode, **overrides):
    n = sample_gradients(c)
    total += n
    if datasizes.train_sizes(c) is None:
      unknown.add(c.dataset)
    if mflop(c) is None:
      unknown.add(f'{c.model} on {_shape_text(input_shape(c))} {c.dataset}')
    flops += n * (mflop(c) or UNKNOWN_MFLOP) * 1e6
  return total, flops / (CPU_GFLOPS * 1e9) / 3600, sorted(unknown)


def _shape_text(shape):
  return 'x'.join(map(str, shape)) if shape else '?'


# --- One accelerator ---
# Peak rates of one GPU, dense (no structured sparsity), from NVIDIA's datasheets:
#   A100 SXM4 80GB: FP32 19.5 TFLOP/s, TF32 Tensor Core 156 TFLOP/s, HBM2e 2,039 GB/s (NVIDIA
#   A100 Tensor Core GPU datasheet, nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/
#   pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf);
#   H100 SXM5 80GB: FP32 67 TFLOP/s, TF32 Tensor Core 494.5 TFLOP/s (the datasheet's 989 is
#   with sparsity), HBM3 3.35 TB/s (NVIDIA H100 Tensor Core GPU datasheet,
#   nvidia.com/en-us/data-center/h100/);
#   H200 SXM 141GB: FP32 67 TFLOP/s, TF32 Tensor Core 494.5 TFLOP/s, HBM3e 4.8 TB/s (NVIDIA
#   H200 Tensor Core GPU datasheet, nvidia.com/en-us/data-center/h200/). The H200 is the H100's
#   GH100 chip with more and faster memory: its datasheet prints the same compute column, TF32
#   989 TFLOP/s marked "with sparsity" (1,979 is FP16/BF16 with sparsity), so its dense TF32 is
#   494.5 as the H100's, not 989.
# float32 is --matmul_precision=highest (the default: full float32 as on CPU); tf32 is
# --matmul_precision=default (the GPU's TF32 tensor cores).
ACCELERATORS = {'A100': {'float32': 19.5e12, 'tf32': 156e12, 'hbm': 2.039e12},
                'H100': {'float32': 67e12, 'tf32': 494.5e12, 'hbm': 3.35e12},
                'H200': {'float32': 67e12, 'tf32': 494.5e12, 'hbm': 4.8e12}}
# The fraction of peak FLOP/s and of HBM bandwidth a round is assumed to reach: an assumption,
# not a measurement (no GPU was at hand). Small per-client batches reach less; large vmapped
# cohorts of big models more.
EFFICIENCY = 0.3
# (MFLOP, MB accessed) per sample-gradient of (model, input shape, classes): XLA's cost
# analysis of the compiled training step (`step_cost`: jax.grad of the loss, batch 8, lax
# convolutions as on a GPU), measured with `python experiments/presetlib/estimates.py
# MODEL:SHAPE:CLASSES` (jax 0.10.2, XLA:CPU's compiler: a GPU's fuses differently, so the
# bytes are an estimate too). A run is priced at its own input (cost_key): the same model at
# another --image_size is another entry.
XLA_COST = {
    ('cnn_emnist', (28, 28, 1), 62): (72.4, 5.26),
    ('cnn_cifar', (32, 32, 3), 10): (150.1, 10.38),
    ('cnn_cifar_moon', (32, 32, 3), 10): (137.6, 7.33),
    ('cnn_mcmahan_cifar', (32, 32, 3), 10): (90.8, 11.77),
    ('digit_cnn_bn', (28, 28, 3), 10): (242.5, 30.29),
    ('resnet8', (32, 32, 3), 10): (111.4, 11.09),
    ('resnet8', (32, 32, 3), 100): (111.4, 11.10),
    ('resnet20_bn', (32, 32, 3), 10): (268.2, 25.57),
    ('resnet18', (32, 32, 3), 100): (3835.0, 117.91),
    ('distilbert', (2, 128), 4): (33797.0, 779.32),
    ('distilbert', (2, 128), 5): (33797.0, 779.32),
    ('alexnet_bn', (256, 256, 3), 10): (5017.1, 192.65),
    ('digit_cnn_bn', (256, 256, 3), 10): (22689.0, 2283.40),
    ('resnet50_bn', (64, 64, 3), 200): (30835.8, 1834.31),
    ('resnet50_gn', (64, 64, 3), 200): (30836.1, 1836.02),
}


def program_cost(compiled):
  """(FLOPs, bytes accessed) of a compiled jax program, from XLA's cost analysis."""
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return float(cost['flops']), float(cost['bytes accessed'])


def step_program(model_name, shape, classes, batch=8):
  """The compiled training step of `model_name` on inputs of `shape` (one example) with
  `classes` labels: jax.grad of the cross-entropy over a batch of `batch` zeros,
  convolutions as lax.conv (a GPU's choice). A 2-axis shape is text (ids and mask)."""
  shape = tuple(shape)
  text = len(shape) == 2
  model = models.get(model_name, classes, shape, conv_impl='lax',
                     vocab_size=TEXT_VOCAB if text else 0)
  params = model.init(jax.random.key(0))
  x = jnp.zeros((batch,) + shape, jnp.int32 if text else jnp.float32)
  y = jnp.zeros((batch,), jnp.int32)

  def loss(p, x, y):  # inputs are arguments: XLA must not fold them as constants
    logits, _ = model.train_apply(p, x)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], 1))

  return jax.jit(jax.grad(loss)).lower(params, x, y).compile()


def step_cost(model_name, shape, classes, batch=8):
  """(FLOPs, bytes accessed) per sample-gradient: `step_program`'s cost over the batch."""
  flops, accessed = program_cost(step_program(model_name, shape, classes, batch))
  return flops / batch, accessed / batch


def seconds(flops, accessed, accelerator, precision, efficiency=EFFICIENCY):
  """Seconds one accelerator takes for `flops` FLOPs moving `accessed` bytes at `efficiency`
  of its peaks: the roofline max(flops / (peak x eff), bytes / (bandwidth x eff))."""
  rates = ACCELERATORS[accelerator]
  return max(flops / (rates[precision] * efficiency), accessed / (rates['hbm'] * efficiency))


def accelerator_estimate(name, mode, **overrides):
  """({accelerator: {precision: hours}}, (model, input) pairs of unknown cost) of the
  mode's live runs on one accelerator: every config's sample-gradients x XLA_COST's FLOPs
  and bytes per sample-gradient at the run's own input (cost_key), through `seconds`."""
  hours = {a: {p: 0.0 for p in ('float32', 'tf32')} for a in ACCELERATORS}
  unknown = set()
  for _, _, c in configs(name, mode, **overrides):
    if cost_key(c) not in XLA_COST:
      unknown.add((c.model, f'{_shape_text(input_shape(c))} {c.dataset}'))
      continue
    mflop, mb = XLA_COST[cost_key(c)]
    n = sample_gradients(c)
    for a, table in hours.items():
      for p in table:
        table[p] += n * seconds(mflop * 1e6, mb * 1e6, a, p) / 3600
  return hours, sorted(unknown)


def main(keys):
  """Prints XLA_COST's entries for `keys` ('model:HxWxC:classes' strings, text 'model:2xL:
  classes'), measured now."""
  for key in keys:
    model_name, shape, classes = key.split(':')
    shape = tuple(int(n) for n in shape.split('x'))
    flops, accessed = step_cost(model_name, shape, int(classes))
    print(f"    ('{model_name}', {shape}, {classes}): ({flops / 1e6:.1f}, "
          f"{accessed / 1e6:.2f}),", flush=True)


if __name__ == '__main__':
  main(sys.argv[1:])

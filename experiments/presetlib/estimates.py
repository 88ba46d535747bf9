"""How much work a mode is: an estimate from FLOPs, not a measurement."""
import math
import sys

import jax
import jax.numpy as jnp

from fedjax_drift import models
from fedjax_drift.config import grid_points, parse_grid
from presetlib.plans import configs
from presetlib.tiers import TRAIN_SIZE

# MFLOP per sample-gradient (forward + backward) from XLA's cost analysis of a training step
# (jax.grad of the loss, batch 8, at the paper's input size: 32x32 CIFAR, 64x64 Tiny-ImageNet,
# 256x256 DomainNet, 28x28 digits and EMNIST, 128 tokens of text); models not listed count as
# 100 (said so).
MFLOP_PER_SAMPLE = {'cnn_cifar': 162, 'resnet20_bn': 305, 'resnet8': 123,
                    'cnn_mcmahan_cifar': 113, 'resnet18': 4405, 'cnn_cifar_moon': 148,
                    'resnet50_gn': 31784, 'resnet50_bn': 31784, 'alexnet_bn': 5415,
                    'digit_cnn_bn': 283, 'cnn_emnist': 74, 'distilbert': 33797}
CPU_GFLOPS = 60  # the README's benchmark: CNN training ran at ~62 GFLOP/s on the 2-core CPU
# MFLOP per sample-gradient of the cpu tier's models (forward + backward = 3x the forward
# multiply-adds x 2 on a 28x28 input: logreg 7,840 MACs, the 2x200 MLP 198,800).
CPU_MFLOP = {'logreg': 0.047, 'mlp': 1.2, 'mlp_bn': 1.2}


def _client_examples(c):
  n = TRAIN_SIZE.get(c.dataset, 50_000)
  if c.scenario == 'longtail_stateless':
    share = sum(c.imbalance_ratio ** (i / 9) for i in range(10)) / 10
    return n * c.client_fraction * share
  return n * (1 - c.val_fraction) / c.num_clients  # clients train without the split


def sample_gradients(c):
  """Sample-gradients of one config: rounds x cohort x local work x seeds x grid points."""
  if c.local_steps:
    per_client = c.local_steps * c.batch_size
  else:
    per_client = c.local_epochs * math.ceil(_client_examples(c) / c.batch_size) * c.batch_size
  points = len(grid_points(parse_grid(c.grid)))
  return c.rounds * c.clients_per_round * per_client * c.seeds * points


def estimate(name, mode, **overrides):
  """(sample-gradients, CPU hours at CPU_GFLOPS, models of unknown cost) of the live runs."""
  total = flops = 0
  unknown = set()
  for _, _, c in configs(name, mode, **overrides):
    n = sample_gradients(c)
    total += n
    if c.model not in {**MFLOP_PER_SAMPLE, **CPU_MFLOP} or c.dataset not in TRAIN_SIZE:
      unknown.add(c.dataset if c.dataset not in TRAIN_SIZE else c.model)  # CPU_MFLOP: cpu tier
    flops += n * {**MFLOP_PER_SAMPLE, **CPU_MFLOP}.get(c.model, 100) * 1e6
  return total, flops / (CPU_GFLOPS * 1e9) / 3600, sorted(unknown)


# --- One accelerator ---
# Peak rates of one GPU, dense (no structured sparsity), from NVIDIA's datasheets:
#   A100 SXM4 80GB: FP32 19.5 TFLOP/s, TF32 Tensor Core 156 TFLOP/s, HBM2e 2,039 GB/s (NVIDIA
#   A100 Tensor Core GPU datasheet, nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/
#   pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf);
#   H100 SXM5 80GB: FP32 67 TFLOP/s, TF32 Tensor Core 494.5 TFLOP/s (the datasheet's 989 is
#   with sparsity), HBM3 3.35 TB/s (NVIDIA H100 Tensor Core GPU datasheet,
#   nvidia.com/en-us/data-center/h100/).
# float32 is --matmul_precision=highest (the default: full float32 as on CPU); tf32 is
# --matmul_precision=default (the GPU's TF32 tensor cores).
ACCELERATORS = {'A100': {'float32': 19.5e12, 'tf32': 156e12, 'hbm': 2.039e12},
                'H100': {'float32': 67e12, 'tf32': 494.5e12, 'hbm': 3.35e12}}
# The fraction of peak FLOP/s and of HBM bandwidth a round is assumed to reach: an assumption,
# not a measurement (no GPU was at hand). Small per-client batches reach less; large vmapped
# cohorts of big models more.
EFFICIENCY = 0.3
# The paper's input of each dataset the full and short modes use (one example, no batch axis).
INPUT_SHAPES = {'cifar10': (32, 32, 3), 'cifar100': (32, 32, 3), 'tiny_imagenet': (64, 64, 3),
                'domainnet': (256, 256, 3), 'digits5': (28, 28, 3), 'emnist': (28, 28, 1),
                'ag_news': (2, 128), 'sst5': (2, 128)}
NUM_CLASSES = {'cifar10': 10, 'cifar100': 100, 'tiny_imagenet': 200, 'domainnet': 10,
               'digits5': 10, 'emnist': 62, 'ag_news': 4, 'sst5': 5}
TEXT_VOCAB = 30522  # DistilBERT's tokenizer
# (MFLOP, MB accessed) per sample-gradient of (model, dataset): XLA's cost analysis of the
# compiled training step (`step_cost`: jax.grad of the loss, batch 8, lax convolutions as on
# a GPU), measured with `python experiments/presetlib/estimates.py` (jax 0.10.2, XLA:CPU's
# compiler: a GPU's fuses differently, so the bytes are an estimate too).
XLA_COST = {
    ('cnn_emnist', 'emnist'): (72.4, 5.26),
    ('cnn_cifar', 'cifar10'): (150.1, 10.38),
    ('cnn_cifar_moon', 'cifar10'): (137.6, 7.33),
    ('cnn_mcmahan_cifar', 'cifar10'): (90.8, 11.77),
    ('digit_cnn_bn', 'digits5'): (242.5, 30.29),
    ('resnet8', 'cifar10'): (111.4, 11.09),
    ('resnet8', 'cifar100'): (111.4, 11.10),
    ('resnet20_bn', 'cifar10'): (268.2, 25.57),
    ('resnet18', 'cifar100'): (3835.0, 117.91),
    ('distilbert', 'ag_news'): (33797.0, 779.32),
    ('distilbert', 'sst5'): (33797.0, 779.32),
    ('alexnet_bn', 'domainnet'): (5017.1, 192.65),
    ('digit_cnn_bn', 'domainnet'): (22689.0, 2283.40),
    ('resnet50_bn', 'tiny_imagenet'): (30835.8, 1834.31),
    ('resnet50_gn', 'tiny_imagenet'): (30836.1, 1836.02),
}


def program_cost(compiled):
  """(FLOPs, bytes accessed) of a compiled jax program, from XLA's cost analysis."""
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return float(cost['flops']), float(cost['bytes accessed'])


def step_program(model_name, dataset, batch=8):
  """The compiled training step of `model_name` on `dataset`'s input: jax.grad of the
  cross-entropy over a batch of `batch` zeros, convolutions as lax.conv (a GPU's choice)."""
  shape = INPUT_SHAPES[dataset]
  text = len(shape) == 2
  model = models.get(model_name, NUM_CLASSES[dataset], shape, conv_impl='lax',
                     vocab_size=TEXT_VOCAB if text else 0)
  params = model.init(jax.random.key(0))
  x = jnp.zeros((batch,) + shape, jnp.int32 if text else jnp.float32)
  y = jnp.zeros((batch,), jnp.int32)

  def loss(p, x, y):  # inputs are arguments: XLA must not fold them as constants
    logits, _ = model.train_apply(p, x)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], 1))

  return jax.jit(jax.grad(loss)).lower(params, x, y).compile()


def step_cost(model_name, dataset, batch=8):
  """(FLOPs, bytes accessed) per sample-gradient: `step_program`'s cost over the batch."""
  flops, accessed = program_cost(step_program(model_name, dataset, batch))
  return flops / batch, accessed / batch


def seconds(flops, accessed, accelerator, precision, efficiency=EFFICIENCY):
  """Seconds one accelerator takes for `flops` FLOPs moving `accessed` bytes at `efficiency`
  of its peaks: the roofline max(flops / (peak x eff), bytes / (bandwidth x eff))."""
  rates = ACCELERATORS[accelerator]
  return max(flops / (rates[precision] * efficiency), accessed / (rates['hbm'] * efficiency))


def accelerator_estimate(name, mode, **overrides):
  """({accelerator: {precision: hours}}, (model, dataset) pairs of unknown cost) of the
  mode's live runs on one accelerator: every config's sample-gradients x XLA_COST's FLOPs
  and bytes per sample-gradient, through `seconds`."""
  hours = {a: {p: 0.0 for p in ('float32', 'tf32')} for a in ACCELERATORS}
  unknown = set()
  for _, _, c in configs(name, mode, **overrides):
    if (c.model, c.dataset) not in XLA_COST:
      unknown.add((c.model, c.dataset))
      continue
    mflop, mb = XLA_COST[c.model, c.dataset]
    n = sample_gradients(c)
    for a, table in hours.items():
      for p in table:
        table[p] += n * seconds(mflop * 1e6, mb * 1e6, a, p) / 3600
  return hours, sorted(unknown)


def main(pairs):
  """Prints XLA_COST's entries for `pairs` ('model:dataset' strings), measured now."""
  for pair in pairs:
    model_name, dataset = pair.split(':')
    flops, accessed = step_cost(model_name, dataset)
    print(f"    ('{model_name}', '{dataset}'): ({flops / 1e6:.1f}, {accessed / 1e6:.2f}),",
          flush=True)


if __name__ == '__main__':
  main(sys.argv[1:])

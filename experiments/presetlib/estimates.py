"""How much work a mode is: an estimate from FLOPs, not a measurement."""
import math

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

"""The normalisation layers of the zoo's models: GroupNorm rules, BatchNorm as torch has it.

GroupNorm's ε: flax's default is 1e-6, PyTorch's nn.GroupNorm 1e-5. The models built after a
paper's PyTorch code (FedGKD's ResNet-8 and ResNet-50) use torch's (`TORCH_EPS`); the others
keep flax's. `--gn_eps` (models.get's gn_eps) sets it for every GroupNorm model.
"""
from flax import linen as nn

from fedjax_drift.errors import UserError

TORCH_EPS = 1e-5  # torch.nn.GroupNorm's and BatchNorm2d's default eps
FLAX_GN_EPS = 1e-6  # flax.linen.GroupNorm's default epsilon


def gn_num_groups(channels, groups=0, group_size=0):
  """The number of GroupNorm groups for a layer of `channels` under --gn_groups/--gn_group_size.

  groups > 0: that many groups; group_size > 0: channels / group_size groups; both 0: None (the
  model's own rule). Raises UserError naming the flag when the channels do not divide evenly.
  """
  if groups and group_size:
    raise UserError(f'--gn_groups={groups} and --gn_group_size={group_size} conflict: give '
                    'only one of them')
  if groups:
    if channels % groups:
      raise UserError(f'--gn_groups={groups} does not divide a GroupNorm layer of {channels} '
                      'channels')
    return groups
  if group_size:
    if channels % group_size:
      raise UserError(f'--gn_group_size={group_size} does not divide a GroupNorm layer of '
                      f'{channels} channels')
    return channels // group_size
  return None


def group_norm_groups(channels):
  """The GroupNorm rule of the original `resnet18`/`resnet20`: 32 groups, or 2 when 32 does not
  divide the channels."""
  return min(32, channels) if channels % 32 == 0 else 2


def norm(kind, name, channels, train, groups=0, group_size=0, gn_eps=FLAX_GN_EPS):
  """One normalisation layer after a convolution.

  'gn16': GroupNorm with 16 channels per group (FedGKD §5.1: "we set the channels of each
  group as 16"; their code's `norm2d` makes planes // 16 groups); 'bn': BatchNorm as in He et
  al. (2016) §3.4, flax momentum 0.9 (PyTorch's 0.1); 'gn': `group_norm_groups`' rule. For the
  GroupNorm kinds, groups / group_size (--gn_groups / --gn_group_size, see `gn_num_groups`)
  replace the kind's own rule when set; gn_eps is their ε.
  """
  if kind == 'bn':
    return nn.BatchNorm(use_running_average=not train, momentum=0.9, name=name)
  override = gn_num_groups(channels, groups, group_size)
  if override:
    num_groups = override
  elif kind == 'gn16':
    num_groups = max(1, channels // 16)
  else:
    num_groups = group_norm_groups(channels)
  return nn.GroupNorm(num_groups=num_groups, epsilon=gn_eps, name=name)


def norm_maker(module, train):
  """norm(suffix, channels) -> the norm layer `module` uses (its fields norm, gn_groups,
  gn_group_size, gn_eps; see `norm`), named 'bn<suffix>' for BatchNorm and 'gn<suffix>'
  otherwise: FedBN finds norm layers by the 'bn' prefix."""
  prefix = 'bn' if module.norm == 'bn' else 'gn'
  return lambda suffix, channels: norm(module.norm, f'{prefix}{suffix}', channels, train,
                                       module.gn_groups, module.gn_group_size, module.gn_eps)


def batch_norm_torch(name, train):
  """BatchNorm as FedBN's torch models have it: momentum 0.1 in torch = 0.9 in flax, eps 1e-5."""
  return nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=TORCH_EPS, name=name)

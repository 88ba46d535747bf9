"""Dense models on the flattened input: logistic regression and McMahan et al.'s MLP."""
from typing import Sequence

from flax import linen as nn

from fedjax_drift import registry
from fedjax_drift.models.info import ModelInfo
from fedjax_drift.models.layers import dense


class LogReg(nn.Module):
  """Multinomial logistic regression: one Dense layer on the flattened input."""
  num_classes: int

  @nn.compact
  def __call__(self, x, return_features=False):
    h = x.reshape(x.shape[0], -1)
    logits = dense(h, self.num_classes, 'dense')
    return (logits, h) if return_features else logits


class MLP(nn.Module):
  """ReLU MLP on the flattened input (default 2 x 200 hidden units, as McMahan et al.)."""
  num_classes: int
  hidden: Sequence[int] = (200, 200)

  @nn.compact
  def __call__(self, x, return_features=False):
    x = x.reshape(x.shape[0], -1)
    for i, h in enumerate(self.hidden):
      x = nn.relu(dense(x, h, f'dense{i}'))
    logits = dense(x, self.num_classes, 'head')
    return (logits, x) if return_features else logits


class MLPBN(nn.Module):
  """The MLP with BatchNorm after each hidden layer (for FedBN)."""
  num_classes: int
  hidden: Sequence[int] = (200, 200)

  @nn.compact
  def __call__(self, x, return_features=False, train=False):
    x = x.reshape(x.shape[0], -1)
    for i, h in enumerate(self.hidden):
      x = dense(x, h, f'dense{i}')
      x = nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9, name=f'bn{i}')(x))
    logits = dense(x, self.num_classes, 'head')
    return (logits, x) if return_features else logits


# --- Registration -----------------------------------------------------------------------------
# build(values, num_classes, **shapes) -> the flax module; info: a ModelInfo (family 'dense':
# no convolutions, which drives the client-parallelism choice; BatchNorm or the BatchNorm twin).
registry.register('model', 'logreg', 'Multinomial logistic regression: one Dense layer on the '
                  'flattened input', build=lambda v, num_classes, **_: LogReg(num_classes),
                  info=ModelInfo('dense'))
registry.register('model', 'mlp', 'ReLU MLP on the flattened input (default 2 x 200 hidden '
                  'units, as McMahan et al.)', build=lambda v, num_classes, **_: MLP(num_classes),
                  info=ModelInfo('dense', twin='mlp_bn'))
registry.register('model', 'mlp_bn', 'The MLP with BatchNorm after each hidden layer (for FedBN)',
                  build=lambda v, num_classes, **_: MLPBN(num_classes),
                  info=ModelInfo('dense', batchnorm=True))

"""What a model entry says of itself (registry kind 'model', its `info`): family and BatchNorm.

Declared beside each model's code (models/mlps.py, convnets.py, resnets.py, text.py,
recurrent.py) and read by generic code instead of the model's name: models.get (the input it
takes, whether it carries batch statistics), the client-parallelism choice (its family) and the
command line (the BatchNorm twin FedBN runs in a model's place).
"""
from typing import NamedTuple


class ModelInfo(NamedTuple):
  """family: 'dense' (no convolutions), 'conv' (NHWC images) or 'text' (int32 [B, 2, L] token
  ids and masks). batchnorm: it has BatchNorm layers, so its params are {'params',
  'batch_stats'} (models.Model.has_state) and FedBN can keep them local. twin: the registered
  model with BatchNorm that stands for this one under FedBN ('' for none): the command line
  runs it when --algo=fedbn (or --local_terms with fedbn) is given without --model."""
  family: str
  batchnorm: bool = False
  twin: str = ''

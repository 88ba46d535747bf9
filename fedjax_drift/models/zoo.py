"""The model zoo: every --model, registered beside its code (registry kind 'model').

Inputs arrive as float32 (uint8 images already scaled to [0, 1]). Convolutional models take
NHWC images; dense models flatten whatever they get. Text models (models/text.py, family
'text') take int32 [B, 2, L] token ids and attention masks. The families live in their own
modules: models/mlps.py, models/convnets.py, models/resnets.py, models/text.py (registered
when registry.load_package imports them). Here: the projection head MOON and FedGKD+ put on any
of them, and `models()`, the registry's models as a table.
"""
import inspect

from flax import linen as nn

from fedjax_drift import registry
# Re-exported for the callers that reach them through zoo.
from fedjax_drift.models.convnets import (cnn_emnist, local_response_norm,  # noqa: F401
                                          max_pool_3x3_s2)
from fedjax_drift.models.layers import (adaptive_avg_pool, conv2d_strided,  # noqa: F401
                                        dense, max_pool_2x2, max_pool_valid)
from fedjax_drift.models.norms import gn_num_groups  # noqa: F401

OUTPUT_LAYERS = ('head', 'dense')  # the names every zoo model gives its last Dense layer


def _skip_output_layer(next_fun, args, kwargs, context):
  """flax method interceptor: the base model's own output layer becomes the identity."""
  m = context.module
  if (isinstance(m, nn.Dense) and context.method_name == '__call__' and m.name in OUTPUT_LAYERS
      and m.scope.path == ('base', m.name)):
    return args[0]
  return next_fun(*args, **kwargs)


def takes_train(module):
  """Whether `module`'s __call__ has a `train` argument (BatchNorm statistics, dropout)."""
  return 'train' in inspect.signature(type(module).__call__).parameters


class WithProjection(nn.Module):
  """A model with a projection head between its features and its output layer.

  MOON (Li et al. 2021, §3.2: base encoder, projection head, output layer) and FedGKD+ (FedGKD
  paper, §5.1: "the projection head adding before the classification layer", SimCLR's 2-layer
  MLP with 256 outputs): h = base features, z = W2 relu(W1 h), logits = classifier(z). The
  base's own output layer is skipped (it has no parameters here); `return_features` gives
  (logits, z). `dim` is z's width; `hidden` is W1's width, 0 = h's width as both codes have
  it (QinbinLi/MOON model.py `ModelFedCon`: l1 = Linear(num_ftrs, num_ftrs), l2 =
  Linear(num_ftrs, out_dim); CGCL-codes/FedGKD pcode/models/resnet.py `projection_layer`:
  Linear(feature_dim, feature_dim), ReLU, Linear(feature_dim, 256)). `train` reaches the base
  when it has BatchNorm statistics or dropout; the head has neither.
  """
  base: nn.Module
  dim: int = 256
  hidden: int = 0

  @nn.compact
  def __call__(self, x, return_features=False, train=False):
    kwargs = {'train': train} if takes_train(self.base) else {}
    with nn.intercept_methods(_skip_output_layer):
      _, h = self.base(x, return_features=True, **kwargs)
    z = dense(h, self.hidden or h.shape[-1], 'projection_dense1')
    z = dense(nn.relu(z), self.dim, 'projection_dense2')
    logits = dense(z, self.base.num_classes, 'classifier')
    return (logits, z) if return_features else logits


def family(name):
  """The family of registered model `name`: 'dense', 'conv' or 'text' (drives the
  client-parallelism choice and what input the model takes)."""
  return registry.get('model', name).info.family


def models() -> dict:
  """{name: (build, family)} of the registered models, in registration order, as registered
  now: build(values, num_classes, **shapes) -> the flax module (registry.build gives it its
  declared fields)."""
  return {name: (entry.build, entry.info.family)
          for name, entry in registry.entries('model').items()}


__all__ = ['WithProjection', 'family', 'max_pool_2x2', 'models']

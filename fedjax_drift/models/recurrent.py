"""Recurrent models on token sequences: LEAF's character LSTM for Shakespeare and TFF's word
LSTM for Stack Overflow next-word prediction.

Inputs are int32 [B, 2, L] like every text model's (models/text.py): x[:, 0] the ids, x[:, 1]
the attention mask. LEAF's model (Caldas et al. 2018, "LEAF: A Benchmark for Federated
Settings"; TalwalkarLab/leaf models/shakespeare/stacked_lstm.py): an 8-d embedding of each
character, two stacked LSTM layers of 256 units (TF's BasicLSTMCell: one kernel over [input,
h] for the gates i, j, f, o, and a forget bias of 1.0), and a Dense layer from the last output
to the vocabulary's logits. Here the last output is the last real token's (by the mask), which
for LEAF's full 80-character windows is the last position, as in LEAF.

Initialisation: under --init=default, TF's as LEAF runs it (tf.get_variable's Glorot-uniform
for the embedding and the gate kernels, zero biases); under --init=torch, PyTorch's nn.LSTM
(every gate weight and bias U(+-1/sqrt(hidden))) and nn.Embedding (N(0, 1)).

TFF's Stack Overflow model (tff.simulation.baselines.stackoverflow's create_recurrent_model,
Reddi et al. 2021, "Adaptive Federated Optimization"): an embedding of 96 (pad id 0 masked),
one Keras LSTM of 670 units, Dense(96), Dense(vocabulary) (WordLSTM). Here the LSTM is the
same BasicLSTMCell as LEAF's: Keras' LSTM starts its forget bias at 1 (unit_forget_bias)
where this cell adds a constant 1 to a zero-initialised bias, the same function at the start
and under SGD; Keras initialises its recurrent kernel orthogonally where this cell draws one
Glorot-uniform kernel over [x, h]. Embedding U(+-0.05) and Glorot-uniform Dense kernels as
Keras' defaults. word_lstm_small keeps the shape with a 32-d embedding and 128 units, for CPU.
"""
import jax
import jax.numpy as jnp
from flax import linen as nn

from fedjax_drift import registry
from fedjax_drift.models.info import ModelInfo
from fedjax_drift.models.layers import current_init_scheme, dense, embed, torch_uniform

FORGET_BIAS = 1.0  # TF BasicLSTMCell's default, added to the forget gate's pre-activation


def _gates(xh, features):
  """The cell's one Dense over [x, h] -> [i, j, f, o] pre-activations, initialised as the
  scope's scheme says (module docstring)."""
  if current_init_scheme() == 'torch':
    init = torch_uniform(features // 4)  # nn.LSTM: 1/sqrt(hidden), not the fan-in
    return nn.Dense(features, kernel_init=init, bias_init=init, name='gates')(xh)
  return nn.Dense(features, kernel_init=nn.initializers.glorot_uniform(), name='gates')(xh)


class LSTMCell(nn.Module):
  """TF's BasicLSTMCell: [i, j, f, o] = W [x, h] + b; c' = sigmoid(f + 1) c + sigmoid(i)
  tanh(j); h' = tanh(c') sigmoid(o). carry (c, h), each [B, features]."""
  features: int

  @nn.compact
  def __call__(self, carry, x):
    c, h = carry
    z = _gates(jnp.concatenate([x, h], axis=-1), 4 * self.features)
    i, j, f, o = jnp.split(z, 4, axis=-1)
    c = nn.sigmoid(f + FORGET_BIAS) * c + nn.sigmoid(i) * jnp.tanh(j)
    h = jnp.tanh(c) * nn.sigmoid(o)
    return (c, h), h


# One cell unrolled over the time axis (axis 1) by lax.scan, its parameters shared by the steps.
_ScanLSTM = nn.scan(LSTMCell, variable_broadcast='params', split_rngs={'params': False},
                    in_axes=1, out_axes=1)


class CharLSTM(nn.Module):
  """LEAF's Shakespeare model: embed(8) -> LSTM(256) -> LSTM(256) -> Dense(num_classes) on the
  last real token's output. return_features: (logits, that output [B, hidden])."""
  num_classes: int
  vocab_size: int
  embed_dim: int = 8
  hidden: int = 256
  layers: int = 2

  @nn.compact
  def __call__(self, x, return_features=False):
    ids, mask = x[:, 0], x[:, 1]
    h = embed(self.vocab_size, self.embed_dim, nn.initializers.glorot_uniform(), 'embed')(ids)
    for k in range(self.layers):
      zeros = jnp.zeros((h.shape[0], self.hidden), h.dtype)
      _, h = _ScanLSTM(self.hidden, name=f'lstm{k}')((zeros, zeros), h)
    z = last_output(h, mask)
    logits = dense(z, self.num_classes, 'head')
    return (logits, z) if return_features else logits


def last_output(h, mask):
  """h [B, L, H] -> [B, H]: each sequence's output at its last real token (mask.sum - 1)."""
  last = jnp.maximum(mask.sum(1) - 1, 0)
  return jnp.take_along_axis(h, last[:, None, None], axis=1)[:, 0]


def _keras_uniform(key, shape, dtype=jnp.float32):
  """Keras' Embedding initialiser: U(-0.05, 0.05)."""
  return jax.random.uniform(key, shape, dtype, -0.05, 0.05)


def _keras_dense(z, features, name):
  """Keras' Dense (Glorot-uniform kernel, zero bias), or PyTorch's nn.Linear in a torch scope."""
  if current_init_scheme() == 'torch':
    return dense(z, features, name)
  return nn.Dense(features, kernel_init=nn.initializers.glorot_uniform(), name=name)(z)


class WordLSTM(nn.Module):
  """TFF's Stack Overflow next-word model: embed(96) -> LSTM(670) -> Dense(96) ->
  Dense(num_classes) on the last real token's output (a window's prefix ends there, see
  data/stackoverflow.py). return_features: (logits, the Dense(96) projection)."""
  num_classes: int
  vocab_size: int
  embed_dim: int = 96
  hidden: int = 670

  @nn.compact
  def __call__(self, x, return_features=False):
    ids, mask = x[:, 0], x[:, 1]
    h = embed(self.vocab_size, self.embed_dim, _keras_uniform, 'embed')(ids)
    zeros = jnp.zeros((h.shape[0], self.hidden), h.dtype)
    _, h = _ScanLSTM(self.hidden, name='lstm')((zeros, zeros), h)
    z = _keras_dense(last_output(h, mask), self.embed_dim, 'project')
    logits = _keras_dense(z, self.num_classes, 'head')
    return (logits, z) if return_features else logits


def char_lstm(num_classes, vocab_size, seq_len):  # pylint: disable=unused-argument
  """LEAF's character LSTM (see CharLSTM) for `vocab_size` symbols and `num_classes` outputs."""
  return CharLSTM(num_classes, vocab_size)


# --- Registration -----------------------------------------------------------------------------
# Family 'text': int32 [B, 2, L] ids and masks (models/__init__.py checks the data are tokens).
registry.register('model', 'char_lstm', 'LEAF\'s character LSTM (Shakespeare): 8-d embedding, '
                  '2 x LSTM(256), Dense',
                  build=lambda v, num_classes, input_shape, vocab_size: char_lstm(
                      num_classes, vocab_size, input_shape[1]), info=ModelInfo('text'))
registry.register('model', 'word_lstm', 'TFF\'s Stack Overflow next-word LSTM: 96-d embedding, '
                  'LSTM(670), Dense(96), Dense',
                  build=lambda v, num_classes, input_shape, vocab_size: WordLSTM(
                      num_classes, vocab_size), info=ModelInfo('text'))
registry.register('model', 'word_lstm_small', 'word_lstm\'s shape at CPU size: 32-d embedding, '
                  'LSTM(128), Dense(32), Dense',
                  build=lambda v, num_classes, input_shape, vocab_size: WordLSTM(
                      num_classes, vocab_size, 32, 128), info=ModelInfo('text'))

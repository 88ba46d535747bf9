"""Numpy references: logistic regression and FedAvg computed by hand, for the chex tests."""
import numpy as np


def softmax(z):
  z = z - z.max(axis=-1, keepdims=True)
  e = np.exp(z)
  return e / e.sum(axis=-1, keepdims=True)


def logreg_grad(W, b, x, y, mask=None):
  """Gradient of the masked mean softmax cross-entropy of logits x @ W + b."""
  x = x.reshape(len(x), -1).astype(np.float64)
  mask = np.ones(len(x)) if mask is None else np.asarray(mask, np.float64)
  p = softmax(x @ W + b)
  p[np.arange(len(y)), y] -= 1.0
  p *= mask[:, None] / max(mask.sum(), 1.0)
  return x.T @ p, p.sum(axis=0)


def logreg_loss(W, b, x, y):
  x = x.reshape(len(x), -1).astype(np.float64)
  logp = np.log(softmax(x @ W + b))
  return -logp[np.arange(len(y)), y].mean()


def to_numpy_params(params):
  return (np.asarray(params['dense']['kernel'], np.float64),
          np.asarray(params['dense']['bias'], np.float64))

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


# ---------------------------------------------------------------------------------------------
# A numpy simulator of one round on logistic regression, with params as one flat float64 vector
# [kernel.ravel(), bias]. Algorithms plug in per-example logit gradients and step rules, written
# straight from the papers' equations as docs/algorithms.md restates them.

def onehot(y, num_classes):
  out = np.zeros((len(y), num_classes))
  out[np.arange(len(y)), y] = 1.0
  return out


class LogReg:
  def __init__(self, dim, num_classes):
    self.d, self.c = dim, num_classes

  def split(self, theta):
    return theta[:self.d * self.c].reshape(self.d, self.c), theta[self.d * self.c:]

  def logits(self, theta, x):
    W, b = self.split(theta)
    return x.reshape(len(x), -1).astype(np.float64) @ W + b

  def grad(self, theta, x, dlogits, mask):
    """Gradient of mean_{mask} l(z) given per-example dl/dz."""
    G = dlogits * (mask / max(mask.sum(), 1.0))[:, None]
    xf = x.reshape(len(x), -1).astype(np.float64)
    return np.concatenate([(xf.T @ G).ravel(), G.sum(axis=0)])

  def ce_dlogits(self, theta, x, y):
    return softmax(self.logits(theta, x)) - onehot(y, self.c)

  def kd_dlogits(self, theta, teacher_theta, x, tau):
    """d/dz KL(softmax(z_t / tau) || softmax(z / tau)) = (softmax(z / tau) - softmax(z_t / tau)) / tau."""
    return (softmax(self.logits(theta, x) / tau) - softmax(self.logits(teacher_theta, x) / tau)) / tau


def flat(params):
  W, b = to_numpy_params(params)
  return np.concatenate([W.ravel(), b])


def attention_mixing(kind, V, previous, similarity='dot', temperature=1.0):
  """IGFL-S (§4): weights a_j with w_ps <- w_ps + sum_j a_j V_j. V, previous: [K, P] float64.

  time (§4.3): a_j = exp psi(prev_j, V_j) / sum_tau exp psi(prev_j, V_tau), unnormalised;
  time_rows: (1/K) sum_i softmax_j psi(prev_i, V_j); self: (1/K) sum_i softmax_j psi(V_i, V_j);
  global: softmax_j psi(mean V, V_j).
  """
  def scores(Q):
    S = Q @ V.T
    if similarity == 'cosine':
      S = S / np.maximum(np.linalg.norm(Q, axis=1)[:, None] * np.linalg.norm(V, axis=1), 1e-30)
    return softmax(S / temperature)
  if kind == 'self':
    return scores(V).mean(axis=0)
  if kind == 'global':
    return scores(V.mean(axis=0, keepdims=True))[0]
  A = scores(previous)
  if kind == 'time':
    return np.array([A[j, j] for j in range(len(V))])
  return A.mean(axis=0)

"""FedADC and its variants.

Paper: K. Ozfatura, E. Ozfatura, D. Gündüz, "FedADC: Accelerated Federated Learning with Drift
Control" (journal version): Algorithm 3 (FedADC), Algorithm 4 (double momentum), §III
(FedADC+), eq. 4; the 2021 conference paper of the same title is beta_local = 1. The server
averages with 1/|S_t| (Alg. 3 l.16).

The server's momentum m_t is embedded into every local step, spread over the client's own
H_i steps (Algorithm 3):

    m_bar = beta_local * m_t / H_i
    heavy ball:  theta <- theta - eta (g(theta) + m_bar)
    Nesterov:    theta <- theta - eta (g(theta - eta m_bar) + m_bar)
    server:      Delta_bar = (1/eta) sum p_i delta_i
                 m_{t+1} = Delta_bar + (beta_global - beta_local) m_t
                 theta_{t+1} = theta_t - alpha eta m_{t+1}

so that delta_i = eta (sum_tau g + beta_local m_t) (eq. 4). beta_local = 1 is the 2021
conference version. Double momentum (Algorithm 4) adds a local EMA momentum
m_i^tau = phi m_i^{tau-1} + (1 - phi) g with m_i^1 = g, stepping theta - eta (m_bar + m_i^tau).
FedADC+ adds the self-confidence distillation term of §III.
"""
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from optax.tree_utils import tree_get

from fedjax_drift.algorithms.distill import kl_to_student, tau2_factor
from fedjax_drift.algorithms.local import cross_entropy, l2, masked_mean
from fedjax_drift.algorithms.parts import Part, PartNeeds
from fedjax_drift import registry
from fedjax_drift.algorithms.recipes import Recipe, algorithm


def server_momentum(beta_local, beta_global, lr, server_lr=1.0):
  """m_{t+1} = Delta_bar + (beta_global - beta_local) m_t;  theta <- theta - alpha eta m_{t+1}."""
  return optax.chain(optax.scale(1.0 / lr), optax.trace(decay=beta_global - beta_local),
                     optax.scale(-server_lr * lr))


def momentum_of(server):
  """m_t: the trace kept by `server_momentum` in the server optimizer's state."""
  return tree_get(server['opt'], 'trace')


def embedded_momentum(beta_local, nesterov=False):
  """The local step correction: add m_bar = beta_local m_t / H_i to every gradient."""

  def m_bar(ctx):
    scale = beta_local / jnp.maximum(ctx.num_steps, 1).astype(jnp.float32)
    return jax.tree.map(lambda m: scale * m, ctx.payload['fedadc'])

  def correct(grads, ctx):
    return jax.tree.map(jnp.add, grads, m_bar(ctx))

  def lookahead(params, ctx):  # the Nesterov ("red") variant's half step theta - eta m_bar
    return jax.tree.map(lambda p, m: p - ctx.lr * m, params, m_bar(ctx))

  return Part('fedadc', payload=lambda _, params, server: momentum_of(server),
              correct=correct, lookahead=lookahead if nesterov else None)


class FirstStepEmaState(NamedTuple):
  ema: optax.Updates
  started: jax.Array


def first_step_ema(phi):
  """m^1 = g, m^tau = phi m^{tau-1} + (1 - phi) g (Algorithm 4's local momentum)."""

  def init(params):
    return FirstStepEmaState(jax.tree.map(jnp.zeros_like, params), jnp.zeros((), bool))

  def update(updates, state, params=None):
    del params
    ema = jax.tree.map(lambda m, g: jnp.where(state.started, phi * m + (1 - phi) * g, g),
                       state.ema, updates)
    return ema, FirstStepEmaState(ema, jnp.ones((), bool))

  return optax.GradientTransformation(init, update)


def double_momentum_optimizer(lr, phi, weight_decay=0.0, skip='none'):
  """theta <- theta - eta (m_bar + m_i^tau). The correction adds m_bar before the EMA, and an
  EMA started at its first input is linear with weights summing to one, so
  EMA(g + m_bar) = EMA(g) + m_bar exactly. weight_decay, skip: local.l2."""
  parts = l2(weight_decay, skip)
  return optax.chain(*parts, first_step_ema(phi), optax.scale(-lr))


def self_confidence_kd(kd_lambda, temperature, tau2=False):
  """FedADC+'s local loss (1 - lambda) CE + lambda KL(p_hat || p_tau(x; theta)).

  tau2 (--kd_tau2) multiplies the KL by tau^2, as CS-KD's code, which §III follows, does
  (alinlab/cs-kd train.py, KDLoss); the paper's eq. has no such factor.

  Added to the task CE as lambda (KL - CE). The target mixes the global model's tempered
  softmax p_tilde with the client's label mix: rho_c = gamma_c / max gamma, and
      p_hat_c = (1 - rho_c) p_tilde_c  (c != y),   p_hat_y = 1 - sum_{c != y} (1 - rho_c) p_tilde_c.
  """

  def loss(params, logits, batch, ctx):
    gamma = ctx.label_hist / jnp.maximum(jnp.sum(ctx.label_hist), 1.0)
    rho = gamma / jnp.maximum(jnp.max(gamma), 1e-12)
    teacher = jax.lax.stop_gradient(ctx.apply(ctx.global_params, batch.x))
    p_tilde = jax.nn.softmax(teacher / temperature)
    not_true = 1.0 - jax.nn.one_hot(batch.y, logits.shape[-1])
    off = (1.0 - rho) * p_tilde * not_true
    p_hat = off + (1.0 - jnp.sum(off, axis=-1, keepdims=True)) * (1.0 - not_true)
    kl = masked_mean(kl_to_student(p_hat, logits, temperature), batch.mask)
    if tau2:
      kl = tau2_factor(temperature, tau2) * kl
    ce = masked_mean(cross_entropy(logits, batch.y), batch.mask)
    return kd_lambda * (kl - ce)

  return Part('self_kd', loss=loss)


# --- Registration -----------------------------------------------------------------------------
# The servers FedADC's recipes choose (--server_optimizer does not offer them).
SERVERS = ('fedadc', 'fedadc_dm')


# Its server momentum is part of the method: the part brings FedADC's server (Alg. 3).
@registry.registers('part', 'fedadc', 'embedded momentum: local steps lean on m_t (FedADC)',
                    reads=('beta_local', 'fedadc_variant'),
                    info=PartNeeds(server='fedadc', servers=SERVERS,
                                   server_note='FedADC, whose server momentum is part of the '
                                   'method (--beta_global)'))
def _embedded(v, **_):
  return embedded_momentum(v.beta_local, v.fedadc_variant == 'nesterov')


@registry.registers('part', 'self_kd', 'self-confidence distillation (FedADC+)',
                    reads=('kd_lambda', 'kd_temperature', 'kd_tau2'))
def _self_kd(v, **_):
  return self_confidence_kd(v.kd_lambda, v.kd_temperature, v.kd_tau2)


@registry.registers('server', 'fedadc', 'FedADC server momentum (Alg. 3): m_{t+1} = beta_global '
                    'm_t + Delta_bar', reads=('beta_local', 'beta_global'),
                    info=registry.INTERNAL)
def _server(v):
  return server_momentum(v.beta_local, v.beta_global, v.lr, v.server_lr)


@registry.registers('server', 'fedadc_dm', 'FedADC with double momentum (Alg. 4): m_{t+1} = '
                    'Delta_bar, beta_global = beta_local', reads=('beta_local',),
                    info=registry.INTERNAL)
def _server_dm(v):
  return server_momentum(v.beta_local, v.beta_local, v.lr, v.server_lr)


@registry.registers('local_optimizer', 'fedadc_dm', 'FedADC\'s local double momentum (Alg. 4); '
                    'replaces --local_optimizer', reads=('phi',), info=registry.INTERNAL)
def _double_momentum(v):
  return double_momentum_optimizer(v.lr, v.phi, v.weight_decay, v.weight_decay_skip)


_JOURNAL = 'FedADC paper (journal), '
algorithm('fedadc', Recipe(('fedadc',), server='fedadc', weighting='uniform',
                           weighting_source=_JOURNAL + 'Alg. 3 l.16',
                           summary='embedded server momentum'))
algorithm('fedadc_dm', Recipe(('fedadc',), server='fedadc_dm', weighting='uniform',
                              weighting_source=_JOURNAL + 'Alg. 4 (as Alg. 3 l.16)',
                              summary='FedADC + local double momentum',
                              local_optimizer='fedadc_dm'))
algorithm('fedadc_plus', Recipe(('fedadc', 'self_kd'), server='fedadc', weighting='uniform',
                                weighting_source=_JOURNAL + 'Alg. 3 l.16',
                                summary='FedADC + self-confidence distillation'))

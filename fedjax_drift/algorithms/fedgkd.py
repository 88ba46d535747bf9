"""FedGKD, FedGKD-Vote and FedGKD+.

Paper: D. Yao, W. Pan et al., "Local-Global Knowledge Distillation in Heterogeneous Federated
Learning with Non-IID Data": eqs. 3-5 and Algorithm 1 (aggregation n_i/n, l.14). FedGKD+
(§5.1, "we add the projection layer for FedGKD") is FedGKD on a model with a projection head
before the output layer (models/zoo.py WithProjection; algorithm fedgkd_plus).

The server keeps the last M global models w_t, w_{t-1}, ..., w_{t-M+1} (fewer in the first
rounds). FedGKD distils from their average:

    L = CE + (gamma / 2) mean_x KL(h(w_bar_t, x) || h(w, x)),  w_bar_t = (1/M) sum_m w_{t-m+1}

FedGKD-Vote keeps one term per buffered model, weighted by server-side validation loss:

    L = CE + sum_m (gamma_m / 2) KL(h(w_{t-m+1}) || h(w)),  gamma_m / 2 = lambda softmax_m(-L_m / beta)

with beta = 1/M. h is the temperature softmax; the KL convention is in distill.py.

Options (their sources in distill.py): tau2 multiplies each KL by tau^2 (the authors' code);
loss='mse' replaces each KL by the mean squared difference of the raw logits (Table 9, which
runs it for FedGKD with M = 1; the code's Vote path has KL only, here Vote takes it too).
start='aggregated' is the authors' code's buffer (CGCL-codes/FedGKD): it holds only aggregated
models, so round 1 has no teacher and no distillation; the paper's buffer (start='initial')
holds w_0 from the start, so round 1 distils from the model every client starts at.
"""
from typing import NamedTuple

import jax
import jax.numpy as jnp

from fedjax_drift.algorithms.distill import kd_loss, logit_mse
from fedjax_drift.algorithms.local import cross_entropy
from fedjax_drift.algorithms.parts import Part, PartNeeds
from fedjax_drift import registry
from fedjax_drift.errors import UserError
from fedjax_drift.algorithms.recipes import Recipe, algorithm


class ModelBuffer(NamedTuple):
  models: dict        # every leaf [M, ...]; slot (count - 1) % M holds the newest
  count: jax.Array    # int32: models pushed so far


START = ('initial', 'aggregated')


def _init_buffer(params, size, start='initial'):
  """The buffer before round 1: holding w_0 (the paper) or empty (start='aggregated')."""
  if start not in START:
    raise ValueError(f'unknown FedGKD buffer start {start!r}')
  models = jax.tree.map(lambda p: jnp.zeros((size,) + p.shape, p.dtype).at[0].set(p), params)
  return ModelBuffer(models, jnp.full((), start == 'initial', jnp.int32))


def _push(buffer, params, size):
  slot = buffer.count % size
  models = jax.tree.map(lambda b, p: b.at[slot].set(p), buffer.models, params)
  return ModelBuffer(models, buffer.count + 1)


def _filled(buffer, size):
  """[M] float mask of the slots holding a model."""
  return (jnp.arange(size) < jnp.minimum(buffer.count, size)).astype(jnp.float32)


def _push_new_global(size):
  def server_update(params, buffer, sctx):
    del sctx
    return params, _push(buffer, params, size)
  return server_update


def distillation_term(loss='kl', temperature=1.0, tau2=False):
  """(teacher logits, student logits, mask) -> FedGKD's per-model term: the KL of distill.py
  (times tau^2 with tau2) or, with loss='mse', distill.logit_mse."""
  if loss == 'mse':
    return logit_mse
  if loss != 'kl':
    raise ValueError(f'unknown FedGKD loss {loss!r}')
  return lambda teacher, student, mask: kd_loss(teacher, student, mask, temperature, tau2)


def ensemble_distillation(gamma, buffer_size, temperature, loss='kl', tau2=False,
                          start='initial'):
  """FedGKD: distil from the average of the buffered global models (none while it is empty)."""
  term = distillation_term(loss, temperature, tau2)

  def payload(buffer, params, server):
    del params, server
    filled = _filled(buffer, buffer_size)
    teacher = jax.tree.map(lambda b: jnp.tensordot(filled, b, axes=1)
                           / jnp.maximum(jnp.sum(filled), 1.0), buffer.models)
    return {'teacher': teacher, 'on': (buffer.count > 0).astype(jnp.float32)}

  def loss(params, logits, batch, ctx):
    del params
    sent = ctx.payload['fedgkd']
    teacher = ctx.apply(sent['teacher'], batch.x)
    return sent['on'] * 0.5 * gamma * term(teacher, logits, batch.mask)

  return Part('fedgkd', init=lambda p: _init_buffer(p, buffer_size, start), payload=payload,
              loss=loss, server_update=_push_new_global(buffer_size))


def vote_distillation(vote_lambda, buffer_size, temperature, apply_fn, x_val, y_val,
                      loss='kl', tau2=False, start='initial'):
  """FedGKD-Vote: one KL term per buffered model, weighted by validation loss on the server.
  x_val: the validation inputs as the model takes them (data/pipeline.preprocess)."""
  beta = 1.0 / buffer_size
  term = distillation_term(loss, temperature, tau2)

  def payload(buffer, params, server):
    del params, server
    filled = _filled(buffer, buffer_size)
    losses = jax.vmap(lambda m: jnp.mean(cross_entropy(apply_fn(m, x_val), y_val)))(
        buffer.models)
    scores = jnp.where(filled > 0, -losses / beta, -jnp.inf)
    # gamma_m / 2; 0 for empty slots, and all 0 while the buffer is empty (start='aggregated')
    half_gammas = jnp.where(buffer.count > 0, vote_lambda * jax.nn.softmax(
        jnp.where(buffer.count > 0, scores, 0.0)), 0.0)
    return {'models': buffer.models, 'half_gammas': half_gammas}

  def loss(params, logits, batch, ctx):
    del params
    sent = ctx.payload['fedgkd_vote']

    def one(model, half_gamma):
      return half_gamma * term(ctx.apply(model, batch.x), logits, batch.mask)

    return jnp.sum(jax.vmap(one)(sent['models'], sent['half_gammas']))

  return Part('fedgkd_vote', init=lambda p: _init_buffer(p, buffer_size, start),
              payload=payload,
              loss=loss, server_update=_push_new_global(buffer_size))


# --- Registration -----------------------------------------------------------------------------
_BUFFER = ('gkd_buffer', 'kd_temperature', 'gkd_loss', 'kd_tau2', 'gkd_buffer_start')


@registry.registers('part', 'gkd', 'distillation from the averaged buffered global models '
                    '(FedGKD)', reads=('gkd_gamma',) + _BUFFER)
def _ensemble(v, **_):
  return ensemble_distillation(v.gkd_gamma, v.gkd_buffer, v.kd_temperature, v.gkd_loss,
                               v.kd_tau2, v.gkd_buffer_start)


# --vote_val_size is read where the server split is carved (run_data.py, through
# algorithms.server_validation), not here.
@registry.registers('part', 'gkd_vote', 'per-model distillation weighted by server validation '
                    '(FedGKD-Vote)', reads=('vote_lambda', 'vote_val_size') + _BUFFER,
                    info=PartNeeds(validation_size='vote_val_size'))
def _vote(v, model, server_data, **_):
  if server_data is None:
    raise UserError('FedGKD-Vote needs a server validation split (--vote_val_size)')
  return vote_distillation(v.vote_lambda, v.gkd_buffer, v.kd_temperature, model.apply,
                           server_data['x_val'], server_data['y_val'], v.gkd_loss, v.kd_tau2,
                           v.gkd_buffer_start)


_CODE = 'FedGKD paper, Alg. 1 l.14'
algorithm('fedgkd', Recipe(('gkd',), weighting_source=_CODE,
                           summary='distillation from the buffered global models'))
algorithm('fedgkd_vote', Recipe(('gkd_vote',), weighting_source=_CODE,
                                summary='per-model distillation, validation-weighted'))
algorithm('fedgkd_plus', Recipe(('gkd',), weighting_source=_CODE,
                                summary='FedGKD with a projection head before the output layer '
                                '(FedGKD paper, §5.1 "FedGKD+")', projection=True))

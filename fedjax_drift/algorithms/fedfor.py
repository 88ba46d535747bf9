"""FedFOR: a first-order rectification against the last global move.

Paper: "FedFOR: Stateless Heterogeneous Federated Learning with First-Order Regularization"
(Tian, Smith and Kira), eqs. 6-7 and Algorithm 1. Clients receive W^{t-1} (the model) and
W^{t-2} (the one before) and minimise

    L_k(W) + c sum_j U((w_j^{t-2} - w_j^{t-1}) (w_j - w_j^{t-1})),   U = relu,     (eq. 7)

whose gradient is c (w^{t-2} - w^{t-1}) where the product is strictly positive and 0 elsewhere:
moving against the previous global update is penalised. The paper derives c from eq. 6's
gradient estimate grad L(W^{t-2}) ~ (W^{t-2} - W^{t-1}) / eta, which takes a round for one SGD
step. Its text supports several readings of c and of when the term acts; `--for_scale` picks
one (docs/algorithms.md derives each and RESULTS.md measures them):
  per_step  c = alpha / (eta H_i) at every step: the round's move spread over the client's own
            H_i local steps (the gradient estimate (W^{t-2} - W^{t-1}) / (eta H_i)); the
            default, the one reading that reproduces the paper's claims (alpha = 5 best of
            App. C's sweep, FedFOR >= FedAvg at every E of Table 2) and never diverged;
  paper     c = alpha / eta at every local step (eq. 7 as printed);
  round     c = alpha / eta at the client's last local step only: the momentum form after
            eq. 7, W_k^t = W_k^{t-1} - eta grad L_k + alpha (W^{t-1} - W^{t-2}), with t the
            round, so the correction comes once per round;
  epoch     c = alpha / eta at the last step of each local epoch (ceil(n_i / B) steps).
and `--for_gate` where U applies:
  coordinate  to each coordinate's product, the sum over j outside U (eq. 7 as printed);
  vector      to the whole inner product, one U of the sum (eq. 6's
              grad L(W^{t-2})^T (W - W^{t-1}) switched off when the move is forward overall).
With c = alpha / eta, one SGD step where the term is active moves each active coordinate by
alpha (W^{t-1} - W^{t-2}): a jump of alpha times the last global move, so the global update can
grow up to alpha-fold per round (alpha = 5 diverges on small models at any lr).

jax.nn.relu has derivative 0 at 0 (U'(0) = 0), so the term is inactive at the first local step,
where w = w^{t-1}. In round 1 there is no W^{t-2}; storing W^{t-2} = W^{t-1} makes the term
exactly zero there (plain FedAvg), as does alpha = 0, in every reading. The server averages
(1/K, Algorithm 1); FedFOR keeps no per-client state.
"""
import jax
import jax.numpy as jnp

from fedjax_drift.algorithms.parts import Part
from fedjax_drift import engine, registry
from fedjax_drift.algorithms.recipes import Recipe, algorithm

SCALES = ('paper', 'per_step', 'round', 'epoch')
GATES = ('coordinate', 'vector')


def rectified_term(alpha, scale='per_step', gate='coordinate'):
  """The FedFOR local term as a Part; its server buffer is W^{t-2}.

  alpha: the paper's alpha (>= 0); scale: one of SCALES, gate: one of GATES (module
  docstring). An epoch (scale='epoch') is ceil(n_i / B) steps, B the batch's static length
  (a full-batch step's length is the largest client's, so its epoch is one step).
  """
  if scale not in SCALES:
    raise ValueError(f'scale must be one of {SCALES}, got {scale}')
  if gate not in GATES:
    raise ValueError(f'gate must be one of {GATES}, got {gate}')

  def coefficient(ctx, batch_length):
    """c at the step being taken: alpha/eta times how much of it this step carries."""
    steps = jnp.maximum(ctx.num_steps, 1)
    if scale == 'paper':
      return alpha / ctx.lr
    if scale == 'per_step':
      return alpha / (ctx.lr * steps.astype(jnp.float32))
    if scale == 'round':
      return jnp.where(ctx.step == steps - 1, alpha / ctx.lr, 0.0)
    epoch = engine.steps_per_epoch(ctx.num_examples, batch_length)
    return jnp.where((ctx.step + 1) % jnp.maximum(epoch, 1) == 0, alpha / ctx.lr, 0.0)

  def loss(params, logits, batch, ctx):
    del logits
    older, previous = ctx.payload['fedfor'], ctx.global_params
    products = jax.tree.map(lambda w, p, o: (o - p) * (w - p), params, previous, older)
    if gate == 'coordinate':
      penalty = sum(jnp.sum(jax.nn.relu(x)) for x in jax.tree.leaves(products))
    else:
      penalty = jax.nn.relu(sum(jnp.sum(x) for x in jax.tree.leaves(products)))
    return coefficient(ctx, batch.y.shape[0]) * penalty

  def server_update(params, buffer, sctx):
    del buffer
    return params, sctx.old_params  # W^{t-1} becomes next round's W^{t-2}

  return Part('fedfor', init=lambda params: jax.tree.map(jnp.array, params),
              payload=lambda buffer, params, server: buffer, loss=loss,
              server_update=server_update)


# --- Registration -----------------------------------------------------------------------------
@registry.registers('part', 'for', 'rectified first-order term (FedFOR eq. 7; --for_scale)',
                    reads=('for_alpha', 'for_scale', 'for_gate'))
def _rectified(v, **_):
  return rectified_term(v.for_alpha, v.for_scale, v.for_gate)


algorithm('fedfor', Recipe(('for',), weighting='uniform',
                           weighting_source='FedFOR paper, Alg. 1: W^t = (1/K) sum_k W_k^t',
                           summary='rectified first-order term (--for_alpha, --for_scale, '
                                   '--for_gate)',
                           step_knobs=('for_alpha', 'for_scale')))

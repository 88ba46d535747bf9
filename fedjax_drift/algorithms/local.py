"""Local training: H_i steps of a (corrected) first-order method on a client's objective.

Shared by every algorithm. The pieces that vary by algorithm come in as pure functions:

  objective(params, batch, ctx) -> (loss, (ce, model_state))
                                                 the local loss (task loss + local terms); the
                                                 model state (BatchNorm statistics) or None
  lookahead(params, ctx) -> point                where the gradient is evaluated (Nesterov)
  clip(grads) -> grads                           gradient clipping (--clip_grad_norm)
  correct(grads, ctx) -> grads                   a local step correction (SCAFFOLD, FedADC, IGFL)
  optimizer                                      optax local optimizer (SGD or Adam, L2)

One step is

    g = grad objective(lookahead(theta))
    theta <- theta + optimizer(correct(clip(g)))

Clipping acts on the objective's gradient, as torch's clip_grad_norm_ right after backward()
does in the FedGKD code (pcode/workers/worker_fedgkd.py), so a step correction (SCAFFOLD's
c - c_i, FedADC's m_bar) and the L2 term are never rescaled by it.

for the client's own H_i steps, so clients with different data sizes run in one program.
"""
import jax
import jax.numpy as jnp
import optax

from fedjax_drift import registry


def masked_mean(values, mask):
  return jnp.sum(values * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def cross_entropy(logits, labels):
  return optax.softmax_cross_entropy_with_integer_labels(logits, labels)


def train(params, client, ctx, objective, optimizer, lookahead=None, correct=None, clip=None):
  """Runs the client's own H_i steps; returns (final params, mean loss over them).

  The loop's trip count is the client's traced H_i: run sequentially, a short client costs
  only its own steps; under vmap, JAX turns it into one batched loop to the cohort's longest
  client in which finished clients' updates are masked out (the no-op steps).
  """
  grad_fn = jax.value_and_grad(objective, has_aux=True)

  def step(s, carry):
    theta, opt_state, loss_sum = carry
    point = theta if lookahead is None else lookahead(theta, ctx)
    (loss, (_, model_state)), grads = grad_fn(point, client.batch(s), _at_step(ctx, s))
    if clip is not None:
      grads = clip(grads)
    if correct is not None:
      grads = correct(grads, ctx)
    updates, opt_state = optimizer.update(grads, opt_state, theta)
    theta = optax.apply_updates(theta, updates)
    if model_state is not None:  # BatchNorm statistics: written, not trained
      theta = {**theta, **model_state}
    return theta, opt_state, loss_sum + loss

  init = (params, optimizer.init(params), jnp.zeros((), jnp.float32))
  theta, _, loss_sum = jax.lax.fori_loop(0, client.num_steps, step, init)
  return theta, loss_sum / jnp.maximum(client.num_steps, 1)


def task_objective(apply_fn, train_apply=None):
  """objective(params, batch, ctx) -> (loss, (ce, model_state)) for `train`: the masked mean
  cross-entropy alone, as parts.compose builds it for an algorithm without local terms.
  train_apply(params, x, rng=None) -> (logits, model state or None) is the training-mode
  forward (BatchNorm statistics, dropout); default: apply_fn with no state."""
  forward = train_apply or (lambda params, x, rng=None: (apply_fn(params, x), None))

  def objective(params, batch, ctx):
    del ctx
    if batch.rng is None:
      logits, model_state = forward(params, batch.x)
    else:
      logits, model_state = forward(params, batch.x, batch.rng)
    ce = masked_mean(cross_entropy(logits, batch.y), batch.mask)
    return ce, (ce, model_state)

  return objective


def _at_step(ctx, step):
  """ctx with the local step it is read at (parts.ClientContext.step), when it has the field."""
  return ctx._replace(step=step) if 'step' in getattr(ctx, '_fields', ()) else ctx


def is_off(value):
  """True for a Python number equal to 0. Hyperparameters swept with --grid arrive as
  tracers: those are never 'off', so the code stays free of branches on traced values."""
  return isinstance(value, (int, float)) and value == 0


def sgd(lr, momentum=0.0, weight_decay=0.0, nesterov=False):
  """Local SGD; weight decay is classic L2 (wd * theta added to the gradient before the lr)."""
  parts = []
  if not is_off(weight_decay):
    parts.append(optax.add_decayed_weights(weight_decay))
  parts.append(optax.sgd(lr, momentum=None if is_off(momentum) else momentum,
                         nesterov=nesterov))
  return optax.chain(*parts)


def clip_by_global_norm(max_norm):
  """grads -> grads * min(1, max_norm / |grads|), |.| the global L2 norm over every leaf
  (optax.clip_by_global_norm; torch.nn.utils.clip_grad_norm_ up to its 1e-6 in the
  denominator)."""
  transform = optax.clip_by_global_norm(max_norm)

  def clip(grads):
    return transform.update(grads, transform.init(grads))[0]

  return clip


def adam(lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0):
  """Local Adam (Kingma & Ba; optax.adam, bias-corrected) with classic L2: wd * theta is
  added to the gradient before the moments, as torch.optim.Adam's weight_decay does. Its
  moments start at zero on every local run (local.train calls init each round)."""
  parts = [] if is_off(weight_decay) else [optax.add_decayed_weights(weight_decay)]
  return optax.chain(*parts, optax.adam(lr, b1=b1, b2=b2, eps=eps))


# --- Registration -----------------------------------------------------------------------------
# Every local optimizer reads --lr and --weight_decay, as every run does.
@registry.registers('local_optimizer', 'sgd', 'SGD with --local_momentum and L2 --weight_decay',
                    reads=('local_momentum',))
def _sgd(v):
  return sgd(v.lr, v.local_momentum, v.weight_decay)


@registry.registers('local_optimizer', 'adam', 'Adam (--adam_b1, --adam_b2, --adam_eps), L2 '
                    '--weight_decay', reads=('adam_b1', 'adam_b2', 'adam_eps'))
def _adam(v):
  return adam(v.lr, v.adam_b1, v.adam_b2, v.adam_eps, v.weight_decay)

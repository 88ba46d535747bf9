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
import re

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


# A normalisation layer's module: bn*, gn*, ln* (the models' names) or any name with "norm".
_NORM_LAYER = re.compile(r'^(bn|gn|ln)(\d|_|$)|norm', re.IGNORECASE)
WEIGHT_DECAY_SKIPS = ('none', 'norm', 'norm_except_shortcut')


def is_norm_parameter(path, skip):
  """Whether --weight_decay_skip=`skip` exempts the parameter at `path` (names, outermost
  first): 'norm' every normalisation layer's scale and bias; 'norm_except_shortcut' those
  too but a residual shortcut's norm, as FedGKD's code (pcode/create_optimizer.py zeroes
  weight decay for names containing "bn", which its ResNets give every norm but the
  shortcut's, downsample.1); 'none' nothing."""
  if skip == 'none':
    return False
  names = [str(getattr(k, 'key', getattr(k, 'name', k))) for k in path]
  if skip == 'norm_except_shortcut' and any('shortcut' in n for n in names):
    return False
  return any(_NORM_LAYER.search(n) for n in names[:-1])


def l2(weight_decay, skip='none'):
  """[optax.add_decayed_weights(wd)] masked by --weight_decay_skip (is_norm_parameter), or
  [] when wd is 0: classic L2, wd * theta added to the gradient."""
  if is_off(weight_decay):
    return []
  if skip == 'none':  # no mask: the program is the one without the option
    return [optax.add_decayed_weights(weight_decay)]
  mask = lambda params: jax.tree_util.tree_map_with_path(
      lambda path, _: not is_norm_parameter(path, skip), params)
  return [optax.add_decayed_weights(weight_decay, mask=mask)]


def sgd(lr, momentum=0.0, weight_decay=0.0, nesterov=False, skip='none'):
  """Local SGD; weight decay is classic L2 (wd * theta added to the gradient before the lr),
  on the parameters `l2`'s skip leaves."""
  parts = l2(weight_decay, skip)
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


def adam(lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0, skip='none'):
  """Local Adam (Kingma & Ba; optax.adam, bias-corrected) with classic L2: wd * theta is
  added to the gradient before the moments, as torch.optim.Adam's weight_decay does. Its
  moments start at zero on every local run (local.train calls init each round). skip: `l2`."""
  parts = l2(weight_decay, skip)
  return optax.chain(*parts, optax.adam(lr, b1=b1, b2=b2, eps=eps))


# --- Registration -----------------------------------------------------------------------------
# Every local optimizer reads --lr, --weight_decay and --weight_decay_skip, as every run does.
@registry.registers('local_optimizer', 'sgd', 'SGD with --local_momentum and L2 --weight_decay',
                    reads=('local_momentum',))
def _sgd(v):
  return sgd(v.lr, v.local_momentum, v.weight_decay, skip=v.weight_decay_skip)


@registry.registers('local_optimizer', 'adam', 'Adam (--adam_b1, --adam_b2, --adam_eps), L2 '
                    '--weight_decay', reads=('adam_b1', 'adam_b2', 'adam_eps'))
def _adam(v):
  return adam(v.lr, v.adam_b1, v.adam_b2, v.adam_eps, v.weight_decay, v.weight_decay_skip)

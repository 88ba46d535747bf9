"""FedGen: data-free knowledge distillation with a server-side conditional generator.

Paper: Z. Zhu, J. Hong, J. Zhou, "Data-Free Knowledge Distillation for Heterogeneous Federated
Learning", ICML 2021. Where the paper leaves a detail open, the authors' code
(zhuangdizhu/FedGen: servers/serverpFedGen.py, users/userpFedGen.py, trainmodel/generator.py,
utils/model_config.py) is the reference; docs/algorithms.md lists every difference.

A generator G(y, eps) -> z maps a label and uniform noise eps ~ U[0, 1)^noise_dim to a feature
z of the model's penultimate width d: concat(eps, onehot(y)) -> Linear(hidden) -> BatchNorm ->
ReLU -> Linear(d) (the code's Generator with embedding=0). g(theta; z) is a model's output layer
alone (models.Model.head).

Round t (0-based), cohort S_t, the server holding G_t:

  client k:  L = CE(x, y)
                 + beta_t  mean_{(x,y)} KL(softmax(g(theta; G_t(y))) || softmax(f(theta; x)))
                 + alpha_t (S/B) mean_{s<S} CE(g(theta; G_t(y_s)), y_s),  y_s ~ U{0..C-1}
             alpha_t = max(1e-4, alpha 0.98^t) (0 when alpha = 0), beta_t likewise; both terms
             are off in round 0 (the code regularises from glob_iter > 0). The target
             softmax carries no gradient; G_t runs in evaluation mode (BatchNorm running
             statistics); S = --fedgen_client_batch, B = the local batch size.
             Uploads the output layer of its final model and its label counts n_k[c].
  server:    theta_{t+1} = sum_k p_k theta_k (parameter averaging, as FedAvg);
             G takes --fedgen_steps Adam steps (lr 0.98^t --fedgen_lr, L2 --fedgen_weight_decay,
             moments kept across rounds) on
               J = mean_b sum_k w[y_b, k] CE(g(theta_k; z_b), y_b) + eta exp(-mean_ij d2(eps_i,
                   eps_j) d1(z_i, z_j)),   z = G(y, eps) in training mode,
             y_b drawn uniformly from the labels some cohort client holds, w[c, k] = n_k[c] /
             sum_j n_j[c], d1/d2 the mean absolute / squared difference over the features.
             With --fedgen_teacher=ensemble the first term is CE(sum_k w[y, k] g(theta_k; z), y).

alpha = beta = 0 is FedAvg exactly (no local term is built; the generator, which nothing else
reads, still trains). The first round initialises G from the round's key (torch's nn.Linear
initialisation: U(+-1/sqrt(fan_in)) for weights and biases).
"""
import math

import jax
import jax.numpy as jnp
import optax

from fedjax_drift.algorithms.distill import kl_to_student
from fedjax_drift.algorithms.local import cross_entropy, is_off, masked_mean
from fedjax_drift.algorithms.parts import Part
from fedjax_drift.errors import UserError
from fedjax_drift import registry
from fedjax_drift.algorithms.recipes import Recipe, algorithm

COEFFICIENT_FLOOR = 1e-4  # userpFedGen.exp_lr_scheduler: max(1e-4, init * decay^t)
BN_EPS, BN_MOMENTUM = 1e-5, 0.1  # torch.nn.BatchNorm1d's defaults, as the code's generator
_CLIENT_TAG, _SERVER_TAG = 0x46477e, 0x46477f  # folded into the engine's keys: FedGen's own draws


def init_generator(key, noise_dim, hidden, latent, num_classes):
  """Generator parameters ({'fc', 'bn', 'out'}) with torch's nn.Linear initialisation
  (weights and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in))), BatchNorm scale 1 and shift 0."""
  k = jax.random.split(key, 4)
  fan_fc, fan_out = noise_dim + num_classes, hidden

  def uniform(kk, shape, fan):
    bound = 1.0 / math.sqrt(fan)
    return jax.random.uniform(kk, shape, jnp.float32, -bound, bound)

  return {'fc': {'kernel': uniform(k[0], (fan_fc, hidden), fan_fc),
                 'bias': uniform(k[1], (hidden,), fan_fc)},
          'bn': {'scale': jnp.ones((hidden,), jnp.float32),
                 'bias': jnp.zeros((hidden,), jnp.float32)},
          'out': {'kernel': uniform(k[2], (hidden, latent), fan_out),
                  'bias': uniform(k[3], (latent,), fan_out)}}


def init_statistics(hidden):
  """BatchNorm running statistics (torch's initial mean 0, variance 1)."""
  return {'mean': jnp.zeros((hidden,), jnp.float32), 'var': jnp.ones((hidden,), jnp.float32)}


def generate(gen, stats, labels, noise, num_classes, train):
  """G(labels, noise) -> (z [B, d], new running statistics).

  train=True normalises with the batch's statistics and moves the running ones (torch: biased
  variance to normalise, unbiased into the running variance, momentum 0.1); train=False uses
  the running statistics and returns them unchanged.
  """
  h = jnp.concatenate([noise, jax.nn.one_hot(labels, num_classes)], axis=1)
  h = h @ gen['fc']['kernel'] + gen['fc']['bias']
  if train:
    n = h.shape[0]
    mean, var = jnp.mean(h, axis=0), jnp.var(h, axis=0)
    stats = {'mean': (1 - BN_MOMENTUM) * stats['mean'] + BN_MOMENTUM * mean,
             'var': (1 - BN_MOMENTUM) * stats['var'] + BN_MOMENTUM * var * n / max(n - 1, 1)}
  else:
    mean, var = stats['mean'], stats['var']
  h = (h - mean) / jnp.sqrt(var + BN_EPS) * gen['bn']['scale'] + gen['bn']['bias']
  return jax.nn.relu(h) @ gen['out']['kernel'] + gen['out']['bias'], stats


def diversity_loss(noise, z):
  """The code's DiversityLoss(metric='l1'): exp(-mean_ij d2(eps_i, eps_j) d1(z_i, z_j)), with
  d1 the mean absolute and d2 the mean squared difference over the feature axis."""
  dz = jnp.mean(jnp.abs(z[:, None, :] - z[None, :, :]), axis=-1)
  dn = jnp.mean(jnp.square(noise[:, None, :] - noise[None, :, :]), axis=-1)
  return jnp.exp(-jnp.mean(dn * dz))


def label_weights(counts):
  """counts [K, C] (client k's examples of label c) -> (w [C, K] = n_k[c] / sum_j n_j[c], 0
  for a label nobody holds; qualified [C] float, 1 where some cohort client holds the label)."""
  total = jnp.sum(counts, axis=0)
  w = jnp.where(total[:, None] > 0, counts.T / jnp.maximum(total, 1e-12)[:, None], 0.0)
  return w, (total > 0).astype(jnp.float32)


def teacher_loss(head_fn, heads, z, y, weights, ensemble=False):
  """The generator's fit to the cohort's heads. heads: the K output layers stacked; weights
  [C, K]. Default: mean_b sum_k w[y_b, k] CE(g_k(z_b), y_b), the per-example weighting the
  code intends (its [B] x [B, 1] product broadcasts to [B, B]: see docs/algorithms.md);
  ensemble=True: mean_b CE(sum_k w[y_b, k] g_k(z_b), y_b)."""
  logits = jax.vmap(lambda h: head_fn(h, z))(heads)   # [K, B, C]
  w = weights[y].T                                      # [K, B]
  if ensemble:
    return jnp.mean(cross_entropy(jnp.sum(w[..., None] * logits, axis=0), y))
  ce = jax.vmap(lambda lg: cross_entropy(lg, y))(logits)  # [K, B]
  return jnp.sum(jnp.mean(ce * w, axis=1))


def decayed(coefficient, decay, t):
  """The client coefficient in round t: max(1e-4, c decay^t), and 0 for c = 0 (the code's
  exp_lr_scheduler floors even 0 at 1e-4; 0 here means off, so that 0 is FedAvg)."""
  value = jnp.maximum(COEFFICIENT_FLOOR, coefficient * jnp.power(decay, t))
  return jnp.where(jnp.asarray(coefficient) > 0, value, 0.0)


def head_shape(model):
  """(d, C): the output layer's input and output widths, from shapes only; UserError for a
  model whose output layer cannot be applied alone."""
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0))
  if model.head is None:
    raise UserError(f'--algo=fedgen needs a model with a separate output layer; --model='
                    f'{model.name} has none')
  kernels = [leaf for leaf in jax.tree.leaves(jax.eval_shape(model.head_params, params))
             if len(leaf.shape) == 2]
  x = jax.ShapeDtypeStruct((1,) + tuple(model.input_shape),  # text models read int32 tokens
                           jnp.int32 if model.family == 'text' else jnp.float32)
  z = jax.eval_shape(model.penultimate, params, x)
  if len(kernels) != 1 or z.ndim != 2 or z.shape[-1] != kernels[0].shape[0]:
    raise UserError(f'--algo=fedgen: --model={model.name}\'s features are not the input of '
                    'its output layer, so the generator has no feature space to map into')
  return tuple(int(s) for s in kernels[0].shape)


def generator_optimizer(weight_decay):
  """torch.optim.Adam(betas=(0.9, 0.999), eps=1e-8, weight_decay) without its learning rate:
  L2 added to the gradient before the moments; the round's lr multiplies the result."""
  parts = [] if is_off(weight_decay) else [optax.add_decayed_weights(weight_decay)]
  return optax.chain(*parts, optax.scale_by_adam(b1=0.9, b2=0.999, eps=1e-8))


def generator_distillation(model, alpha, beta, decay, noise_dim, hidden, steps, lr,
                           batch_size, client_batch, weight_decay, diversity=1.0,
                           lr_decay=0.98, teacher='clients'):
  """The FedGen part (see the module docstring). model: models.Model (head, head_params,
  penultimate); batch_size: the server's generator batch; client_batch: S."""
  latent, num_classes = head_shape(model)
  if teacher not in ('clients', 'ensemble'):
    raise ValueError(f'unknown FedGen teacher {teacher!r}')
  opt = generator_optimizer(weight_decay)
  shapes = jax.eval_shape(lambda: init_generator(jax.random.PRNGKey(0), noise_dim, hidden,
                                                 latent, num_classes))

  def init(params):
    del params
    gen = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
    return {'gen': gen, 'stats': init_statistics(hidden), 'opt': opt.init(gen),
            'round': jnp.zeros((), jnp.int32),
            'teacher_loss': jnp.zeros((), jnp.float32),
            'diversity_loss': jnp.zeros((), jnp.float32)}

  def payload(buffer, params, server):
    del params, server
    return {'gen': buffer['gen'], 'stats': buffer['stats'], 'round': buffer['round']}

  loss = _client_loss(model, alpha, beta, decay, noise_dim, num_classes, client_batch)

  def client_upload(ctx, delta):
    final = jax.tree.map(jnp.subtract, ctx.global_params, delta)
    return {'head': model.head_params(final), 'counts': ctx.label_hist.astype(jnp.float32),
            'key': jax.random.key_data(jax.random.fold_in(ctx.key, _SERVER_TAG))}

  server_update = _train_generator(model, opt, steps, lr, lr_decay, batch_size, noise_dim, hidden,
                                   latent, num_classes, diversity, teacher)

  def diagnostics(buffer):
    return {'fedgen_teacher_loss': buffer['teacher_loss'],
            'fedgen_diversity_loss': buffer['diversity_loss']}

  has_loss = not (is_off(alpha) and is_off(beta))
  return Part('fedgen', init=init, payload=payload, loss=loss if has_loss else None,
              client_upload=client_upload, server_update=server_update,
              diagnostics=diagnostics, upload=lambda params: num_classes)


def _client_loss(model, alpha, beta, decay, noise_dim, num_classes, client_batch):
  """The clients' FedGen terms: beta times the KL from the generator's view of the batch's
  own labels, plus alpha times the head's cross-entropy on S generated latents (both decayed
  by round; zero in round 0, before a generator exists)."""
  def loss(params, logits, batch, ctx):
    sent = ctx.payload['fedgen']
    t = sent['round']
    key = jax.random.fold_in(jax.random.fold_in(ctx.key, _CLIENT_TAG), ctx.step)
    k_real, k_labels, k_fake = jax.random.split(key, 3)
    total = jnp.zeros((), jnp.float32)
    if not is_off(beta):  # the latent term: the generator's view of the batch's own labels
      noise = jax.random.uniform(k_real, (batch.y.shape[0], noise_dim))
      z, _ = generate(sent['gen'], sent['stats'], batch.y, noise, num_classes, train=False)
      target = jax.nn.softmax(model.head(params, z))
      kl = masked_mean(kl_to_student(target, logits, 1.0), batch.mask)
      total = total + decayed(beta, decay, t) * kl
    if not is_off(alpha):  # the teacher term: S labels drawn uniformly, fitted by the head
      y = jax.random.randint(k_labels, (client_batch,), 0, num_classes)
      noise = jax.random.uniform(k_fake, (client_batch, noise_dim))
      z, _ = generate(sent['gen'], sent['stats'], y, noise, num_classes, train=False)
      ce = jnp.mean(cross_entropy(model.head(params, z), y))
      total = total + decayed(alpha, decay, t) * (client_batch / batch.y.shape[0]) * ce
    return jnp.where(t > 0, total, 0.0)  # round 0: no generator yet (glob_iter > 0)
  return loss


def _train_generator(model, opt, steps, lr, lr_decay, batch_size, noise_dim, hidden, latent,
                     num_classes, diversity, teacher):
  """The server hook: `steps` generator steps against the cohort's uploaded heads (teacher
  loss weighted by their label counts, plus the diversity term); params pass through."""
  def server_update(params, buffer, sctx):
    up = sctx.cohort.uploads['fedgen']
    # The server's draws: the first cohort client's key for this round (run- and round-specific).
    key = jax.random.wrap_key_data(up['key'][0])
    t = buffer['round']
    fresh = init_generator(jax.random.fold_in(key, 0), noise_dim, hidden, latent, num_classes)
    gen = jax.tree.map(lambda a, b: jnp.where(t == 0, a, b), fresh, buffer['gen'])
    weights, qualified = label_weights(up['counts'])
    # No label held at all cannot happen with real clients; fall back to uniform all the same.
    p = jnp.where(jnp.sum(qualified) > 0, qualified, 1.0)
    p = p / jnp.sum(p)
    step_lr = lr * jnp.power(lr_decay, t)

    def objective(g, stats, y, noise):
      z, stats = generate(g, stats, y, noise, num_classes, train=True)
      t_loss = teacher_loss(model.head, up['head'], z, y, weights, teacher == 'ensemble')
      d_loss = diversity_loss(noise, z)
      return t_loss + diversity * d_loss, (stats, t_loss, d_loss)

    def one(i, carry):
      g, stats, opt_state, t_sum, d_sum = carry
      k_y, k_noise = jax.random.split(jax.random.fold_in(key, i + 1))
      y = jax.random.choice(k_y, num_classes, (batch_size,), p=p)
      noise = jax.random.uniform(k_noise, (batch_size, noise_dim))
      grads, (stats, t_loss, d_loss) = jax.grad(objective, has_aux=True)(g, stats, y, noise)
      updates, opt_state = opt.update(grads, opt_state, g)
      g = jax.tree.map(lambda w, u: w - step_lr * u, g, updates)
      return g, stats, opt_state, t_sum + t_loss, d_sum + d_loss

    zero = jnp.zeros((), jnp.float32)
    gen, stats, opt_state, t_sum, d_sum = jax.lax.fori_loop(
        0, steps, one, (gen, buffer['stats'], buffer['opt'], zero, zero))
    return params, {'gen': gen, 'stats': stats, 'opt': opt_state, 'round': t + 1,
                    'teacher_loss': t_sum / max(steps, 1),
                    'diversity_loss': d_sum / max(steps, 1)}
  return server_update


# --- Registration -----------------------------------------------------------------------------
@registry.registers(
    'part', 'fedgen', 'server-side generator of penultimate features distilled into the heads '
    '(FedGen)', reads=('fedgen_alpha', 'fedgen_beta', 'fedgen_decay', 'fedgen_noise_dim',
                       'fedgen_hidden', 'fedgen_steps', 'fedgen_lr', 'fedgen_weight_decay',
                       'fedgen_batch', 'fedgen_client_batch', 'fedgen_diversity',
                       'fedgen_teacher'))
def _generator(v, model, **_):
  return generator_distillation(
      model, v.fedgen_alpha, v.fedgen_beta, v.fedgen_decay, v.fedgen_noise_dim, v.fedgen_hidden,
      v.fedgen_steps, v.fedgen_lr, v.fedgen_batch or v.batch_size or 32, v.fedgen_client_batch,
      v.fedgen_weight_decay, v.fedgen_diversity, teacher=v.fedgen_teacher)


algorithm('fedgen', Recipe(
    ('fedgen',), weighting_source='FedGen code, serverbase.aggregate_parameters: n_k/n over the '
    'selected users', summary='server-side conditional generator of penultimate features, '
    'distilled into the clients\' heads (Zhu et al. 2021, FedGen)',
    # the code's alpha = beta = 10 go with its lr 0.01 and 20 local steps; at --lr=0.05 and 80
    # steps the head's update jumps ~50x in round 2 (docs/algorithms.md)
    step_knobs=('fedgen_alpha', 'fedgen_beta')))

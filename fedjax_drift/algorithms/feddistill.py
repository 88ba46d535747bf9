"""FedDistill+: federated distillation of per-label average logits, plus parameter averaging.

Paper: Z. Zhu, J. Hong, J. Zhou, "Data-Free Knowledge Distillation for Heterogeneous Federated
Learning" (FedGen), ICML 2021, §5 baselines: FedDistill (Jeong et al. 2018) shares label-wise
average logit vectors among users; FedDistill+ shares those and the network parameters. The
paper gives no formula; the rest follows the authors' code (zhuangdizhu/FedGen,
FLAlgorithms/users/userFedDistill.py and servers/serverFedDistill.py). Differences from the
code are listed in docs/algorithms.md.

Round t, with the server's table G_t [C, C] (row c: the global average logit vector of label
c) and mask s_t [C] (1 where some client has reported label c):

  client i:  L = CE + lambda * (1/|B|) sum_{x in B} s_t[y] KL(softmax(G_t[y] / tau) ||
                                                               softmax(f(w; x) / tau))
             (times tau^2 with --kd_tau2; lambda = --distill_lambda, the code's reg_alpha = 1)
             after local training: S_i[c] = sum of the raw logits f(w_i; x) of its final
             model over one pass of its examples of label c, n_i[c] their count (uploaded)
  server:    w_{t+1} = sum_i p_i w_i                       (parameter averaging, the "+")
             G_{t+1}[c] = mean over the cohort clients i with n_i[c] > 0 of S_i[c] / n_i[c]
             (labels no cohort client holds keep their row), s_{t+1}[c] = s_t[c] or any n_i[c]

lambda = 0 is FedAvg exactly (the term is multiplied by a zero and the logits only feed the
table, which nothing else reads).
"""
import jax
import jax.numpy as jnp

from fedjax_drift.algorithms.distill import kl_to_student, tau2_factor
from fedjax_drift.algorithms.parts import Part
from fedjax_drift import registry
from fedjax_drift import models
from fedjax_drift.algorithms.recipes import Recipe, algorithm


def label_logit_sums(apply_fn, params, batch_fn, num_examples, num_classes):
  """Per-label sums of the raw logits of `params` over one pass of a client's examples.

  batch_fn(step) -> Batch; steps 0 .. ceil(n_i / B) - 1 visit each example once (engine's
  make_batch_fn). Returns (sums [C, C] float32, counts [C] float32).
  """
  first = batch_fn(0)
  batch_size = first.y.shape[0]
  num_batches = (num_examples + batch_size - 1) // batch_size

  def one(step, carry):
    sums, counts = carry
    b = batch_fn(step)
    onehot = jax.nn.one_hot(b.y, num_classes) * b.mask[:, None]  # [B, C]
    logits = apply_fn(params, b.x)
    return sums + onehot.T @ logits, counts + jnp.sum(onehot, axis=0)

  init = (jnp.zeros((num_classes, num_classes), jnp.float32),
          jnp.zeros((num_classes,), jnp.float32))
  return jax.lax.fori_loop(0, num_batches, one, init)


def aggregate_table(table, seen, sums, counts):
  """New (table [C, C], seen [C]) from the cohort's uploads sums [K, C, C], counts [K, C]:
  row c is the unweighted mean of the holders' per-label averages S_i[c] / n_i[c]; a label no
  cohort client holds keeps its row."""
  holds = (counts > 0).astype(jnp.float32)                            # [K, C]
  averages = sums / jnp.maximum(counts, 1.0)[..., None]               # [K, C, C]
  holders = jnp.sum(holds, axis=0)                                    # [C]
  mean = jnp.einsum('kc,kcd->cd', holds, averages) / jnp.maximum(holders, 1.0)[:, None]
  present = holders > 0
  return (jnp.where(present[:, None], mean, table),
          jnp.maximum(seen, present.astype(jnp.float32)))


def label_distillation(distill_lambda, temperature, num_classes, tau2=False):
  """The FedDistill+ part (see the module docstring). num_classes: C, the logits' width."""

  def init(params):
    del params
    return {'table': jnp.zeros((num_classes, num_classes), jnp.float32),
            'seen': jnp.zeros((num_classes,), jnp.float32)}

  def loss(params, logits, batch, ctx):
    del params
    sent = ctx.payload['feddistill']
    target = jax.nn.softmax(sent['table'][batch.y] / temperature)
    kl = kl_to_student(target, logits, temperature) * sent['seen'][batch.y]
    # The batch mean over its real examples (the code's KLDivLoss 'batchmean'); examples of a
    # label nobody has reported add 0 (the code has no term before the first table).
    per_batch = jnp.sum(kl * batch.mask) / jnp.maximum(jnp.sum(batch.mask), 1.0)
    return distill_lambda * tau2_factor(temperature, tau2) * per_batch

  def client_upload(ctx, delta):
    final = jax.tree.map(jnp.subtract, ctx.global_params, delta)
    sums, counts = label_logit_sums(ctx.apply, final, ctx.batch, ctx.num_examples, num_classes)
    return {'sums': sums, 'counts': counts}

  def server_update(params, buffer, sctx):
    up = sctx.cohort.uploads['feddistill']
    table, seen = aggregate_table(buffer['table'], buffer['seen'], up['sums'], up['counts'])
    return params, {'table': table, 'seen': seen}

  return Part('feddistill', init=init, payload=lambda buffer, params, server: buffer,
              loss=loss, client_upload=client_upload, server_update=server_update,
              upload=lambda params: num_classes * num_classes + num_classes)


# --- Registration -----------------------------------------------------------------------------
def num_classes(model):
  """C, the width of the model's logits (from shapes only; nothing is computed)."""
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0))
  return int(jax.eval_shape(model.apply, params, models.example_input(model)).shape[-1])


@registry.registers('part', 'feddistill', 'per-label logit distillation (FedDistill+)',
                    reads=('distill_lambda', 'kd_temperature', 'kd_tau2'))
def _label_distillation(v, model, **_):
  return label_distillation(v.distill_lambda, v.kd_temperature, num_classes(model), v.kd_tau2)


algorithm('feddistill_plus', Recipe(
    ('feddistill',), weighting_source='FedGen code, serverbase.aggregate_parameters: n_k/n over '
    'the selected users', summary='per-label logit distillation + parameter averaging (FedGen '
    'paper, §5 "FedDistill+")'))

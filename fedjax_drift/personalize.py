"""Personalisation by classifier calibration (FedADC paper, §IV-D).

After training, every client copies the global model and trains only its last layer for E
local epochs on its own data, optionally with a calibration term (--personalize_term: each
registered term's build gives the Part whose loss calibration adds, FedProx's proximal term
or FedADC+'s self-confidence distillation). Each client is evaluated on its own test split
(the test set partitioned like the training set), before and after calibration. Inputs are
normalised as in training (data/pipeline.preprocess); calibration batches are not augmented.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_drift import engine
from fedjax_drift.algorithms import fedadc, fedprox, local
from fedjax_drift.algorithms.fedrep import head_labels  # the last layer, as FedRep's head
from fedjax_drift.algorithms.parts import ClientContext
from fedjax_drift.data import federated
from fedjax_drift.data.pipeline import Pipeline, preprocess
from fedjax_drift.state import Client
from fedjax_drift import registry


def calibrate(model, params, train, test, schedule, lr, terms=(), seed=0, chunk=1, norm=None):
  """Per-client test accuracy of the global model and of each calibrated model.

  train / test: FederatedData over the same clients. terms: Parts whose losses calibration
  adds to the cross-entropy (for_experiment builds --personalize_term's). Returns numpy
  arrays (acc_before, acc_after, num_test) of shape [N]. norm: the run's
  data/pipeline.Normalization or None.
  """
  before, after = calibrator(model, params, train, test, schedule, lr, terms, seed, chunk,
                             norm)(params)
  return np.asarray(before), np.asarray(after), np.asarray(test.client_count)


def for_experiment(exp):
  """(calibrator(...), num_test [N]) for a study.Experiment: its --personalize_* flags, lr
  and seed, its training tables and its test set split like them (exp.test_parts)."""
  cfg, ds = exp.config, exp.dataset
  test = federated.build(ds.x_test, ds.y_test, exp.test_parts, ds.num_classes)
  schedule = engine.Schedule(cfg.batch_size, 0, cfg.personalize_epochs)
  norm = exp.pipeline.norm if exp.pipeline else None
  # --personalize_term's entry built from the values it declares: a Part, or None for none.
  term = registry.build('personalize_term', cfg.personalize_term, cfg)
  run = calibrator(exp.model, exp.state.params, exp.data, test, schedule, cfg.lr,
                   () if term is None else (term,), cfg.seed, exp.chunk, norm)
  return run, np.asarray(test.client_count)


def calibrator(model, params, train, test, schedule, lr, terms=(), seed=0, chunk=1, norm=None):
  """The jitted params -> (acc_before [N], acc_after [N]) that `calibrate` computes, compiled
  once and reusable (--personalize_every_eval calls it at every evaluation). `params` gives
  only the structure (which leaves are the classifier); `terms` as for `calibrate`."""
  optimizer = optax.multi_transform({'train': optax.sgd(lr), 'freeze': optax.set_to_zero()},
                                    head_labels(params))
  extra = tuple(terms)

  def objective(p, batch, ctx):
    logits = model.apply(p, batch.x)  # evaluation mode: calibration keeps norm statistics
    ce = local.masked_mean(local.cross_entropy(logits, batch.y), batch.mask)
    return ce + sum(t.loss(p, logits, batch, ctx) for t in extra), (ce, None)

  def accuracy(p, cid):
    row = test.client_index[cid]
    mask = (jnp.arange(row.shape[0]) < test.client_count[cid]).astype(jnp.float32)
    correct = jnp.argmax(model.apply(p, preprocess(test.x[row], norm)), -1) == test.y[row]
    return jnp.sum(correct * mask) / jnp.maximum(jnp.sum(mask), 1.0)

  key = jax.random.fold_in(jax.random.key(seed), 0x9E5)
  max_steps = engine.max_steps(np.asarray(train.client_count), schedule)

  def one(params, cid):
    count = train.client_count[cid]
    steps = engine.client_steps(count, schedule).astype(jnp.int32)
    spe = engine.steps_per_epoch(count, schedule.batch_size)
    k = jax.random.fold_in(key, cid)
    batch_fn = engine.make_batch_fn(train, train.client_index[cid], count, k,
                                    schedule.batch_size, spe,
                                    pipeline=Pipeline(norm=norm))
    client = Client(cid, count, steps, max_steps, train.label_hist[cid], batch_fn)
    ctx = ClientContext(params, {}, {}, lr, steps, count, train.label_hist[cid], 1,
                        model.apply, batch_fn)
    tuned, _ = local.train(params, client, ctx, objective, optimizer)
    return accuracy(params, cid), accuracy(tuned, cid)

  ids = jnp.arange(train.client_count.shape[0], dtype=jnp.int32)

  @jax.jit
  def run(global_params):
    return jax.lax.map(lambda cid: one(global_params, cid), ids, batch_size=chunk)

  return run


def summarize(before, after, num_test):
  """Per-client accuracies of the global model (`before`) and the calibrated ones (`after`),
  [N] each, and the clients' test counts [N] -> the summary's 'personalization': over the
  clients with test examples, each model's mean, std (ddof 0), min and max, and the mean gain."""
  keep = num_test > 0
  b, a = before[keep], after[keep]
  return {
      'clients_evaluated': int(keep.sum()),
      'global_model_mean_accuracy': float(b.mean()), 'global_model_std_accuracy': float(b.std()),
      'global_model_min_accuracy': float(b.min()), 'global_model_max_accuracy': float(b.max()),
      'calibrated_mean_accuracy': float(a.mean()), 'calibrated_std_accuracy': float(a.std()),
      'calibrated_min_accuracy': float(a.min()), 'calibrated_max_accuracy': float(a.max()),
      'mean_gain': float((a - b).mean()),
  }


# --- Registration -----------------------------------------------------------------------------
# A personalisation is data: for_experiment reads its values; the entry names them for --list
# and the checks. A calibration term's build(values) -> the Part whose loss calibration adds
# to the cross-entropy, or None for none (for_experiment builds it).
registry.register('personalize', 'none', 'evaluate the global model as trained')
registry.register('personalize', 'calibrate', 'each client fine-tunes the last layer on its '
                  'data (FedADC §IV-D)', reads=('personalize_epochs', 'personalize_term'))
registry.register('personalize_term', 'none', 'calibration by cross-entropy alone',
                  build=lambda v: None)
registry.register('personalize_term', 'prox', 'calibration adds the proximal term (--prox_mu)',
                  reads=('prox_mu',), build=lambda v: fedprox.proximal_term(v.prox_mu))
registry.register('personalize_term', 'self_kd', 'calibration adds self-confidence '
                  'distillation', reads=('kd_lambda', 'kd_temperature', 'kd_tau2'),
                  build=lambda v: fedadc.self_confidence_kd(v.kd_lambda, v.kd_temperature,
                                                            v.kd_tau2))

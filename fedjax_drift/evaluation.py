"""What a run's test accuracy is: the evaluation protocols (--eval_protocol).

global: the global model on the whole test set (loss and accuracy pooled over its examples).
fedbn:  FedBN's protocol (Li et al. 2021; their code tests models[i] on test_loaders[i]): each
        client's own model, the global weights with that client's BatchNorm layers and
        running statistics from its per-client row, tested on the client's own test split
        (--partition=domains: its share of its domain's test set, the whole domain's with one
        client per domain; --test_partition=like_train: its label-matched split). A client
        never sampled yet has the initial model's norm layers (algorithms/fedbn.py), as in
        FedBN's code where every client starts from a copy of the initial model. The run's
        accuracy (and loss) is the mean over domains of the per-domain accuracy (loss), as
        FedBN and FedFOR (Tables 3-5, ACC40/ACC80) report it; without domain ids the test
        examples that some client holds form one group.
auto:   fedbn when the algorithm keeps BatchNorm local (--algo=fedbn or --local_terms=fedbn)
        and clients have test splits, else global.

With domain ids in the test set, both protocols also give one accuracy per domain
(metrics.csv's acc_domain_<name> columns).

Validation (--val_fraction, or --val_source=dataset): every evaluation also scores the run's
validation split (run_data.Validation: rows of the shared training array no client trains on;
the dataset's own split is appended after the training examples) under the same protocol: the global
model on all of them (loss and accuracy pooled), or with fedbn each client's own model on the
examples carved from its data, accuracy the mean over domains. metrics.csv's val_accuracy and
val_loss; a sweep or preset may pick its grid point by them (--select_on).

The fedbn evaluation runs inside one compiled function: test examples go through in batches,
each example with its owner's norm rows gathered and the model vmapped over the examples, so
every example is evaluated once, by its own client's model, with no per-client padding;
domain sums come from segment sums. Over runs it maps like the training step (over_runs).
"""
import re
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_drift import engine, registry
from fedjax_drift.algorithms import fedbn
from fedjax_drift.data import partitions
from fedjax_drift.data import pipeline as input_pipeline
from fedjax_drift.errors import UserError

PROTOCOLS = ('auto', 'global', 'fedbn', 'local')
# Which model a protocol's numbers are for: summary.json's and table.csv's scored_model, and
# the run's `evaluation:` line (scored_words).
SCORED = {'global': 'global', 'fedbn': 'client_bn', 'local': 'personal'}
SCORED_WORDS = {'global': 'the global model on the whole test set',
                'client_bn': 'each client\'s own model (the global weights with its own '
                             'BatchNorm layers) on its own test split',
                'personal': 'each client\'s own personal model on its own test split'}


def scored_model(protocol) -> str:
  """'global', 'client_bn' or 'personal': the model a resolved protocol's numbers are for."""
  return SCORED[protocol]

# metrics.csv columns from clients' own test splits (CLIENT_COLUMNS[:3] with any protocol when
# clients have test splits; the others with --eval_protocol=local, the last but for local_only,
# which trains no global model: the global model's mean over clients of its accuracy on each
# client's own split, beside the personal models' client_mean_accuracy).
CLIENT_COLUMNS = ('client_mean_accuracy', 'client_std_accuracy', 'client_worst_accuracy',
                  'global_test_mean_accuracy', 'global_client_mean_accuracy')


def keeps_norms_local(recipe) -> bool:
  """Whether an algorithm of `recipe` (algorithms.recipe's) keeps BatchNorm layers per client
  (a part whose PartNeeds say local_norms: FedBN's, alone or composed)."""
  infos = [registry.get('part', p).info for p in recipe.parts]
  return any(info is not None and info.local_norms for info in infos)


def resolve(eval_protocol, algo, recipe, partition, test_partition) -> str:
  """'global', 'fedbn' or 'local' for --eval_protocol of --algo (whose recipe, after the
  composition flags, is `recipe`) on --partition and --test_partition; refuses a protocol
  that cannot hold."""
  local = keeps_norms_local(recipe)
  has_splits = partitions.splits_test(partition) or test_partition == 'like_train'
  only_local = not recipe.federated  # no global model is trained (local_only)
  personal = recipe.personal
  if only_local and eval_protocol not in ('auto', 'local'):
    raise UserError(f'--eval_protocol={eval_protocol}: --algo={algo} trains no '
                    'global model; its protocol is local (each client\'s own model)')
  if eval_protocol == 'local' and not personal:
    raise UserError('--eval_protocol=local tests the clients\' own models of a personalised '
                    f'algorithm ({", ".join(personal_algorithms())}); --algo={algo} has '
                    'none (use global or auto)')
  if eval_protocol == 'local' and not has_splits:
    raise UserError('--eval_protocol=local tests each client on its own test split: use '
                    '--partition=domains or --test_partition=like_train')
  if only_local:
    return 'local'
  if eval_protocol == 'auto' and personal and not has_splits:
    # the global model of a personalised method is not what its clients use (FedRep's keeps
    # an untrained head, Ditto's and APFL's are FedAvg's): refused rather than scored quietly
    raise UserError(f'--algo={algo} keeps a model per client, and without per-client test '
                    'splits only its global model could be scored (not what its clients '
                    'use); pass --test_partition=like_train (or --partition=domains) to score '
                    'each client\'s own model on its own test split, or --eval_protocol=global '
                    'to score the global model')
  if eval_protocol == 'auto':
    if personal and has_splits:
      return 'local'
    return 'fedbn' if local and has_splits else 'global'
  if eval_protocol == 'fedbn':
    if not local:
      raise UserError(f'--eval_protocol=fedbn evaluates each client\'s own BatchNorm layers, '
                      f'but --algo={algo} keeps none local (use --algo=fedbn or '
                      '--local_terms=fedbn)')
    if not has_splits:
      raise UserError('--eval_protocol=fedbn tests each client on its own test split: use '
                      '--partition=domains or --test_partition=like_train')
  return eval_protocol


def personal_algorithms() -> list:
  """The --algo names whose clients keep their own models (Recipe.personal)."""
  return [n for n, e in registry.entries('algorithm').items() if e.info.personal]


def personal_models(algo, params, clients):
  """Every client's own model [N, ...] (algo.personal of the global `params` and each row of
  the per-client state `clients`), client after client."""
  return jax.lax.map(lambda row: algo.personal(params, row), clients)


def domain_columns(dataset) -> list:
  """metrics.csv column names, one per test domain ([] without domain ids): acc_domain_<name>,
  the name from dataset.domain_names (or the id), reduced to letters, digits and '_'."""
  if dataset.domains_test is None:
    return []
  count = int(max(dataset.domains_test.max(), dataset.domains_train.max())) + 1
  names = list(dataset.domain_names) or [str(d) for d in range(count)]
  return ['acc_domain_' + re.sub(r'[^0-9A-Za-z_]+', '_', n) for n in names[:count]]


def test_owner(test_parts, num_test) -> np.ndarray:
  """int32 [M]: the client each test example belongs to, -1 for none."""
  owner = np.full(num_test, -1, np.int32)
  for c, part in enumerate(test_parts):
    owner[np.asarray(part, np.int64)] = c
  return owner


def check_validation(protocol, val_source, val_fraction):
  """Refuses a validation split (--val_source, --val_fraction) that the resolved protocol
  (`resolve`) cannot score (one line naming the flag)."""
  server = val_source == 'dataset' or (val_fraction and val_source == 'server')
  if server and protocol in ('fedbn', 'local'):
    raise UserError(f'--val_source={val_source}: --eval_protocol={protocol} tests each '
                    'client\'s own model on its own data, and a server split has no client; '
                    'use --val_source=clients')


class Evaluator(NamedTuple):
  """evaluate(state, inputs) -> {'loss': [R], 'accuracy': [R], 'domain_accuracy': [R, D]
  (only with domains), 'val_loss', 'val_accuracy': [R] (only with a validation split)};
  `inputs` is what it reads besides the state (test and validation arrays)."""
  protocol: str
  columns: list   # acc_domain_* names, in the order of domain_accuracy's last axis
  evaluate: Any
  inputs: dict


def make(study, protocol) -> Evaluator:
  """The jitted evaluation of every run of a study (study.Study) under `protocol` (resolve's),
  on the test set and (config.has_validation) on each run's validation split. Inputs are
  normalised as training batches are (the pipeline's norm), never augmented."""
  test = _with_client_columns(study, _make_test(study, protocol))
  if study.experiments[0].validation is None:
    return test
  validate, val_inputs = (_make_local_validation(study) if test.protocol == 'local'
                         else _make_validation(study, test.protocol))

  def both(state, inputs):
    return {**test.evaluate(state, inputs['test']), **validate(state, inputs['val'])}

  return test._replace(evaluate=jax.jit(both),
                       inputs={'test': test.inputs, 'val': val_inputs})


def _make_validation(study, protocol):
  """(state, inputs) -> {'val_loss', 'val_accuracy'} for every run, and its inputs: each
  run's validation indices into the examples already on the device (study.data.x and .y),
  gathered batch by batch, padded to the longest split with owner -1 (left out)."""
  cfg, exp = study.config, study.experiments[0]
  ds, norm = exp.dataset, exp.pipeline.norm if exp.pipeline is not None else None
  runs = jax.tree.leaves(study.state.params)[0].shape[0]
  splits = [e.validation for e in study.experiments]
  splits += [splits[-1]] * (runs - len(splits))
  width = max(len(v.index) for v in splits)
  pad = lambda a, fill: np.pad(a, (0, width - len(a)), constant_values=fill)
  index = np.stack([pad(v.index, 0) for v in splits])
  fedbn_owner = protocol == 'fedbn'
  owner = np.stack([pad(v.owner if fedbn_owner else np.zeros(len(v.index), np.int32), -1)
                    for v in splits])
  domains = ds.domains_train is not None and fedbn_owner  # FedBN's mean over domains
  domain = (np.stack([pad(ds.domains_train[v.index], 0) for v in splits]) if domains
            else np.zeros_like(index))
  num_domains = int(ds.domains_train.max()) + 1 if domains else 1
  sums = _domain_sums(exp.model.apply, cfg.eval_batch_size, num_domains, norm, fedbn_owner)

  def all_runs(state, inputs):
    rows = state.clients['fedbn']['norms'] if fedbn_owner else state.params
    loss, correct, count = engine.over_runs(
        lambda p, r, s, i, y, d, o: sums(p, r, i, exp.scenario.relabel(s, y), d, o,
                                         source=inputs['source']),
        (state.params, rows, state.scenario, inputs['index'], inputs['y'], inputs['domain'],
         inputs['owner']), study.width)
    out = _summarise(loss, correct, count, protocol, False)
    return {'val_loss': out['loss'], 'val_accuracy': out['accuracy']}

  inputs = {'source': study.data.x, 'index': jnp.asarray(index, jnp.int32),
            'y': jnp.asarray(np.asarray(study.data.y)[index], jnp.int32),
            'domain': jnp.asarray(domain, jnp.int32), 'owner': jnp.asarray(owner, jnp.int32)}
  return jax.jit(all_runs), inputs


def _make_local_validation(study):
  """_make_validation under --eval_protocol=local: client i's own model on the validation
  examples carved from its data; accuracy and loss are the unweighted means over the clients
  that hold some (as the local protocol's test accuracy)."""
  exp = study.experiments[0]
  ds, norm = exp.dataset, exp.pipeline.norm if exp.pipeline is not None else None
  runs = jax.tree.leaves(study.state.params)[0].shape[0]
  splits = [e.validation for e in study.experiments]
  splits += [splits[-1]] * (runs - len(splits))
  clients = len(exp.train_parts)
  per_client = [[v.index[v.owner == c] for c in range(clients)] for v in splits]
  width = max(1, max(len(p) for run in per_client for p in run))
  index = np.stack([[np.pad(p, (0, width - len(p))) for p in run] for run in per_client])
  count = np.array([[len(p) for p in run] for run in per_client], np.int32)
  y_train = np.asarray(study.data.y)  # labels of the rows on the device

  def one_client(args, source):
    params, rows, y, n = args
    logits = exp.model.apply(params, input_pipeline.preprocess(source[rows], norm))
    mask = (jnp.arange(rows.shape[0]) < n).astype(jnp.float32)
    losses = -jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], 1)[:, 0]
    correct = (jnp.argmax(logits, -1) == y).astype(jnp.float32)
    n = jnp.maximum(n, 1)
    return (losses * mask).sum() / n, (correct * mask).sum() / n

  def all_runs(state, inputs):
    loss, acc = engine.over_runs(
        lambda m, s, i, y, c: jax.lax.map(
            lambda a: one_client(a, inputs['source']),
            (m, i, exp.scenario.relabel(s, y), c)),
        (_own_models(exp.algo, state), state.scenario, inputs['index'], inputs['y'],
         inputs['count']), study.width)
    present = (inputs['count'] > 0).astype(jnp.float32)
    n = jnp.maximum(present.sum(-1), 1)
    return {'val_loss': (loss * present).sum(-1) / n,
            'val_accuracy': (acc * present).sum(-1) / n}

  inputs = {'source': study.data.x, 'index': jnp.asarray(index, jnp.int32),
            'y': jnp.asarray(y_train[index], jnp.int32), 'count': jnp.asarray(count)}
  return jax.jit(all_runs), inputs


def _make_test(study, protocol) -> Evaluator:
  """make's test-set half."""
  cfg, exp = study.config, study.experiments[0]
  norm = exp.pipeline.norm if exp.pipeline is not None else None
  ds = exp.dataset
  if protocol == 'local':
    return _make_local(study)
  columns = domain_columns(ds)
  x, y = jnp.asarray(ds.x_test), jnp.asarray(ds.y_test)
  if protocol == 'global' and not columns:  # the pooled accuracy alone: the engine's evaluator
    evaluate = engine.make_evaluator(exp.model.apply, cfg.eval_batch_size, norm)

    def pooled(state, inputs):
      loss, acc = engine.over_runs(
          lambda p, s: evaluate(p, inputs['x'], exp.scenario.relabel(s, inputs['y'])),
          (state.params, state.scenario), study.width)
      return {'loss': loss, 'accuracy': acc}

    return Evaluator(protocol, [], jax.jit(pooled), {'x': x, 'y': y})
  runs = jax.tree.leaves(study.state.params)[0].shape[0]  # padded to a multiple of width
  if protocol == 'fedbn':
    owners = [test_owner(e.test_parts, len(ds.y_test)) for e in study.experiments]
    owner = np.stack(owners + [owners[-1]] * (runs - len(owners)))
  else:
    owner = np.zeros((runs, len(ds.y_test)), np.int32)  # the global model "owns" every example
  domain = ds.domains_test if columns else np.zeros(len(ds.y_test), np.int32)
  sums = _domain_sums(exp.model.apply, cfg.eval_batch_size, max(len(columns), 1), norm,
                      protocol == 'fedbn')

  def all_runs(state, inputs):
    rows = state.clients['fedbn']['norms'] if protocol == 'fedbn' else state.params
    loss, correct, count = engine.over_runs(
        lambda p, r, s, o: sums(p, r, inputs['x'], exp.scenario.relabel(s, inputs['y']),
                                inputs['domain'], o),
        (state.params, rows, state.scenario, inputs['owner']), study.width)
    return _summarise(loss, correct, count, protocol, bool(columns))

  inputs = {'x': x, 'y': y, 'domain': jnp.asarray(domain, jnp.int32),
            'owner': jnp.asarray(owner, jnp.int32)}
  return Evaluator(protocol, columns, jax.jit(all_runs), inputs)


def _summarise(loss, correct, count, protocol, has_domains):
  """Per-run sums [R, D] -> the reported metrics (see the module docstring)."""
  per_loss = loss / jnp.maximum(count, 1)
  per_acc = correct / jnp.maximum(count, 1)
  if protocol == 'fedbn':  # the mean over the domains that have test examples (FedBN's "avg")
    present = (count > 0).astype(jnp.float32)
    n = jnp.maximum(present.sum(-1), 1)
    out = {'loss': (per_loss * present).sum(-1) / n, 'accuracy': (per_acc * present).sum(-1) / n}
  else:  # pooled over the whole test set, as without domains
    total = jnp.maximum(count.sum(-1), 1)
    out = {'loss': loss.sum(-1) / total, 'accuracy': correct.sum(-1) / total}
  if has_domains:
    out['domain_accuracy'] = jnp.where(count > 0, per_acc, jnp.nan)
  return out


def _domain_sums(apply_fn, batch_size, num_domains, norm, per_client):
  """(params, rows, x, y, domain, owner) -> (loss, correct, count), each [num_domains]: sums
  over the test examples with owner >= 0. per_client: example j is classified by the model
  with the norm rows of client owner[j] (rows: the per-client norm leaves [N, ...]);
  otherwise by params itself (rows unused)."""

  def logits_of(params, rows, xb, ob):
    if not per_client:
      return apply_fn(params, xb)
    mine = jax.tree.map(lambda a: a[jnp.maximum(ob, 0)], rows)  # [B, ...] each

    def one(norms, xi):
      return apply_fn(fedbn.with_norm_leaves(params, norms), xi[None])[0]

    return jax.vmap(one)(mine, xb)

  def sums(params, rows, x, y, domain, owner, source=None):
    # source: x holds indices into it (a validation split of the training examples), each
    # batch gathered as it is used.
    n = x.shape[0]
    b = min(batch_size, n)
    padded = -(-n // b) * b
    pad = lambda a: jnp.pad(a, [(0, padded - n)] + [(0, 0)] * (a.ndim - 1)).reshape(
        (-1, b) + a.shape[1:])
    valid = pad(owner >= 0)  # padding (False) and examples no client holds are left out

    def one(args):
      xb, yb, db, ob, vb = args
      xb = xb if source is None else source[xb]
      logits = logits_of(params, rows, input_pipeline.preprocess(xb, norm), ob)
      losses = -jnp.take_along_axis(jax.nn.log_softmax(logits), yb[:, None], 1)[:, 0]
      correct = (jnp.argmax(logits, -1) == yb)
      m = vb.astype(jnp.float32)
      seg = lambda v: jax.ops.segment_sum(v * m, db, num_domains)
      return seg(losses), seg(correct.astype(jnp.float32)), seg(jnp.ones_like(m))

    loss, correct, count = jax.lax.map(one, (pad(x), pad(y), pad(domain), pad(owner), valid))
    return loss.sum(0), correct.sum(0), count.sum(0)

  return sums


# ----------------------------------------------------- clients' own test splits (CLIENT_COLUMNS)


def client_summary(accuracy, count):
  """Per-client accuracies [..., N] and test counts [..., N] -> {client_mean_accuracy,
  client_std_accuracy, client_worst_accuracy} [...]: the unweighted mean over the clients
  that hold test examples, the population std (ddof 0, as personalize.summarize) and the
  lowest."""
  present = (count > 0).astype(jnp.float32)
  n = jnp.maximum(present.sum(-1), 1)
  mean = (accuracy * present).sum(-1) / n
  std = jnp.sqrt((((accuracy - mean[..., None]) * present) ** 2).sum(-1) / n)
  worst = jnp.min(jnp.where(count > 0, accuracy, jnp.inf), -1)
  return {'client_mean_accuracy': mean, 'client_std_accuracy': std,
          'client_worst_accuracy': worst}


def _padded_owners(study):
  """int32 [R_pad, M]: each run's test_owner, padded like the state's run axis."""
  ds = study.experiments[0].dataset
  runs = jax.tree.leaves(study.state.params)[0].shape[0]
  owners = [test_owner(e.test_parts, len(ds.y_test)) for e in study.experiments]
  return np.stack(owners + [owners[-1]] * (runs - len(owners)))


def _with_client_columns(study, test):
  """test with CLIENT_COLUMNS[:3] added when clients have test splits (--test_partition=
  like_train, --partition=domains): the model the protocol tests for each client (global:
  the global model; fedbn: with that client's norm layers) on that client's split, in one
  more pass over the test set inside the same compiled evaluation. The local protocol
  computes its own."""
  exp = study.experiments[0]
  if exp.test_parts is None or test.protocol == 'local':
    return test
  cfg, ds = study.config, exp.dataset
  norm = exp.pipeline.norm if exp.pipeline is not None else None
  num_clients = len(exp.train_parts)
  per_client = test.protocol == 'fedbn'
  sums = _domain_sums(exp.model.apply, cfg.eval_batch_size, num_clients, norm, per_client)

  def by_client(state, inputs):
    rows = state.clients['fedbn']['norms'] if per_client else state.params
    _, correct, count = engine.over_runs(  # "domains" = clients: sums per owner
        lambda p, r, s, o: sums(p, r, inputs['x'], exp.scenario.relabel(s, inputs['y']),
                                jnp.maximum(o, 0), o),
        (state.params, rows, state.scenario, inputs['owner']), study.width)
    return client_summary(correct / jnp.maximum(count, 1), count)

  def both(state, inputs):
    return {**test.evaluate(state, inputs['test']), **by_client(state, inputs['clients'])}

  inputs = {'x': jnp.asarray(ds.x_test), 'y': jnp.asarray(ds.y_test),
            'owner': jnp.asarray(_padded_owners(study), jnp.int32)}
  return test._replace(evaluate=jax.jit(both), inputs={'test': test.inputs, 'clients': inputs})


def _own_models(algo, state):
  """Every run's clients' own models [R, N, ...] (algo.personal), from a state stacked on the
  run axis."""
  return jax.vmap(lambda p, c: personal_models(algo, p, c))(state.params, state.clients)


def _make_local(study) -> Evaluator:
  """--eval_protocol=local (a personalised algorithm: local_only, Ditto, ...): client i's own
  model (algo.personal: local_only's theta_i, Ditto's v_i) on its own test split; the run's accuracy and loss
  are the unweighted means over the clients that hold test examples, with CLIENT_COLUMNS[:3]
  from the same numbers, global_test_mean_accuracy the mean over clients of each model's
  accuracy on the whole test set, and (but for local_only) global_client_mean_accuracy the
  global model's on the same splits, the usual global-vs-personalised pair. Clients go one after another (lax.map), each split in
  batches of --eval_batch_size (padded to the largest split, masked). No per-domain columns."""
  cfg, exp = study.config, study.experiments[0]
  ds = exp.dataset
  norm = exp.pipeline.norm if exp.pipeline is not None else None
  runs = jax.tree.leaves(study.state.params)[0].shape[0]
  parts = [e.test_parts for e in study.experiments]
  parts += [parts[-1]] * (runs - len(parts))
  width = max(1, max(len(p) for run in parts for p in run))
  batch = min(cfg.eval_batch_size, width)  # each split goes through in batches of this size
  width = -(-width // batch) * batch
  index = np.stack([[np.pad(np.asarray(p, np.int64), (0, width - len(p))) for p in run]
                    for run in parts]).astype(np.int32)
  count = np.array([[len(p) for p in run] for run in parts], np.int32)
  whole_set = engine.make_evaluator(exp.model.apply, cfg.eval_batch_size, norm)

  def own_split(params, x, y, rows, n):
    """(mean loss, accuracy) of params on the examples rows[:n], `batch` rows at a time."""

    def one(args):
      rb, position = args
      logits = exp.model.apply(params, input_pipeline.preprocess(x[rb], norm))
      mask = (position < n).astype(jnp.float32)
      losses = -jnp.take_along_axis(jax.nn.log_softmax(logits), y[rb][:, None], 1)[:, 0]
      correct = (jnp.argmax(logits, -1) == y[rb]).astype(jnp.float32)
      return (losses * mask).sum(), (correct * mask).sum()

    loss, correct = jax.lax.map(one, (rows.reshape(-1, batch),
                                      jnp.arange(rows.shape[0]).reshape(-1, batch)))
    return loss.sum() / jnp.maximum(n, 1), correct.sum() / jnp.maximum(n, 1)

  # A recipe without a server (local_only) never trains its global params.
  has_global = registry.get('algorithm', cfg.algo).info.federated

  def one_run(models, global_params, concept, index, count, x, y):
    y = exp.scenario.relabel(concept, y)

    def one_client(args):
      params, rows, n = args
      loss, acc = own_split(params, x, y, rows, n)
      on_split = own_split(global_params, x, y, rows, n)[1] if has_global else acc
      return loss, acc, whole_set(params, x, y)[1], on_split

    return jax.lax.map(one_client, (models, index, count))

  def all_runs(state, inputs):
    loss, acc, whole, by_global = engine.over_runs(
        lambda m, g, s, i, c: one_run(m, g, s, i, c, inputs['x'], inputs['y']),
        (_own_models(exp.algo, state), state.params, state.scenario, inputs['index'],
         inputs['count']), study.width)
    stats = client_summary(acc, inputs['count'])
    present = (inputs['count'] > 0).astype(jnp.float32)
    n = jnp.maximum(present.sum(-1), 1)
    out = {'loss': (loss * present).sum(-1) / n, 'accuracy': stats['client_mean_accuracy'],
           **stats, 'global_test_mean_accuracy': whole.mean(-1)}
    if has_global:
      out['global_client_mean_accuracy'] = client_summary(
          by_global, inputs['count'])['client_mean_accuracy']
    return out

  inputs = {'x': jnp.asarray(ds.x_test), 'y': jnp.asarray(ds.y_test),
            'index': jnp.asarray(index), 'count': jnp.asarray(count)}
  return Evaluator('local', [], jax.jit(all_runs), inputs)

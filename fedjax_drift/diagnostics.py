"""Optional measurements behind the papers' figures (issue 21), each off by default.

Files in the run directory (one layout for one run and for a sweep: a `run` column, or a
leading run axis in runs.csv order, length 1 for a single run):

  client_acc.csv  --diag_client_acc: run, round, client, accuracy. At every evaluation round
                  (multiples of --eval_every and the last round), the model of each cohort
                  client after its local training and before aggregation (theta_t - delta_i,
                  FedBN's local norm layers included) on the global test set (FedGKD Fig. 2).
                  Computed inside the compiled round, only in evaluation rounds (lax.cond).
                  `client` is the client id (a cohort position with --scenario=
                  longtail_stateless, whose clients are new every round).
  features.npz    --diag_features_rounds=1,50,100: rounds [F], features [runs, F, n, d], the
                  global model's penultimate layer (models.Model.penultimate, evaluation mode)
                  on the first n = --diag_features_n test examples, and labels [n] (their
                  dataset labels), for t-SNE (FedGKD Fig. 2). Round 0 is the initial model.
  attention.npz   --diag_attention (an IGFL attention aggregator): rounds [T], cohort [runs,
                  T, K] (client ids in cohort order), attention [runs, T, K, K] (row i: the
                  softmax of query i over the cohort's updates; algorithms/igfl.py
                  attention_matrix), mean_attention [runs, N, N] (by client id, the mean over
                  the rounds where both clients were in the cohort, NaN where never: IGFL Fig.
                  2 averages 1,000 rounds' scores) and mean_match_rate [runs] (the pair match
                  rate of mean_attention).
  attention.csv   --diag_attention: run, round, match_rate, clients_with_partner. The pair
                  match rate of IGFL Fig. 2 (§5.4: "the matching rate between client pairs with
                  the same label and darker coordinate pairs on the heat map"): among the
                  cohort clients with a partner in the cohort (a client holding the same set of
                  labels, from the partition's label histograms; IGFL's paired population gives
                  each client one), the share whose highest attention outside their own entry
                  goes to a partner. The diagonal is left out: a client's update is always
                  nearly most similar to itself, so with it every row would "match" itself.
                  Empty where no cohort client has a partner.
  metrics.csv     --personalize_every_eval (with --personalize=calibrate): a column
                  personalized_accuracy at every evaluation, the mean over clients with test
                  examples of each client's calibrated model's accuracy on its own test split
                  (FedADC §IV-D, Fig. 7; after the last round, personalization.csv's
                  calibrated mean). The global model's per-client mean beside it is
                  metrics.csv's client_mean_accuracy.

Cost when off: none. With every flag at its default, study.build adds no step input and
engine.make_round gets client_probe=None and keep_aux=False, so the traced round is the one
built before diagnostics existed (tests/test_diagnostics.py checks that the lowered program is
identical); the host loop only checks a few Python conditions per call.

Resume: the rows (client_acc.csv, attention.csv) travel in the checkpoint's history; the arrays
(features, attention matrices) are read back from the run's own npz files, for the rounds up to
the checkpoint. Either way a resumed run writes the files an uninterrupted run writes.
"""
import io
import os

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_drift import engine, personalize, report
from fedjax_drift.data import pipeline as input_pipeline
from fedjax_drift.data import scenarios
from fedjax_drift.errors import UserError

FILES = ('client_acc.csv', 'features.npz', 'attention.npz', 'attention.csv')
EVAL_COLUMNS = ('personalized_accuracy',)  # metrics.csv columns


def enabled(client_acc, features_rounds, attention, personalize_every_eval) -> bool:
  """Whether any diagnostic is on (the host loop keeps a Recorder only then): the values of
  --diag_client_acc, --diag_features_rounds, --diag_attention and --personalize_every_eval."""
  return bool(client_acc or features_rounds.strip() or attention or personalize_every_eval)


def feature_rounds(text) -> tuple:
  """--diag_features_rounds (text) as sorted distinct ints (() when empty); UserError when
  bad."""
  text = text.strip()
  if not text:
    return ()
  try:
    rounds = sorted({int(t) for t in text.split(',') if t.strip()})
  except ValueError:
    raise UserError(f'--diag_features_rounds={text} must be a comma list of rounds, e.g. '
                    '1,50,100') from None
  if rounds and rounds[0] < 0:
    raise UserError(f'--diag_features_rounds: round {rounds[0]} must be >= 0')
  return tuple(rounds)  # rounds after --rounds are reached if a --resume goes on that far


def late_rounds_warning(features_rounds, rounds) -> str:
  """A one-line warning naming the --diag_features_rounds (text) after --rounds ('' when
  none): they are kept (a --resume to more rounds writes them), but this run does not reach
  them."""
  late = [r for r in feature_rounds(features_rounds) if r > rounds]
  if not late:
    return ''
  return (f'warning: --diag_features_rounds: round{"s" * (len(late) > 1)} '
          f'{", ".join(map(str, late))} after --rounds={rounds} not written by this run '
          '(only if a --resume goes on that far)')


def check(features_rounds, features_n, personalize_every_eval, personalize):
  """Refuses a diagnostic the run cannot give, in one line naming the flag: the values of
  --diag_features_rounds, --diag_features_n, --personalize_every_eval and --personalize."""
  feature_rounds(features_rounds)
  if features_n < 1:
    raise UserError(f'--diag_features_n={features_n} must be >= 1')
  if personalize_every_eval and personalize != 'calibrate':
    raise UserError('--personalize_every_eval calibrates at every evaluation: add '
                    '--personalize=calibrate (and --test_partition=like_train)')


def check_attention(aggregator, scenario):
  """Refuses --diag_attention (one line) unless the run's aggregator (its recipe's, after
  --aggregator) has a K x K attention matrix and --scenario keeps its clients."""
  if not aggregator.startswith('attention_') or aggregator == 'attention_global':
    raise UserError(f'--diag_attention records a K x K attention matrix: use --algo=igfl or '
                    f'igfl_s, or --aggregator=attention_self/time/time_rows (now '
                    f'{aggregator}, which has '
                    + ('one query)' if aggregator == 'attention_global' else 'none)'))
  if scenarios.fresh_clients(scenario):
    raise UserError('--diag_attention matches clients by their labels, but '
                    f'--scenario={scenario} draws new clients every round')


def step_inputs(exp):
  """What the compiled step reads for the diagnostics that run inside it (the global test
  set for --diag_client_acc), or None when none does: then the step is built as without."""
  if not exp.config.diag_client_acc:
    return None
  return {'x': jnp.asarray(exp.dataset.x_test), 'y': jnp.asarray(exp.dataset.y_test)}


def is_eval_round(r, eval_every, rounds):
  """Whether round r (1-based, after r rounds) is evaluated: the host's rule in simulation."""
  return (r % eval_every == 0) | (r == rounds)


def client_probe(exp, rounds_done, test):
  """engine.make_round's client_probe for --diag_client_acc: (local params, concept) ->
  accuracy on the global test set (labels under the run's current concept), computed only in
  evaluation rounds; NaN in the others. rounds_done: the rounds completed before this one, the
  same for every run of a study and unbatched, so the lax.cond stays a branch under vmap."""
  cfg = exp.config
  norm = exp.pipeline.norm if exp.pipeline is not None else None
  evaluate = engine.make_evaluator(exp.model.apply, cfg.eval_batch_size, norm)
  now = is_eval_round(rounds_done + 1, cfg.eval_every, cfg.rounds)

  def probe(params, concept):
    def accuracy(args):
      p, c = args
      return evaluate(p, test['x'], exp.scenario.relabel(c, test['y']))[1]
    return jax.lax.cond(now, accuracy, lambda _: jnp.float32(jnp.nan), (params, concept))

  return probe


def label_partners(label_hist) -> np.ndarray:
  """[N, N] bool: clients i != j holding the same (non-empty) set of labels."""
  has = np.asarray(label_hist) > 0
  same = (has[:, None, :] == has[None, :, :]).all(-1) & has.any(-1)[:, None]
  np.fill_diagonal(same, False)
  return same


def pair_match_rate(attention, partners):
  """(rate or None, clients with a partner) of one K x K attention matrix whose rows and
  columns are the clients that `partners` [K, K] (label_partners restricted to them) relates.
  A row's highest entry outside the diagonal counts; NaN entries (never seen) never win."""
  a = np.where(np.isnan(attention), -np.inf, np.asarray(attention, np.float64))
  np.fill_diagonal(a, -np.inf)
  rows = np.flatnonzero(partners.any(1))
  if not len(rows):
    return None, 0
  best = np.argmax(a[rows], axis=1)
  return float(np.mean(partners[rows, best])), int(len(rows))


def mean_attention(cohorts, matrices, num_clients):
  """[N, N] mean over rounds of attention[i, j] by client id, NaN for pairs never together.
  cohorts [T, K] ids, matrices [T, K, K]; rounds with NaN matrices (a diverged run) skipped."""
  total = np.zeros((num_clients, num_clients))
  count = np.zeros((num_clients, num_clients))
  for ids, a in zip(cohorts, matrices):
    if np.isnan(a).all():
      continue
    np.add.at(total, (ids[:, None], ids[None, :]), a)
    np.add.at(count, (ids[:, None], ids[None, :]), 1)
  with np.errstate(invalid='ignore'):
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _npz_bytes(**arrays):
  buf = io.BytesIO()
  np.savez(buf, **arrays)
  return buf.getvalue()


class Recorder:
  """The host's side of the diagnostics: what is collected after each call of the compiled
  segment and at each evaluation, kept across a resume, and written as the files above.

  study: study.Study; history: the restored checkpoint's history ({} for a new run);
  restored_round: the checkpoint's round, or None for a new run.
  """

  def __init__(self, study, history, run_dir, restored_round, log=print):
    cfg = study.config
    self.cfg, self.study, self.run_dir = cfg, study, run_dir
    self.num_runs = len(study.runs)
    self.client_rows = list(history.get('client_acc_rows', []))
    self.attention_rows = list(history.get('attention_rows', []))
    self.features_at = feature_rounds(cfg.diag_features_rounds)
    self.features = {}   # round -> [runs, n, d]
    self.matrices = {}   # round -> (cohort [runs, K], attention [runs, K, K])
    self.dirty = set()
    if restored_round is not None:
      self._read_back(restored_round, log)
    exps = study.experiments[:self.num_runs]
    if cfg.diag_attention:
      self.partners = [label_partners(e.data.label_hist) for e in exps]
    if self.features_at:
      exp = exps[0]
      n = min(cfg.diag_features_n, len(exp.dataset.y_test))
      norm = exp.pipeline.norm if exp.pipeline is not None else None
      self.labels = np.asarray(exp.dataset.y_test[:n])
      x = jnp.asarray(exp.dataset.x_test[:n])
      self._features = jax.jit(lambda params: engine.over_runs(
          lambda p: exp.model.penultimate(p, input_pipeline.preprocess(x, norm)), (params,),
          study.width))
    if cfg.personalize_every_eval:
      self.calibrators = [personalize.for_experiment(e) for e in exps]

  def _read_back(self, restored_round, log):
    """The arrays of rounds <= the checkpoint's from this run's own npz files."""
    expected = {'features.npz': any(r <= restored_round for r in self.features_at),
                'attention.npz': self.cfg.diag_attention and restored_round > 0}
    for name, wanted in expected.items():
      path = os.path.join(self.run_dir, name)
      if not wanted:
        continue
      if not os.path.exists(path):  # removed by hand since: what is lost stays lost
        log(f'warning: {path} is missing; it will hold only the rounds after '
            f'{restored_round}')
        continue
      with np.load(path) as f:
        for i, r in enumerate(f['rounds'].tolist()):
          if r > restored_round:
            continue
          if name == 'features.npz':
            self.features[r] = f['features'][:, i]
          else:
            self.matrices[r] = (f['cohort'][:, i], f['attention'][:, i])
      self.dirty.add(name)

  def next_stop(self, done):
    """The next round after `done` at which the host must wake (a features round), or None."""
    later = [r for r in self.features_at if r > done]
    return later[0] if later else None

  def after_call(self, done, n, diag, diverged_at, skip, evaluated):
    """Collects rounds done+1..done+n of the segment's metrics['diag'] (numpy, [n, R_pad,
    ...]). diverged_at: [R_pad] rounds; skip: runs already diverged before this call;
    evaluated: whether round done+n is an evaluation round."""
    runs = range(self.num_runs)
    live = lambda r, rnd: r not in skip and (not diverged_at[r] or rnd <= diverged_at[r])
    if self.cfg.diag_attention:
      ids, att = diag['ids'], diag['server']['attention']
      for i in range(n):
        rnd = done + i + 1
        mats = np.array(att[i, :self.num_runs], np.float32)
        for r in runs:
          if not live(r, rnd):
            mats[r] = np.nan
            continue
          cohort = ids[i, r]
          rate, with_partner = pair_match_rate(mats[r], self.partners[r][np.ix_(cohort, cohort)])
          self.attention_rows.append({'run': r, 'round': rnd, 'match_rate': rate,
                                      'clients_with_partner': with_partner})
        self.matrices[rnd] = (np.array(ids[i, :self.num_runs], np.int32), mats)
      self.dirty.add('attention.npz')
    if self.cfg.diag_client_acc and evaluated:
      rnd = done + n
      for r in runs:
        if live(r, rnd):
          self.client_rows += [{'run': r, 'round': rnd, 'client': int(c), 'accuracy': float(a)}
                               for c, a in zip(diag['ids'][n - 1, r], diag['client'][n - 1, r])]

  def at_stop(self, done, params):
    """The features of the global models, when `done` is a features round."""
    if done in self.features_at and done not in self.features:
      self.features[done] = np.asarray(self._features(params))[:self.num_runs]
      self.dirty.add('features.npz')

  def eval_columns(self, params, skip):
    """--personalize_every_eval's metrics.csv columns, {name: [runs]} ({} when off)."""
    if not self.cfg.personalize_every_eval:
      return {}
    accuracy = []
    for r, (calibrate, num_test) in enumerate(self.calibrators):
      if r in skip:  # diverged: no row is written for it
        accuracy.append(np.nan)
        continue
      before, after = calibrate(jax.tree.map(lambda a, r=r: a[r], params))
      result = personalize.summarize(np.asarray(before), np.asarray(after), num_test)
      accuracy.append(result['calibrated_mean_accuracy'])
    return {'personalized_accuracy': np.array(accuracy)}

  def history(self):
    """What the checkpoint keeps (JSON): the rows of the CSV files."""
    out = {}
    if self.cfg.diag_client_acc:
      out['client_acc_rows'] = self.client_rows
    if self.cfg.diag_attention:
      out['attention_rows'] = self.attention_rows
    return out

  def write(self):
    """Writes the files of the diagnostics that are on (the npz files when they changed)."""
    d = self.run_dir
    if self.cfg.diag_client_acc:
      report.write_csv(os.path.join(d, 'client_acc.csv'), self.client_rows)
    if self.cfg.diag_attention:
      report.write_csv(os.path.join(d, 'attention.csv'), self.attention_rows)
    if 'attention.npz' in self.dirty and self.matrices:
      rounds = sorted(self.matrices)
      cohort = np.stack([self.matrices[r][0] for r in rounds], 1)
      attention = np.stack([self.matrices[r][1] for r in rounds], 1)
      n = self.partners[0].shape[0]
      mean = np.stack([mean_attention(cohort[r], attention[r], n)
                       for r in range(self.num_runs)])
      rate = np.array([pair_match_rate(mean[r], self.partners[r])[0]
                       for r in range(self.num_runs)], np.float64)  # None -> NaN
      report.atomic_write(os.path.join(d, 'attention.npz'), _npz_bytes(
          rounds=np.array(rounds, np.int32), cohort=cohort, attention=attention,
          mean_attention=mean.astype(np.float32), mean_match_rate=rate))
    if 'features.npz' in self.dirty and self.features:
      rounds = sorted(self.features)
      report.atomic_write(os.path.join(d, 'features.npz'), _npz_bytes(
          rounds=np.array(rounds, np.int32),
          features=np.stack([self.features[r] for r in rounds], 1), labels=self.labels))
    self.dirty.clear()

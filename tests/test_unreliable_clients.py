"""Dropped clients (--dropout_prob), stragglers (--straggler_frac, --straggler_min_steps) and
FedNova's normalised averaging, against numpy on the tiny problem with unequal clients.

The draws (who reports, how many steps each client runs) come from unreliable.draw with the
round's key, as the engine makes them; numpy then replays the round: local SGD over each
client's own steps, the aggregation over the clients that report, and FedNova's
theta - sum_i p_i (tau_eff / ||a_i||_1) delta_i.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_drift
from fedjax_drift import applies, client_sums, engine, unreliable
from fedjax_drift.algorithms import robust
from fedjax_drift.errors import UserError
from helpers import check_sweep_equals_single_runs_and_resumes, cohort_and_batches, tiny_config
from reference import LogReg, flat

LR = 0.1
MODEL = LogReg(6, 3)


def make(tiny_npz, unequal_partition, algo='fedavg', **overrides):
  base = dict(algo=algo, local_steps=0, local_epochs=1, batch_size=4, lr=LR,
              clients_per_round=3)
  base.update(overrides)
  return fedjax_drift.prepare(tiny_config(tiny_npz, unequal_partition, **base))


def draws(exp, state):
  """The round's (ids, reports, steps) as the engine draws them."""
  cfg = exp.config
  rkey = jax.random.fold_in(state.key, state.round)
  ids, counts, batches = cohort_and_batches(exp, state)
  steps = engine.client_steps(np.asarray(exp.data.client_count), exp.schedule)[ids]
  spec = unreliable.Unreliable(cfg.dropout_prob, cfg.straggler_frac, cfg.straggler_min_steps)
  reports, ran = unreliable.draw(spec, jax.random.fold_in(rkey, 5), jnp.asarray(ids),
                                 jnp.asarray(steps, jnp.int32))
  return ids, counts, batches, np.asarray(reports), np.asarray(ran), steps


def local_sgd(theta, batches, momentum=0.0):
  w, v = theta.copy(), np.zeros_like(theta)
  for x, y, mask in batches:
    g = MODEL.grad(w, x, MODEL.ce_dlogits(w, x, y), mask)
    v = g + momentum * v  # optax.sgd's trace (heavy ball)
    w = w - LR * v
  return w


def a_norm(tau, momentum):
  """||a_i||_1: the sum over local steps k of the coefficient of g_k in delta_i / eta."""
  return sum(sum(momentum ** j for j in range(tau - k)) for k in range(tau))


def reference_round(theta, ids, counts, batches, reports, ran, nova=False, momentum=0.0):
  p = np.array([counts[i] if r else 0.0 for i, r in zip(ids, reports)], np.float64)
  if p.sum() == 0:
    return theta
  p = p / p.sum()
  deltas = [theta - local_sgd(theta, batches[int(i)][:s], momentum) for i, s in zip(ids, ran)]
  if not nova:
    return theta - sum(pi * d for pi, d in zip(p, deltas))
  a = np.array([a_norm(int(s), momentum) for s in ran])
  tau_eff = float(np.sum(p * a))
  return theta - sum(pi * tau_eff / ai * d for pi, ai, d in zip(p, a, deltas) if pi > 0)


def lockstep(exp, rounds=4, nova=False, momentum=0.0):
  """Runs the engine and numpy in lockstep; returns what was drawn over the rounds."""
  state, step = exp.state, jax.jit(exp.round_fn)
  theta, seen = flat(state.params), []
  for r in range(rounds):
    ids, counts, batches, reports, ran, steps = draws(exp, state)
    seen.append((reports, ran, steps))
    theta = reference_round(theta, ids, counts, batches, reports, ran, nova, momentum)
    state, _ = step(state, exp.data)
    np.testing.assert_allclose(flat(state.params), theta, atol=2e-5, rtol=1e-4,
                               err_msg=f'round {r + 1}')
  return state, seen


def test_dropout_aggregates_only_the_clients_that_report(tiny_npz, unequal_partition):
  exp = make(tiny_npz, unequal_partition, dropout_prob=0.4)
  _, seen = lockstep(exp, rounds=5)
  reports = np.concatenate([r for r, _, _ in seen])
  assert 0 < reports.sum() < len(reports)  # some dropped, some reported
  for r, ran, steps in seen:
    assert np.all(ran[~r] == 0) and np.all(ran[r] == steps[r])


def test_stragglers_run_part_of_their_steps(tiny_npz, unequal_partition):
  exp = make(tiny_npz, unequal_partition, straggler_frac=0.7, straggler_min_steps=2)
  _, seen = lockstep(exp, rounds=4)
  ran = np.concatenate([s for _, s, _ in seen])
  steps = np.concatenate([h for _, _, h in seen])
  assert np.all(ran <= steps) and np.all(ran >= np.minimum(2, steps))
  assert np.any(ran < steps)


@pytest.mark.parametrize('momentum', [0.0, 0.5])
def test_fednova_with_stragglers_and_dropout(tiny_npz, unequal_partition, momentum):
  exp = make(tiny_npz, unequal_partition, 'fednova', straggler_frac=0.6, dropout_prob=0.2,
             local_momentum=momentum)
  _, seen = lockstep(exp, rounds=4, nova=True, momentum=momentum)
  assert any(len(set(s[r])) > 1 for r, s, _ in seen)  # unequal local work in some round


def test_fednova_normalised_weights_against_numpy():
  p = jnp.asarray([0.5, 0.3, 0.2, 0.0])
  steps = jnp.asarray([2, 5, 3, 0])
  rho = 0.9
  got = np.asarray(fedjax_drift.algorithms.fednova.normalized_weights(rho)(p, steps))
  a = np.array([a_norm(s, rho) for s in (2, 5, 3)])
  tau_eff = float(np.sum(np.array([0.5, 0.3, 0.2]) * a))
  np.testing.assert_allclose(got[:3], np.array([0.5, 0.3, 0.2]) * tau_eff / a, rtol=1e-5)
  assert got[3] == 0.0


def test_fednova_with_equal_steps_is_fedavg_bit_for_bit(tiny_npz, unequal_partition):
  kw = dict(local_epochs=0, local_steps=3)
  states = []
  for algo in ('fedavg', 'fednova'):
    exp = make(tiny_npz, unequal_partition, algo, **kw)
    state, step = exp.state, jax.jit(exp.round_fn)
    for _ in range(3):
      state = step(state, exp.data)[0]
    states.append(state)
  for a, b in zip(jax.tree.leaves(states[0].params), jax.tree.leaves(states[1].params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_knobs_off_change_nothing_bit_for_bit(tiny_npz, unequal_partition):
  """Static zeros build no Unreliable (the program is the one without the flags), and an
  Unreliable whose probabilities are zero (a gridded zero) changes no weight and no step."""
  assert unreliable.from_values(0.0, 0.0, 3) is None
  assert unreliable.from_values(0.1, 0.0) is not None
  exp = make(tiny_npz, unequal_partition, 'scaffold')
  base = engine.make_round(exp.algo, exp.schedule, exp.max_local_steps, 3, 'uniform')
  zero = engine.make_round(exp.algo, exp.schedule, exp.max_local_steps, 3, 'uniform',
                           unreliable=unreliable.Unreliable(jnp.float32(0), jnp.float32(0)))
  a, b = exp.state, exp.state
  for _ in range(3):
    a, b = jax.jit(base)(a, exp.data)[0], jax.jit(zero)(b, exp.data)[0]
  for x, y in zip(jax.tree.leaves((a.params, a.clients)), jax.tree.leaves((b.params, b.clients))):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_dropped_clients_keep_their_state(tiny_npz, unequal_partition):
  exp = make(tiny_npz, unequal_partition, 'scaffold', dropout_prob=0.5)
  state = exp.state
  for _ in range(4):
    ids, _, _, reports, _, _ = draws(exp, state)
    new = jax.jit(exp.round_fn)(state, exp.data)[0]
    for i, r in zip(ids, reports):
      old_row, new_row = (flat(jax.tree.map(lambda a: a[int(i)], s.clients['scaffold']))
                          for s in (state, new))
      assert np.array_equal(old_row, new_row) != bool(r), (int(i), bool(r))
    state = new


def np_drift(deltas, losses):
  """The drift diagnostics of client_sums.drift_diagnostics over the [m, P] rows given."""
  norms = np.linalg.norm(deltas, axis=1)
  mean = deltas.mean(axis=0)
  cosine = np.mean(deltas @ mean / (norms * np.linalg.norm(mean)))
  return {'client_update_norm_mean': norms.mean(), 'mean_update_norm': np.linalg.norm(mean),
          'update_cosine': cosine, 'client_loss_std': np.std(losses)}


def test_drift_diagnostics_leave_out_dropped_clients():
  """The masked statistics against numpy over the reporting clients only: a dropped client's
  delta (here a leftover residual, not zero) and its loss do not enter them."""
  rng = np.random.default_rng(0)
  deltas = rng.normal(size=(5, 7)).astype(np.float32)
  losses = np.array([0.7, 9.0, 1.3, 0.2, -4.0], np.float32)
  weights = np.array([0.5, 0.0, 0.3, 0.2, 0.0], np.float32)
  reports = np.array([True, False, True, True, False])

  def engine_stats(reports):
    per = [client_sums.client_summands({'w': jnp.asarray(d[:3]), 'b': jnp.asarray(d[3:])},
                                  jnp.float32(w), jnp.asarray(r))
           for d, w, r in zip(deltas, weights, reports)]
    sums = jax.tree.map(lambda *a: sum(a), *[p[0] for p in per])
    norms = jnp.stack([p[1] for p in per])
    return {k: float(v) for k, v in client_sums.drift_diagnostics(
        sums, norms, jnp.asarray(losses), jnp.asarray(weights), jnp.asarray(reports)).items()}

  got = engine_stats(reports)
  want = np_drift(deltas[reports].astype(np.float64), losses[reports].astype(np.float64))
  for k, v in want.items():
    np.testing.assert_allclose(got[k], v, rtol=1e-5, err_msg=k)
  np.testing.assert_allclose(got['train_loss'], float(weights @ np.where(reports, losses, 0)),
                             rtol=1e-6)
  nobody = engine_stats(np.zeros(5, bool))
  assert all(np.isnan(nobody[k]) for k in want) and nobody['train_loss'] == 0.0


def test_median_and_drift_metrics_with_dropout_against_numpy(tiny_npz, unequal_partition):
  """A run with --dropout_prob and --aggregator=median, in lockstep with numpy: the median and
  the drift metrics over the clients that report."""
  exp = make(tiny_npz, unequal_partition, aggregator='median', dropout_prob=0.4,
             clients_per_round=4)
  state, step = exp.state, jax.jit(exp.round_fn)
  theta, dropped = flat(state.params), 0
  for r in range(5):
    ids, _, batches, reports, ran, _ = draws(exp, state)
    deltas = np.stack([theta - local_sgd(theta, batches[int(i)][:s])
                       for i, s, ok in zip(ids, ran, reports) if ok] or [np.zeros_like(theta)])
    dropped += int((~reports).sum())
    state, metrics = step(state, exp.data)
    if reports.any():
      theta = theta - np.median(deltas, axis=0)
      for k, v in np_drift(deltas, np.zeros(len(deltas))).items():
        if k != 'client_loss_std':  # the loss is the engine's own; its masking: test above
          np.testing.assert_allclose(float(metrics[k]), v, rtol=1e-4, atol=1e-6,
                                     err_msg=f'{k}, round {r + 1}')
    np.testing.assert_allclose(flat(state.params), theta, atol=2e-5, rtol=1e-4,
                               err_msg=f'round {r + 1}')
  assert dropped


@pytest.mark.parametrize('aggregator', ['mean', 'median', 'trimmed_mean'])
def test_dropout_zero_changes_nothing_bit_for_bit(tiny_npz, unequal_partition, aggregator):
  """--dropout_prob=0: the run's round gives the same params and drift metrics, bit for bit,
  as engine.make_round with no Unreliable over the same algorithm, whose aggregator is the
  unmasked one (robust._masked is False)."""
  kw = dict(clients_per_round=4, trim_beta=0.3)
  if aggregator != 'mean':
    kw['aggregator'] = aggregator
  exp = make(tiny_npz, unequal_partition, dropout_prob=0.0, **kw)
  hand = engine.make_round(exp.algo, exp.schedule, exp.max_local_steps, 4, 'examples',
                           unreliable=None)
  a = b = exp.state
  for _ in range(3):
    (a, ma), (b, mb) = jax.jit(exp.round_fn)(a, exp.data), jax.jit(hand)(b, exp.data)
    for k in ('client_update_norm_mean', 'mean_update_norm', 'update_cosine',
              'client_loss_std', 'train_loss'):
      assert np.asarray(ma[k]).tobytes() == np.asarray(mb[k]).tobytes(), k
  for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  # pylint: disable-next=protected-access
  assert not robust._masked(fedjax_drift.Config(dropout_prob=0.0))


def test_draw_frequencies():
  spec = unreliable.Unreliable(0.3, 0.5, 2)
  ids = jnp.arange(4000, dtype=jnp.int32)
  reports, steps = unreliable.draw(spec, jax.random.key(3), ids, jnp.full(4000, 10, jnp.int32))
  reports, steps = np.asarray(reports), np.asarray(steps)
  assert abs(1 - reports.mean() - 0.3) < 0.03
  full = (steps[reports] == 10).mean()  # not straggling, or straggling and drawing 10
  assert abs(full - (0.5 + 0.5 / 9)) < 0.04
  assert steps[reports].min() == 2


def test_straggler_min_steps_is_read_only_with_stragglers():
  assert applies.unread_flags(fedjax_drift.Config(straggler_min_steps=3)) == \
      ['straggler_min_steps']
  assert applies.unread_flags(fedjax_drift.Config(straggler_min_steps=3, straggler_frac=0.2)) == []


def test_bounds():
  with pytest.raises(UserError, match='--dropout_prob'):
    fedjax_drift.Config(dropout_prob=1.0).validate()
  with pytest.raises(UserError, match='--straggler_frac'):
    fedjax_drift.Config(straggler_frac=1.5).validate()


@pytest.mark.slow
def test_sweep_and_resume_with_dropout_and_stragglers(tiny_npz, tmp_path):
  check_sweep_equals_single_runs_and_resumes(tiny_npz, tmp_path, algo='fednova', model='logreg',
                                             dropout_prob=0.3, straggler_frac=0.5)


@pytest.mark.parametrize('algo,aggregator', [('dp_fedavg', 'dp_gaussian'),
                                             ('igfl_s', 'attention_self')])
def test_aggregators_over_the_whole_cohort_refuse_dropout(tiny_npz, unequal_partition, algo,
                                                          aggregator):
  """DP-FedAvg's noise and accountant assume K reporting clients, IGFL's attention weighs the
  whole cohort's updates: with dropped clients each is refused in one line naming both flags."""
  with pytest.raises(UserError, match=f'--aggregator={aggregator} cannot take '
                                      '--dropout_prob=0.3'):
    make(tiny_npz, unequal_partition, algo, dropout_prob=0.3)


def test_rounds_report_who_reported_and_the_steps_they_ran(tiny_npz, unequal_partition):
  """Issue 45 item 7: each round's metrics (rounds.csv) carry reported_clients, how many
  sampled clients reported, and mean_local_steps, the mean steps of those that did, equal to
  the round's draws (without dropout or stragglers the round is built without them)."""
  exp = make(tiny_npz, unequal_partition, dropout_prob=0.4, straggler_frac=0.7)
  state, step = exp.state, jax.jit(exp.round_fn)
  for _ in range(4):
    _, _, _, reports, ran, _ = draws(exp, state)
    state, metrics = step(state, exp.data)
    assert int(metrics['reported_clients']) == reports.sum()
    want = ran[reports].mean() if reports.any() else np.nan
    np.testing.assert_allclose(float(metrics['mean_local_steps']), want, rtol=1e-6)

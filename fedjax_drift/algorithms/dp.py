"""DP-FedAvg: user-level differential privacy with a central Gaussian mechanism.

Paper: McMahan, Ramage, Talwar, Zhang, "Learning Differentially Private Recurrent Language
Models" (ICLR 2018), Algorithm 1 (DP-FedAvg) with the fixed-denominator estimator f~_f and
per-user clipping (flat clipping, §2).

Round t, cohort C of K clients drawn uniformly without replacement from N (fixed size: the
engine's sampler), each update delta_k in state.py's sign:
    client:  Delta_k = delta_k * min(1, S / ||delta_k||)                  (clip to norm S)
    server:  Delta = sum_{k in C} w_k Delta_k / (q W) + N(0, (sigma S / (q W))^2 I)
             theta <- theta - server optimizer(Delta)
with w_k = 1 for every user (the paper's w_k capped at 1, all at the cap), so q W = K/N * N = K,
the expected (here: exact) cohort size: Delta is the plain mean of the clipped updates plus
noise of standard deviation sigma S / K per coordinate. The mean is the engine's streamed sum
of p_i Delta_i with p_i = 1/K, so the run needs --weighting=uniform (with --algo=dp_fedavg the
default); S = inf and sigma = 0 leave it FedAvg under --weighting=uniform bit for bit.

Accounting (Google's dp-accounting, RDP): fixed-size cohorts sampled without replacement, so
the neighbouring relation is replace-one user (N public; Wang, Balle, Kasiviswanathan 2019,
Thm. 27). Replacing one user moves the sum of clipped updates by at most 2S, so the accountant
gets the noise multiplier sigma S / (2 S) = sigma / 2 (a user added or removed, the paper's
Poisson setting, would be sigma). Each round is one such event; epsilon at --dp_delta after t
rounds is the metric dp_epsilon (rounds.csv, the evaluations' rows of metrics.csv) and the
summary's final_dp_epsilon.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from optax.tree_utils import tree_norm

from fedjax_drift import registry
from fedjax_drift.algorithms.local import is_off
from fedjax_drift.algorithms.parts import Part
from fedjax_drift.algorithms.recipes import Recipe, algorithm
from fedjax_drift.errors import UserError

# Folded into the server's key of the round for the noise.
_NOISE_TAG = 0x4450


def clip_update(delta, clip):
  """delta * min(1, clip / ||delta||) (global L2 norm over the pytree; clip may be inf, and a
  zero update stays zero)."""
  norm = tree_norm(delta)
  factor = jnp.minimum(1.0, clip / jnp.maximum(norm, jnp.finfo(jnp.float32).tiny))
  return jax.tree.map(lambda d: d * factor.astype(d.dtype), delta)


def gaussian_noise(tree, std, key):
  """Independent N(0, std^2) noise shaped like `tree`, one fold_in of key per leaf in order."""
  leaves, treedef = jax.tree.flatten(tree)
  return jax.tree.unflatten(treedef, [
      std * jax.random.normal(jax.random.fold_in(key, i), a.shape, a.dtype)
      for i, a in enumerate(leaves)])


@functools.lru_cache(maxsize=64)
def epsilons(num_clients, cohort_size, noise_multiplier, delta, rounds):
  """[rounds + 1] epsilon at `delta` after t = 0..rounds rounds of the sampled Gaussian
  mechanism: cohorts of cohort_size drawn without replacement from num_clients, the
  replace-one relation, accountant noise multiplier noise_multiplier / 2 (module docstring).
  sigma = 0 spends inf from the first round."""
  # dp_accounting loads scipy: imported on first use, so `import fedjax_drift` stays light.
  import dp_accounting  # pylint: disable=g-import-not-at-top
  from dp_accounting.rdp import rdp_privacy_accountant  # pylint: disable=g-import-not-at-top
  out = np.zeros(rounds + 1)
  if noise_multiplier == 0:
    out[1:] = np.inf
    return out
  event = dp_accounting.GaussianDpEvent(noise_multiplier / 2)
  if cohort_size < num_clients:
    event = dp_accounting.SampledWithoutReplacementDpEvent(num_clients, cohort_size, event)
  accountant = rdp_privacy_accountant.RdpAccountant(
      neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
  accountant.compose(event, 1)
  one = accountant.rdp  # RDP composes additively: t rounds spend t times one round's
  for t in range(1, rounds + 1):
    out[t] = rdp_privacy_accountant.compute_epsilon(accountant.orders, t * one, delta)[0]
  return out


def dp_gaussian(clip, noise_multiplier, delta, rounds):
  """DP-FedAvg's clipping (client) and Gaussian noise (server) as an aggregator Part.

  clip: S (inf = no clipping); noise_multiplier: sigma; delta, rounds: for the epsilon of the
  metric dp_epsilon, which the server buffer tracks with the rounds done.
  """
  def send(ctx, update):
    del ctx
    return clip_update(update, clip), None

  def aggregate(deltas, weights, cohort, buffer):
    del deltas, weights  # the streamed mean of the clipped updates, p_i = 1/K
    k = cohort.ids.shape[0]
    std = 0.0 if noise_multiplier == 0 else noise_multiplier * clip / k
    pseudo = cohort.mean_delta
    if std:
      noise = gaussian_noise(pseudo, std, jax.random.fold_in(cohort.key, _NOISE_TAG))
      pseudo = jax.tree.map(jnp.add, pseudo, noise)
    # epsilon after t rounds for t <= --rounds, then nan: the table ends at the run's rounds
    table = jnp.asarray(np.append(epsilons(cohort.num_clients, k, noise_multiplier, delta,
                                           rounds), np.nan), jnp.float32)
    done = buffer['rounds'] + 1
    return pseudo, {'rounds': done, 'epsilon': table[jnp.minimum(done, rounds + 1)]}

  def init(params):
    del params
    return {'rounds': jnp.zeros((), jnp.int32), 'epsilon': jnp.zeros((), jnp.float32)}

  return Part('dp_gaussian', init=init, send=send, aggregate=aggregate, aggregate_streams=True,
              diagnostics=lambda buffer: {'dp_epsilon': buffer['epsilon']})


def noise_warning(aggregator, clip, noise_multiplier, cohort_size, num_params) -> str:
  """A one-line warning ('' when none) when DP-FedAvg's noise drowns every update: its norm,
  about sigma S sqrt(d) / K over d parameters, against at most S for the mean of the clipped
  updates. McMahan et al. 2018 take sigma = 1 (their z) with expected cohorts of hundreds to
  thousands of users, where the ratio sigma sqrt(d) / K is below 1; with tens of clients per
  round and a model of millions of parameters it is in the hundreds and the model does not
  learn (docs/algorithms.md). The paper's sigma stays the default: the run says so."""
  if aggregator != 'dp_gaussian' or not noise_multiplier or not np.isfinite(clip):
    return ''
  ratio = noise_multiplier * np.sqrt(num_params) / cohort_size
  if ratio <= 1:
    return ''
  return (f'warning: --dp_noise={noise_multiplier:g} adds noise of norm about '
          f'{ratio:.3g} x --dp_clip per round (sigma sqrt(d) / K, d = {num_params:,} '
          f'parameters, K = {cohort_size} clients per round) to a mean of clipped updates of '
          'norm at most --dp_clip: the model can hardly learn; DP-FedAvg needs far more '
          'clients per round (McMahan et al. 2018: hundreds to thousands) -- raise '
          '--clients_per_round, or lower --dp_noise (less privacy, a larger dp_epsilon)')


# --- Registration -----------------------------------------------------------------------------
_SOURCE = 'McMahan et al. 2018, Alg. 1: f~_f with w_k = 1, denominator qW = K'


@registry.registers('aggregator', 'dp_gaussian', 'clip each update to --dp_clip, mean plus '
                    'Gaussian noise sigma S / K (--dp_noise; DP-FedAvg, McMahan et al. 2018)',
                    reads=('dp_clip', 'dp_noise', 'dp_delta'))
def _dp_gaussian(v, weighting='uniform', **_):
  if weighting != 'uniform':
    raise UserError(f'--aggregator=dp_gaussian averages over the fixed denominator K ({_SOURCE})'
                    f': use --weighting=uniform, not {weighting}')
  if not is_off(v.dropout_prob):
    raise UserError(f'--aggregator=dp_gaussian cannot take --dropout_prob={v.dropout_prob}: the '
                    'reporting clients\' mean would divide by fewer than K while the noise and '
                    f'the accountant assume K ({_SOURCE}); use --dropout_prob=0')
  if v.dp_noise > 0 and not np.isfinite(v.dp_clip):
    raise UserError(f'--dp_noise={v.dp_noise} needs a finite --dp_clip (the noise is '
                    'dp_noise * dp_clip / K)')
  return dp_gaussian(v.dp_clip, v.dp_noise, v.dp_delta, v.rounds)


algorithm('dp_fedavg', Recipe((), 'dp_gaussian', weighting='uniform', weighting_source=_SOURCE,
                              summary='FedAvg with user-level DP: clipped updates, Gaussian '
                              'noise (DP-FedAvg)'))

"""FedCurv: an EWC penalty towards the other clients' models.

Paper: Shoham et al., "Overcoming Forgetting in Federated Learning on Non-IID Data" (2019),
eq. (3)-(4); restated as eq. 9 of the FedFOR paper (Tian, Smith and Kira):

    client k:  + lambda sum_{j != k} (w - w_j)^T diag(I_j) (w - w_j)

with w_j and I_j (diagonal empirical Fisher: mean of squared per-example gradients) taken at
the end of client j's last round. The server keeps the sums U = sum_j I_j, V = sum_j I_j w_j,
S = sum_j I_j w_j^2, so the penalty is lambda sum [U w^2 - 2 V w + S] minus client k's own
share. The Fisher is estimated on the batch after the client's last local step (its whole data
with --batch_size=0).

Two settings:
  ewc_penalty (fedcurv): stateful, as Shoham et al. j runs over every client seen so far,
    each with the Fisher of its own last round (I_j = 0 for clients not yet seen); the
    per-client state is (I_k, w_k), so client k can remove its own share.
  stateless_ewc_penalty (fedcurv_stateless): as FedFOR's Table 2 runs FedCurv with
    never-returning clients ("I_j^{t-1} ... of client j at the end of the previous round"):
    j runs over the previous round's cohort only. Clients keep nothing; they upload (I_k, w_k)
    with their model, and the server replaces (U, V, S) with the new cohort's sums. A client
    cannot tell whether it was in the previous cohort, so nothing is removed from the sums
    (with fresh clients every round, j != k always holds). Round 1 has no previous cohort:
    the sums are zero and the round is FedAvg.
"""
import jax
import jax.numpy as jnp

from fedjax_drift.algorithms.local import cross_entropy
from fedjax_drift.algorithms.parts import Part
from fedjax_drift import registry
from fedjax_drift.algorithms.recipes import INHERITS, Recipe, algorithm


def _zeros(params):
  return jax.tree.map(jnp.zeros_like, params)


def diagonal_fisher(params, batch, apply_fn):
  """Mean over the batch's valid examples of squared per-example log-likelihood gradients."""

  def example_loss(p, x, y):
    return cross_entropy(apply_fn(p, x[None]), y[None])[0]

  grads = jax.vmap(jax.grad(example_loss), in_axes=(None, 0, 0))(params, batch.x, batch.y)
  weights = batch.mask / jnp.maximum(jnp.sum(batch.mask), 1.0)
  return jax.tree.map(lambda g: jnp.tensordot(weights, g * g, axes=1), grads)


def _penalty(params, sums, own=None):
  """sum [ (U - I_k) w^2 - 2 (V - I_k w_k) w + (S - I_k w_k^2) ], own = (I_k, w_k) or None."""
  total = 0.0
  leaves = [jax.tree.leaves(t) for t in (params, sums['U'], sums['V'], sums['S'])]
  own_leaves = ([jax.tree.leaves(own['fisher']), jax.tree.leaves(own['params'])] if own is not None
                else [[0.0] * len(leaves[0])] * 2)
  for w, u, v, s, fisher, anchor in zip(*leaves, *own_leaves):
    total = total + jnp.sum((u - fisher) * w * w - 2 * (v - fisher * anchor) * w
                            + (s - fisher * anchor * anchor))
  return total


def _fisher_and_final(ctx, delta):
  final = jax.tree.map(jnp.subtract, ctx.global_params, delta)
  return {'fisher': diagonal_fisher(final, ctx.batch(ctx.num_steps), ctx.apply), 'params': final}


def _sums(fisher, anchor):
  """(U, V, S) summed over the leading cohort axis."""
  total = lambda f: jax.tree.map(lambda a: jnp.sum(a, axis=0), f)
  return {'U': total(fisher),
          'V': total(jax.tree.map(jnp.multiply, fisher, anchor)),
          'S': total(jax.tree.map(lambda i, w: i * w * w, fisher, anchor))}


def _init_sums(p):
  return {'U': _zeros(p), 'V': _zeros(p), 'S': _zeros(p)}


def _model_size(params):
  return sum(int(p.size) for p in jax.tree.leaves(params))


def stateless_ewc_penalty(curv_lambda):
  """FedCurv over the previous round's cohort (see the module docstring); no client state."""

  def loss(params, logits, batch, ctx):
    del logits, batch
    return curv_lambda * _penalty(params, ctx.payload['fedcurv_stateless'])

  def server_update(params, sums, sctx):
    del sums  # replaced: only the last cohort's Fishers count
    up = sctx.cohort.uploads['fedcurv_stateless']
    return params, _sums(up['fisher'], up['params'])

  return Part('fedcurv_stateless', init=_init_sums, payload=lambda sums, params, server: sums,
              loss=loss, client_upload=_fisher_and_final, server_update=server_update,
              upload=_model_size)


def ewc_penalty(curv_lambda):
  """Shoham et al.'s FedCurv over every client seen so far; per-client state (I_k, w_k)."""

  def loss(params, logits, batch, ctx):
    del logits, batch
    return curv_lambda * _penalty(params, ctx.payload['fedcurv'], ctx.state['fedcurv'])

  def server_update(params, sums, sctx):
    new, old = sctx.cohort.new_states['fedcurv'], sctx.cohort.old_states['fedcurv']
    added, removed = _sums(new['fisher'], new['params']), _sums(old['fisher'], old['params'])
    return params, jax.tree.map(lambda s, a, r: s + a - r, sums, added, removed)

  return Part('fedcurv', init=_init_sums, payload=lambda sums, params, server: sums,
              init_client=lambda p: {'fisher': _zeros(p), 'params': _zeros(p)},
              loss=loss, client_final=_fisher_and_final, server_update=server_update,
              upload=_model_size)


# --- Registration -----------------------------------------------------------------------------
@registry.registers('part', 'curv', 'EWC penalty with the clients\' Fishers (FedCurv)',
                    reads=('curv_lambda',))
def _ewc(v, **_):
  return ewc_penalty(v.curv_lambda)


@registry.registers('part', 'curv_stateless', 'EWC penalty with the previous cohort\'s Fishers '
                    '(FedFOR paper, eq. 9)', reads=('curv_lambda',))
def _stateless_ewc(v, **_):
  return stateless_ewc_penalty(v.curv_lambda)


algorithm('fedcurv', Recipe(('curv',), weighting_source=INHERITS,
                            summary='EWC penalty with client Fishers'))
algorithm('fedcurv_stateless', Recipe(('curv_stateless',), weighting_source=INHERITS,
                                      summary='EWC penalty with the previous cohort\'s Fishers '
                                      '(FedFOR paper, eq. 9, Table 2)'))

"""Summaries of a run's evaluation history, as the papers report them."""
import numpy as np


def best_so_far(accuracies):
  return np.maximum.accumulate(np.asarray(accuracies, np.float64))


def rounds_to_target(rounds, accuracies, target):
  """First evaluated round whose accuracy reaches `target` (FedFOR's AccX), or None."""
  for r, a in zip(rounds, accuracies):
    if a >= target:
      return int(r)
  return None


def last_fraction_mean(rounds, accuracies, total_rounds, fraction=0.1):
  """Mean accuracy over evaluations in the last `fraction` of rounds (IGFL's metric).

  Uses evaluations at rounds > (1 - fraction) * total; at least the final one.
  """
  rounds, accuracies = np.asarray(rounds), np.asarray(accuracies, np.float64)
  keep = rounds > (1 - fraction) * total_rounds
  if not keep.any():
    keep = rounds == rounds.max()
  return float(accuracies[keep].mean())


def summarize(rounds, accuracies, losses, total_rounds, target):
  rounds = [int(r) for r in rounds]
  return {
      'final_accuracy': float(accuracies[-1]),
      'final_loss': float(losses[-1]),
      'best_accuracy': float(np.max(accuracies)),
      # FedFOR's Table 5 (concept shift): the best accuracy so far, averaged over the run.
      'mean_best_accuracy': float(np.mean(best_so_far(accuracies))),
      'last10_mean_accuracy': last_fraction_mean(rounds, accuracies, total_rounds),
      'target_accuracy': target,
      'rounds_to_target': rounds_to_target(rounds, accuracies, target),
  }


def concept_shift_metrics(rounds, accuracies, shifts):
  """FedFOR's concept-shift metrics (§4.4), and how each shift is recovered from.

  rounds, accuracies: the evaluation history (accuracy after `rounds[i]` rounds, under the
  concept current then). shifts: [{'round': r, ...}, ...] in round order, a shift at round r
  being applied at the start of round r, i.e. after the evaluation at round r - 1; the other
  keys are copied into each shift's entry. A shift's window is its evaluations from round r
  until the next shift (rounds r .. next - 1) or the end of the run.
  Returns
    average_best_accuracy: mean over evaluations of the best accuracy so far (Table 5,
      "average best validation accuracy"; the other tables report "best accuracy up to" t).
      It cannot tell a recovered shift from one never recovered once an earlier best exists;
    average_best_since_shift: the same with the best reset at every shift (the best since the
      latest shift), which falls and stays low when a run does not recover;
    average_accuracy: mean of the accuracies (§4.1, "average performance" for concept shift);
    shifts: per shift, pre_shift_accuracy (the last evaluation before it, None if none; the
      paper defines no recovery target), best_since and mean_since (over its window, None if
      the window has no evaluation), evaluations_since, until_round (the window's last round),
      rounds_to_recover (r' - r + 1 for the first window round r' whose accuracy reaches
      pre_shift_accuracy; None if none) and recovered (True, False = never within its window,
      None = not measurable: no pre-shift or no window evaluation);
    recovered, never_recovered, unmeasured: counts of shifts; mean_rounds_to_recover over the
      recovered ones (None if none).
  All averages are over evaluations: evaluate every round (--eval_every=1) for the paper's
  per-round averages; with sparser evaluations rounds_to_recover is an upper bound.
  """
  rounds = np.asarray(rounds, np.int64)
  accuracies = np.asarray(accuracies, np.float64)
  starts = [int(shift['round']) for shift in shifts]
  per_shift = [_one_shift(rounds, accuracies, shift, r, nxt)
               for shift, r, nxt in zip(shifts, starts, starts[1:] + [None])]
  # Each evaluation's segment: how many shifts happened at or before its round.
  segment = np.searchsorted(np.asarray(starts, np.int64), rounds, side='right')
  best_since = np.empty_like(accuracies)
  for seg in np.unique(segment):
    best_since[segment == seg] = best_so_far(accuracies[segment == seg])
  recovered = [s['rounds_to_recover'] for s in per_shift if s['recovered']]
  return {'average_best_accuracy': float(np.mean(best_so_far(accuracies))),
          'average_best_since_shift': float(np.mean(best_since)),
          'average_accuracy': float(np.mean(accuracies)),
          'shift_count': len(per_shift), 'recovered': len(recovered),
          'never_recovered': sum(s['recovered'] is False for s in per_shift),
          'unmeasured': sum(s['recovered'] is None for s in per_shift),
          'mean_rounds_to_recover': float(np.mean(recovered)) if recovered else None,
          'shifts': per_shift}


def _one_shift(rounds, accuracies, shift, r, next_round):
  """concept_shift_metrics' entry for the shift at round r (window r .. next_round - 1)."""
  before = np.flatnonzero(rounds <= r - 1)
  pre = float(accuracies[before[-1]]) if before.size else None
  window = (rounds >= r) & ((rounds < next_round) if next_round is not None else True)
  since = accuracies[window]
  out = {**shift, 'pre_shift_accuracy': pre,
         'best_since': float(since.max()) if since.size else None,
         'mean_since': float(since.mean()) if since.size else None,
         'evaluations_since': int(since.size),
         'until_round': int(rounds[window][-1]) if since.size else None,
         'rounds_to_recover': None, 'recovered': None}
  if pre is None or not since.size:
    return out
  regained = np.flatnonzero(since >= pre)
  out['recovered'] = bool(regained.size)
  if regained.size:
    out['rounds_to_recover'] = int(rounds[window][regained[0]] - r + 1)
  return out

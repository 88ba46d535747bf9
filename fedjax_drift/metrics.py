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
  """FedFOR's concept-shift metrics (§4.4), and how fast each shift is recovered.

  rounds, accuracies: the evaluation history (accuracy after `rounds[i]` rounds, under the
  concept current then). shifts: [{'round': r, 'class': c, 'new_label': l}, ...], a shift at
  round r being applied at the start of round r, i.e. after the evaluation at round r - 1.
  Returns
    average_best_accuracy: mean over evaluations of the best accuracy so far (Table 5,
      "average best validation accuracy"; the other tables report "best accuracy up to" t);
    average_accuracy: mean of the accuracies (§4.1, "average performance" for concept shift);
    shifts: each shift with pre_shift_accuracy (the last evaluation before it, None if there
      is none) and rounds_to_regain: rounds trained from the shift until an evaluation reaches
      pre_shift_accuracy again (r' - r + 1 for the first such round r' >= r; None if never
      within the run). Both averages are over evaluations: evaluate every round
      (--eval_every=1) for the paper's per-round averages.
  """
  rounds = np.asarray(rounds, np.int64)
  accuracies = np.asarray(accuracies, np.float64)
  per_shift = []
  for shift in shifts:
    r = int(shift['round'])
    before = np.flatnonzero(rounds <= r - 1)
    pre = float(accuracies[before[-1]]) if before.size else None
    regained = (np.flatnonzero((rounds >= r) & (accuracies >= pre)) if pre is not None
                else np.array([], np.int64))
    per_shift.append({**shift, 'pre_shift_accuracy': pre,
                      'rounds_to_regain': int(rounds[regained[0]] - r + 1) if regained.size
                      else None})
  return {'average_best_accuracy': float(np.mean(best_so_far(accuracies))),
          'average_accuracy': float(np.mean(accuracies)),
          'shifts': per_shift}

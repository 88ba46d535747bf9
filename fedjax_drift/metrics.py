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

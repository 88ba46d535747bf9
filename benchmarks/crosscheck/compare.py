"""Compares two codes' global models round by round.

  python benchmarks/crosscheck/compare.py OURS THEIRS [--map=NAMES.json] [--torch_layout]
                                          [--tolerance=X]

OURS and THEIRS are directories of round_TTTT.npz files (the global parameters after round T;
round_0000 the initial ones), one array per parameter. Rounds present on both sides are
compared; parameters are matched by name, THEIRS' names first renamed by --map (a JSON object
{their name: our name}). --torch_layout transposes THEIRS' arrays from PyTorch's layout to
flax's: conv kernels [out, in, h, w] -> [h, w, in, out], linear weights [out, in] -> [in, out].

Prints, per round:
  max_rel     max over parameters of max|ours - theirs| / max|ours|
  of_update   max over parameters of max|ours - theirs| / max|ours_t - ours_(t-1)|, the
              difference as a share of the round's own update (rounds after 0)
  worst       the parameter where max_rel is reached
With --tolerance=X the exit status is 1 when any round's max_rel exceeds X.
"""
import argparse
import glob
import json
import os
import re
import sys

import numpy as np


def load_rounds(directory):
  """{round: {name: array}} of every round_TTTT.npz in `directory`."""
  rounds = {}
  for path in sorted(glob.glob(os.path.join(directory, 'round_*.npz'))):
    match = re.fullmatch(r'round_(\d+)\.npz', os.path.basename(path))
    if match:
      with np.load(path) as f:
        rounds[int(match.group(1))] = {k: f[k] for k in f.files}
  if not rounds:
    raise SystemExit(f'error: {directory} holds no round_TTTT.npz files')
  return rounds


def to_flax_layout(array):
  """A PyTorch parameter in flax's layout: conv [O, I, H, W] -> [H, W, I, O], linear
  [O, I] -> [I, O]; other arrays as they are."""
  if array.ndim == 4:
    return array.transpose(2, 3, 1, 0)
  if array.ndim == 2:
    return array.T
  return array


def rename(params, names=None, torch_layout=False):
  """THEIRS' {name: array} under our names and layout."""
  names = names or {}
  return {names.get(k, k): to_flax_layout(v) if torch_layout else v for k, v in params.items()}


def _max_abs(a):
  return float(np.max(np.abs(a))) if a.size else 0.0


def compare(ours, theirs):
  """[(round, max_rel, of_update, worst name)] over the rounds both sides hold.

  ours, theirs: {round: {name: array}} with the same names and shapes (rename first)."""
  rows = []
  for t in sorted(set(ours) & set(theirs)):
    a, b = ours[t], theirs[t]
    if set(a) != set(b):
      missing = sorted(set(a) ^ set(b))[:3]
      raise SystemExit(f'error: round {t}: the sides name different parameters ({missing} '
                       '...); give --map')
    max_rel, of_update, worst = 0.0, float('nan'), ''
    if t - 1 in ours:
      of_update = 0.0
    for name in sorted(a):
      if a[name].shape != b[name].shape:
        raise SystemExit(f'error: round {t}: {name} has shape {a[name].shape} here and '
                         f'{b[name].shape} there (--torch_layout?)')
      diff = _max_abs(a[name].astype(np.float64) - b[name].astype(np.float64))
      rel = diff / max(_max_abs(a[name]), 1e-30)
      if rel >= max_rel:
        max_rel, worst = rel, name
      if t - 1 in ours:
        step = _max_abs(a[name].astype(np.float64) - ours[t - 1][name].astype(np.float64))
        of_update = max(of_update, diff / step if step > 0 else (0.0 if diff == 0 else np.inf))
    rows.append((t, max_rel, of_update, worst))
  return rows


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('ours')
  parser.add_argument('theirs')
  parser.add_argument('--map', default='')
  parser.add_argument('--torch_layout', action='store_true')
  parser.add_argument('--tolerance', type=float, default=None)
  args = parser.parse_args(argv)
  names = {}
  if args.map:
    with open(args.map) as f:
      names = json.load(f)
  ours = load_rounds(args.ours)
  theirs = {t: rename(p, names, args.torch_layout) for t, p in load_rounds(args.theirs).items()}
  rows = compare(ours, theirs)
  if not rows:
    raise SystemExit('error: the two sides share no round')
  print(f'{"round":>5}  {"max_rel":>10}  {"of_update":>10}  worst')
  for t, rel, upd, worst in rows:
    print(f'{t:>5}  {rel:>10.3g}  {upd:>10.3g}  {worst}')
  if args.tolerance is not None and max(r[1] for r in rows) > args.tolerance:
    return 1
  return 0


if __name__ == '__main__':
  sys.exit(main())

"""The figures of a side_by_side.sh run: per round, how far our global model is from the other
code's, next to how far the other code is from itself when only float order changes.

  python benchmarks/crosscheck/summarize.py OUT [--results_dir=DIR]

Reads the folders side_by_side.sh writes under OUT and writes DIR (default OUT)/
crosscheck-fedgkd-DATE.json and crosscheck-fedgen-DATE.json, printing their tables. Each
comparison is compare.py's (max_rel, of_update, worst parameter) per round; each effect compares
what an algorithm adds to FedAvg, e = w(algorithm) - w(FedAvg) after the same round, on the two
sides: rel_l2 = ||e_ours - e_theirs|| / ||e_ours||, cosine, norm_ratio = ||e_theirs|| / ||e_ours||.
"""
import argparse
import datetime
import importlib.util
import json
import os
import sys

import numpy as np

_SPEC = importlib.util.spec_from_file_location(
    'crosscheck_compare', os.path.join(os.path.dirname(os.path.abspath(__file__)), 'compare.py'))
compare = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(compare)


def rounds_of(folder):
  """{round: {name: array}} of an export's rounds/ or a side script's --out."""
  inner = os.path.join(folder, 'rounds')
  return compare.load_rounds(inner if os.path.isdir(inner) else folder)


def rows(ours, theirs):
  """compare.compare as [{'round', 'max_rel', 'of_update', 'worst'}]."""
  return [{'round': t, 'max_rel': rel, 'of_update': None if np.isnan(upd) else upd,
           'worst': worst} for t, rel, upd, worst in compare.compare(ours, theirs)]


def _flat(params):
  return np.concatenate([params[k].astype(np.float64).ravel() for k in sorted(params)])


def mean_rounds(runs):
  """The per-round, per-parameter mean of several runs' rounds."""
  return {t: {k: np.mean([r[t][k] for r in runs], axis=0) for k in runs[0][t]}
          for t in runs[0]}


def effect_rows(ours_algo, ours_base, theirs_algo, theirs_base, floor=1e-5):
  """Per round after 0: the algorithm's effect on each side, compared (module docstring).
  A round where neither effect reaches `floor` times the model's norm (the algorithm's term
  is off there, as in FedGKD's and FedGen's first round) has only float noise to compare:
  its rel_l2, cosine and norm_ratio are None."""
  out = []
  for t in sorted(set(ours_algo) & set(theirs_algo))[1:]:
    e_ours = _flat(ours_algo[t]) - _flat(ours_base[t])
    e_theirs = _flat(theirs_algo[t]) - _flat(theirs_base[t])
    norm_ours, norm_theirs = np.linalg.norm(e_ours), np.linalg.norm(e_theirs)
    if max(norm_ours, norm_theirs) < floor * np.linalg.norm(_flat(ours_base[t])):
      out.append({'round': t, 'norm_ours': norm_ours, 'norm_theirs': norm_theirs,
                  'rel_l2': None, 'cosine': None, 'norm_ratio': None})
      continue
    out.append({'round': t, 'norm_ours': norm_ours, 'norm_theirs': norm_theirs,
                'rel_l2': float(np.linalg.norm(e_ours - e_theirs) / max(norm_ours, 1e-30)),
                'cosine': float(e_ours @ e_theirs / max(norm_ours * norm_theirs, 1e-30)),
                'norm_ratio': float(norm_theirs / max(norm_ours, 1e-30))})
  return out


def fedgkd_figures(folder):
  """side_by_side.sh's FedGKD-code part: comparisons and effects."""
  r = {name: rounds_of(os.path.join(folder, name)) for name in (
      'ours_fedavg', 'ours_fedgkd', 'theirs_fedavg_s7', 'theirs_fedavg_s8',
      'theirs_fedgkd_s7', 'theirs_fedgkd_s8')}
  return {
      'comparisons': {
          'fedavg: ours vs theirs': rows(r['ours_fedavg'], r['theirs_fedavg_s7']),
          'fedavg: theirs vs theirs, other order in the batch':
              rows(r['theirs_fedavg_s7'], r['theirs_fedavg_s8']),
          'fedgkd: ours vs theirs': rows(r['ours_fedgkd'], r['theirs_fedgkd_s7']),
          'fedgkd: theirs vs theirs, other order in the batch':
              rows(r['theirs_fedgkd_s7'], r['theirs_fedgkd_s8'])},
      'effects': {
          'fedgkd - fedavg: ours vs theirs': effect_rows(
              r['ours_fedgkd'], r['ours_fedavg'], r['theirs_fedgkd_s7'], r['theirs_fedavg_s7']),
          'fedgkd - fedavg: theirs vs theirs, other order in the batch': effect_rows(
              r['theirs_fedgkd_s7'], r['theirs_fedavg_s7'], r['theirs_fedgkd_s8'],
              r['theirs_fedavg_s8'])}}


def fedgen_figures(folder, seeds=(0, 1, 2)):
  """side_by_side.sh's FedGen-code part: comparisons and effects (FedGen's draws differ
  between the codes, so its rounds after the first are compared with each side's seed
  spread, and its effect as a mean over seeds)."""
  def get(name):
    return rounds_of(os.path.join(folder, name))
  ours_fedavg, theirs_fedavg = get('ours_fedavg'), get('theirs_fedavg_s0')
  ours = [get(f'ours_fedgen_s{s}') for s in seeds]
  theirs = [get(f'theirs_fedgen_s{s}') for s in seeds]
  return {
      'comparisons': {
          'fedavg: ours vs theirs': rows(ours_fedavg, theirs_fedavg),
          'fedavg: theirs vs theirs, other order in the batch':
              rows(theirs_fedavg, get('theirs_fedavg_s1')),
          'fedavg: ours vs theirs, their users\' learning rate kept (--no_user_lr_decay)':
              rows(ours_fedavg, get('theirs_fedavg_nodecay')),
          'fedgen: ours vs theirs (seed 0 each)': rows(ours[0], theirs[0]),
          'fedgen: ours seed 0 vs ours seed 1': rows(ours[0], ours[1]),
          'fedgen: theirs seed 0 vs theirs seed 1': rows(theirs[0], theirs[1])},
      'effects': {
          f'fedgen - fedavg, mean of {len(seeds)} seeds: ours vs theirs': effect_rows(
              mean_rounds(ours), ours_fedavg, mean_rounds(theirs), theirs_fedavg),
          'fedgen - fedavg: ours seed 0 vs ours seed 1': effect_rows(
              ours[0], ours_fedavg, ours[1], ours_fedavg),
          'fedgen - fedavg: theirs seed 0 vs theirs seed 1': effect_rows(
              theirs[0], theirs_fedavg, theirs[1], theirs_fedavg)}}


def _print(name, figures):
  print(f'== {name}')
  for title, table in figures['comparisons'].items():
    print(f'  {title}')
    for row in table:
      upd = '-' if row['of_update'] is None else f"{row['of_update']:.3g}"
      print(f"    round {row['round']}: max_rel {row['max_rel']:.3g}  of_update {upd}  "
            f"({row['worst']})")
  for title, table in figures['effects'].items():
    print(f'  effect {title}')
    for row in table:
      if row['rel_l2'] is None:
        print(f"    round {row['round']}: no effect beyond float noise on either side")
        continue
      print(f"    round {row['round']}: rel_l2 {row['rel_l2']:.3g}  cosine {row['cosine']:.4f}  "
            f"norm_ratio {row['norm_ratio']:.4f}")


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('out')
  parser.add_argument('--results_dir', default='')
  args = parser.parse_args(argv)
  versions = {}
  path = os.path.join(args.out, 'versions.txt')
  if os.path.exists(path):
    with open(path) as f:
      versions = dict(line.split(None, 1) for line in f.read().splitlines() if ' ' in line)
  date = datetime.date.today().isoformat()
  for name, make in (('fedgkd', fedgkd_figures), ('fedgen', fedgen_figures)):
    folder = os.path.join(args.out, name)
    if not os.path.isdir(folder):
      continue
    figures = dict(make(folder), versions=versions, date=date)
    _print(name, figures)
    target = os.path.join(args.results_dir or args.out, f'crosscheck-{name}-{date}.json')
    with open(target, 'w') as f:
      json.dump(figures, f, indent=1)
    print(f'wrote {target}')
  return 0


if __name__ == '__main__':
  sys.exit(main())

"""Compare run directories: one table and one accuracy plot across them.

    python experiments/compare.py RUN_DIR... [--out=DIR] [--overwrite]
    fedjax-drift-compare RUN_DIR... [--out=DIR] [--overwrite]

Reads each directory's config.json (algorithm, dataset, and each run's seed and grid point),
runs.csv (final and best accuracy, status) and metrics.csv (test accuracy per evaluation).
Runs are grouped by directory and grid point; each group's seeds give the mean and the
standard deviation (numpy's, ddof=0: the spread of these seeds, as summary.json gives it) and
the 95% t-interval of the mean (results.seed_stats, as summary.json and the presets' tables
compute them) of the final and best test accuracy, over the seeds that did not diverge.
Prints the markdown table and writes DIR/comparison.md, DIR/comparison.csv and
DIR/comparison.png (mean test accuracy per round with a +-std band over seeds); DIR defaults
to ./comparison. Runs whose rounds.csv has upload_bytes (compressed uploads) add each row's
megabytes uploaded per run to the table and DIR/comparison_bytes.png, the test accuracy
against the megabytes sent so far. A row with a run that failed a sanity check (summary.json's
warnings, results.sanity_warnings) is marked with MARK, explained by a legend line under the
table.
"""
import argparse
import csv
import io
import json
import os
import sys

import numpy as np

from fedjax_drift import interrupts, report, results, stats
from fedjax_drift.errors import UserError

OUTPUTS = ('comparison.md', 'comparison.csv', 'comparison.png')
BYTES_PLOT = 'comparison_bytes.png'  # only for runs with compressed uploads (upload_bytes)


def _read_csv(path):
  if not os.path.isfile(path):
    raise UserError(f'{path} does not exist: not a finished fedjax-drift run directory')
  with open(path, newline='') as f:
    return list(csv.DictReader(f))


def read_run_dir(run_dir) -> dict:
  """{'dir', 'algo', 'dataset', 'runs': [{'run', 'seed', 'point', 'status', 'final', 'best'}],
  'curves': {run: (rounds, accuracies)}} of one run directory."""
  if not os.path.isdir(run_dir):
    raise UserError(f'{run_dir} is not a directory')
  config_path = os.path.join(run_dir, 'config.json')
  if not os.path.isfile(config_path):
    raise UserError(f'{config_path} does not exist: not a fedjax-drift run directory')
  try:
    with open(config_path) as f:
      config = json.load(f)
    specs = {int(s['run']): s for s in config['_resolved']['runs']}
  except (ValueError, KeyError, TypeError) as e:
    raise UserError(f'{config_path} is not a fedjax-drift config.json ({e!r})') from None
  runs = []
  for row in _read_csv(os.path.join(run_dir, 'runs.csv')):
    try:
      spec = specs.get(int(row['run']), {})
      point = {k: v for k, v in spec.items() if k not in ('run', 'seed')}
      runs.append({'run': int(row['run']), 'seed': int(row['seed']), 'point': point,
                   'status': row['status'], 'final': _float(row['final_accuracy']),
                   'best': _float(row['best_accuracy'])})
    except (KeyError, ValueError, TypeError) as e:
      raise UserError(f'{os.path.join(run_dir, "runs.csv")}: unexpected row ({e!r})') from None
  curves, evals = {}, {}
  for row in _read_csv(os.path.join(run_dir, 'metrics.csv')):
    try:
      point = int(row['run']), int(row['round']), _float(row['test_accuracy'])
    except (KeyError, ValueError, TypeError) as e:
      raise UserError(f'{os.path.join(run_dir, "metrics.csv")}: unexpected row ({e!r})') from None
    rounds, accs = curves.setdefault(point[0], ([], []))
    rounds.append(point[1])
    accs.append(point[2])
    evals.setdefault(point[0], []).append(row)
  recorded = results.recorded_warnings(run_dir)
  for r in runs:
    if r['status'] != 'ok':
      r['warnings'] = []
    elif r['run'] in recorded:
      r['warnings'] = recorded[r['run']]
    else:  # a run directory written before summary.json kept them: the same checks
      rows = evals.get(r['run'], [])
      r['warnings'] = results.sanity_warnings(
          [int(x['round']) for x in rows], [_float(x['test_accuracy']) for x in rows],
          [_float(x.get('test_loss')) for x in rows],
          [_float(x['val_accuracy']) for x in rows if x.get('val_accuracy') not in (None, '')])
  return {'dir': run_dir, 'algo': config.get('algo', '?'), 'dataset': config.get('dataset', '?'),
          'model': config.get('model', '?'), 'rounds': config.get('rounds', '?'),
          'runs': runs, 'curves': curves, 'uploads': uploads(run_dir)}


def uploads(run_dir) -> dict:
  """{run: {round: bytes the cohort sent}} from rounds.csv's upload_bytes (compressed
  uploads, --local_terms=topk|qsgd); {} when the run directory has no such column."""
  path = os.path.join(run_dir, 'rounds.csv')
  if not os.path.isfile(path):
    return {}
  out = {}
  for row in _read_csv(path):
    if row.get('upload_bytes') not in (None, ''):
      out.setdefault(int(row['run']), {})[int(row['round'])] = float(row['upload_bytes'])
  return out


def _sent_mb(row, run, last=None) -> float:
  """Megabytes run `run` of a groups() row sent over its rounds (up to `last`)."""
  sent = row['_uploads'].get(run, {})
  return sum(b for t, b in sent.items() if last is None or t <= last) / 1e6


def _float(text):
  return float(text) if text not in ('', None) else float('nan')


def _point_label(point):
  return ', '.join(f'{k}={v:g}' for k, v in sorted(point.items())) or '-'


def _stats(key, values):
  """{key_mean, key_std, key_ci95_lo, key_ci95_hi} over seeds (results.seed_stats: std with
  ddof=0, the 95% t-interval of the mean); nan where there is none (no value, or one)."""
  s = results.seed_stats(values)
  return {f'{key}_{name}': np.nan if s[part] is None else s[part]
          for name, part in (('mean', 'mean'), ('std', 'std'), ('ci95_lo', 'lo'),
                             ('ci95_hi', 'hi'))}


def groups(dirs: list) -> list:
  """One row per (run directory, grid point): its label, seeds, and accuracy statistics."""
  names = [os.path.basename(os.path.normpath(d['dir'])) for d in dirs]
  rows = []
  for d, name in zip(dirs, names):
    points = []
    for r in d['runs']:
      if r['point'] not in points:
        points.append(r['point'])
    for point in points:
      mine = [r for r in d['runs'] if r['point'] == point]
      ok = [r for r in mine if r['status'] == 'ok']
      rows.append({'run_dir': name, 'algo': d['algo'], 'dataset': d['dataset'],
                   'model': d.get('model', '?'), 'rounds': d.get('rounds', '?'),
                   'grid_point': _point_label(point), 'seeds': len(ok),
                   'diverged': len(mine) - len(ok),
                   **_stats('final_accuracy', [r['final'] for r in ok]),
                   **_stats('best_accuracy', [r['best'] for r in ok]),
                   'warnings': '; '.join(f'run {r["run"]}: {w}' for r in ok
                                         for w in r.get('warnings') or []),
                   '_runs': [r['run'] for r in ok], '_curves': d['curves'],
                   '_uploads': d.get('uploads', {})})
      rows[-1]['sent_mb_mean'] = (
          float(np.mean([_sent_mb(rows[-1], r['run']) for r in ok]))
          if ok and any(r['run'] in rows[-1]['_uploads'] for r in ok) else np.nan)
  return rows


SETTINGS = (('dataset', 'dataset'), ('model', 'model'), ('rounds', 'rounds'))


def differing(rows) -> list:
  """The settings (dataset, model, rounds) whose value is not the same in every row."""
  return [key for key, _ in SETTINGS if len({str(r.get(key)) for r in rows}) > 1]


def warning(rows) -> str:
  """A one-line warning when the rows differ in dataset, model or rounds ('' otherwise):
  their accuracies are then no ranking of methods."""
  keys = differing(rows)
  if not keys:
    return ''
  what = '; '.join(f'{k}: {", ".join(dict.fromkeys(str(r.get(k)) for r in rows))}'
                   for k in keys)
  return (f'warning: these runs differ in {" and ".join(keys)} ({what}); their accuracies '
          'are not one ranking (the table shows each)')


def markdown(rows) -> str:
  """The comparison as a markdown table (accuracy in %, mean +- std [95% t-interval] over
  seeds; one seed: its value), after a line saying what the cells are; a dataset, model or
  rounds column where the rows differ in it, and the warning line then."""
  extra = differing(rows)
  lines = ['Test accuracy (%): final = at the last round, best = the highest over the '
           'evaluations; mean ± std (ddof=0) [95% t-interval of the mean, clipped to [0, 100]; '
           'uninformative where it spans all of it] over the seeds that did not diverge (one '
           'seed: its value). Grid points are listed, not selected.', '']
  if extra:
    lines[-1:] = ['', warning(rows), '']
  sent = any(not np.isnan(r.get('sent_mb_mean', np.nan)) for r in rows)
  heads = ['run directory', 'algorithm'] + [dict(SETTINGS)[k] for k in extra] + [
      'grid point', 'seeds', 'final accuracy (%)', 'best accuracy (%)'] + (
          ['uploaded (MB per run)'] if sent else [])
  lines += ['| ' + ' | '.join(heads) + ' |', '|' + '---|' * len(heads)]
  for r in rows:
    seeds = f'{r["seeds"]}' + (f' ({r["diverged"]} diverged)' if r['diverged'] else '')
    cells = [r['run_dir'] + (f' {MARK}' if r.get('warnings') else ''), r['algo']] + [
        str(r.get(k)) for k in extra] + [
        r['grid_point'], seeds, _pct(r, 'final_accuracy'), _pct(r, 'best_accuracy')] + (
            [_mb(r.get('sent_mb_mean', np.nan))] if sent else [])
    lines.append('| ' + ' | '.join(cells) + ' |')
  if any(r.get('warnings') for r in rows):
    lines += ['', LEGEND]
  return '\n'.join(lines) + '\n'


MARK = '⚠'
LEGEND = (f'{MARK}: a run of this row failed a sanity check (validation or test accuracy exactly '
          '0 or 1 at every evaluation, or a loss that never changes): see comparison.csv\'s '
          'warnings column and the run directory\'s summary.json warnings. Its numbers are '
          'shown, not refused.')


def _pct(row, key):
  mean, std = row[f'{key}_mean'], row[f'{key}_std']
  lo, hi = row[f'{key}_ci95_lo'], row[f'{key}_ci95_hi']
  if np.isnan(mean):
    return 'n/a'
  if row.get('seeds', 2) < 2:  # no spread to show: "± 0.00" would claim one
    return f'{100 * mean:.2f}'
  text = f'{100 * mean:.2f} ± {100 * std:.2f}'
  if np.isnan(lo):
    return text
  if stats.uninformative(lo, hi):  # clipped to all of [0, 1] (stats.clip_unit)
    return text + ' [0, 100]: uninformative'
  return text + f' [{100 * lo:.2f}, {100 * hi:.2f}]'


def _mb(value) -> str:
  return 'n/a' if np.isnan(value) else f'{value:.3g}'


def byte_curves(rows) -> dict:
  """{label: (megabytes sent by each evaluated round, mean, std)}: the curves with each round
  replaced by the mean over seeds of the bytes uploaded up to it, for the rows whose runs
  recorded upload_bytes (compressed uploads); {} when none did."""
  out = {}
  for r in rows:
    curve = _mean_curve(r)
    if curve is None or not any(i in r['_uploads'] for i in r['_runs']):
      continue
    label, rounds, mean, std = curve
    out[label] = ([float(np.mean([_sent_mb(r, i, t) for i in r['_runs']])) for t in rounds],
                  mean, std)
  return out


def _mean_curve(r):
  """(label, rounds, mean, std) of a groups() row: its test accuracy over the rounds that
  every one of its non-diverged seeds evaluated; None when none has a curve."""
  runs = [r['_curves'][i] for i in r['_runs'] if i in r['_curves']]
  if not runs:
    return None
  rounds = sorted(set.intersection(*(set(rounds) for rounds, _ in runs)))
  acc = np.array([[dict(zip(*run))[t] for t in rounds] for run in runs])
  label = f'{r["algo"]} [{r["run_dir"]}]'
  if r['grid_point'] != '-':
    label += f' {r["grid_point"]}'
  return label, rounds, acc.mean(0), acc.std(0)


def curves(rows) -> dict:
  """{label: (rounds, mean, std)}: each group's test accuracy over the rounds that every
  one of its non-diverged seeds evaluated."""
  return {c[0]: c[1:] for c in map(_mean_curve, rows) if c is not None}


def write(rows, out_dir, overwrite=False):
  """Writes OUTPUTS into out_dir; an existing one is replaced only with overwrite."""
  if os.path.exists(out_dir) and not os.path.isdir(out_dir):
    raise UserError(f'--out={out_dir} is a file, not a directory')
  existing = [n for n in OUTPUTS + (BYTES_PLOT,) if os.path.exists(os.path.join(out_dir, n))]
  if existing and not overwrite:
    raise UserError(f'{os.path.join(out_dir, existing[0])} exists; pass --overwrite to replace '
                    'it or choose another --out')
  try:
    os.makedirs(out_dir, exist_ok=True)
  except OSError as e:
    raise UserError(f'--out={out_dir}: cannot create it ({e.strerror or e})') from None
  report.atomic_write(os.path.join(out_dir, 'comparison.md'), markdown(rows).encode())
  buf = io.StringIO()
  fields = [k for k in rows[0] if not k.startswith('_')]
  writer = csv.DictWriter(buf, fieldnames=fields, lineterminator='\n', extrasaction='ignore')
  writer.writeheader()
  writer.writerows(rows)
  report.atomic_write(os.path.join(out_dir, 'comparison.csv'), buf.getvalue().encode())
  lines = curves(rows)
  title = f'{len(rows)} configurations from {len({r["run_dir"] for r in rows})} run directories'
  if lines:
    report.plot_mean_curves(os.path.join(out_dir, 'comparison.png'), lines, title)
  by_bytes, bytes_path = byte_curves(rows), os.path.join(out_dir, BYTES_PLOT)
  if by_bytes:
    report.plot_mean_curves(bytes_path, by_bytes, title,
                            xlabel='megabytes uploaded (mean over seeds)')
  elif os.path.exists(bytes_path):  # --overwrite: none of these runs sent compressed bytes
    os.remove(bytes_path)


def main(argv=None):
  """The command line; returns the exit code (2 with one line for a user mistake)."""
  parser = argparse.ArgumentParser(prog='fedjax-drift-compare', description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('run_dirs', nargs='+', metavar='RUN_DIR')
  parser.add_argument('--out', default='comparison', help='where the table and plot go')
  parser.add_argument('--overwrite', action='store_true',
                      help='replace comparison.{md,csv,png} in --out')
  args = parser.parse_args(argv)
  try:
    with interrupts.guard():  # a signal: one line; each output is whole or absent
      rows = groups([read_run_dir(d) for d in args.run_dirs])
      if not rows:
        raise UserError('the run directories list no runs (empty runs.csv)')
      write(rows, args.out, args.overwrite)
      if warning(rows):
        sys.stderr.write(warning(rows) + '\n')
  except UserError as e:
    sys.stderr.write(f'error: {e}\n')
    return 2
  except KeyboardInterrupt as e:
    interrupts.ignore()
    sys.stderr.write(f'error: {interrupts.what(interrupts.exit_code(e) - 128)}\n')
    return interrupts.exit_code(e)
  print(markdown(rows), end='')
  print(f'-> {os.path.join(args.out, "comparison.md")}, comparison.csv, comparison.png')
  return 0


if __name__ == '__main__':
  sys.exit(main())

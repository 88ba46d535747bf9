"""A paper's table as one program per method against the same table program by program.

    python benchmarks/table_program.py                          # fedfor_epochs' cpu tier
    python benchmarks/table_program.py --preset=all --rounds=1 --seeds=1 --reps=1 --jobs=2

Runs `experiments/presets.py PRESET --mode=cpu` twice per repetition, interleaved (grouped,
apart, grouped, apart ...): 'grouped' runs a method's scenarios that differ only in scenario
axes (E, alpha, shards, cohort size) as one sweep with those values as --grid axes (issue 46,
experiments/presetlib/grouping.py); 'apart' adds --no_group, one program per scenario and
method, as every commit before the grouping ran them. Each repetition starts from an empty
--out and an empty tool cache of its own ($FEDJAX_DRIFT_CACHE, the user's oneDNN build linked
in; $JAX_COMPILATION_CACHE_DIR unset): a user's first run, each command compiling its own
programs. Records each variant's wall time, its results.json program count, and whether
its tables equal the other's cell for cell (results.json rows but the run directories, and
table.md with the directory that a diverged method's note names as `runs/DIR` in both:
`same_tables`; `same_text` compares table.md whole). Writes
benchmarks/results/table-program-<preset>-<date>.json (or --out).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import interleave

ROOT = interleave.ROOT
VARIANTS = {'grouped': [], 'apart': ['--no_group']}
DIVERGED = 'Every run diverged, so no row:'  # table.md's note of a method with no row


def _tables(out):
  """(program count, rows, table.md text) of a presets.py --out: one preset's results.json
  and table.md in `out` itself, or `all`'s in each OUT/<preset>-cpu (programs summed, rows
  and texts by preset). The rows are results.json's scenario rows (_row)."""
  dirs = ([out] if os.path.isfile(os.path.join(out, 'results.json')) else
          [os.path.join(out, d) for d in sorted(os.listdir(out))
           if os.path.isfile(os.path.join(out, d, 'results.json'))])
  if not dirs:
    raise SystemExit(f'{out} holds no results.json')
  programs, rows, text = 0, {}, {}
  for d in dirs:
    with open(os.path.join(d, 'results.json')) as f:
      results = json.load(f)
    name = os.path.relpath(d, out)  # '.' for one preset
    with open(os.path.join(d, 'table.md')) as f:
      text[name] = f.read()
    programs += results['programs']
    rows[name] = {s: [_row(r) for r in rs] for s, rs in results['scenarios'].items()}
  return programs, rows, '\n'.join(text[k] for k in sorted(text))


def _row(row):
  """A results.json row without what names a directory: its config's out, and shared_runs
  (the run directory of another preset's sweep with the same settings, whose runs it read:
  grouped, a group's directory; apart, a scenario's)."""
  return {k: ({c: v for c, v in val.items() if c != 'out'} if k == 'config' else val)
          for k, val in row.items() if k != 'shared_runs'}


def _fresh_cache(path):
  """An empty tool cache at `path` (a user's first run: every program compiles, and each
  command shares its own compilations), keeping the built oneDNN extension of the user's."""
  shutil.rmtree(path, ignore_errors=True)
  os.makedirs(path)
  built = os.path.join(os.environ.get('FEDJAX_DRIFT_CACHE')
                       or os.path.expanduser('~/.cache/fedjax_drift'), 'onednn')
  if os.path.isdir(built):
    os.symlink(built, os.path.join(path, 'onednn'))
  return path


def one(args, variant, workdir):
  """One presets.py command of `variant` into a fresh directory: {'wall_s', 'programs',
  'rows', 'table'}. SystemExit with the stderr's tail when it fails."""
  out = os.path.join(workdir, variant)
  shutil.rmtree(out, ignore_errors=True)
  command = [sys.executable, os.path.join(ROOT, 'experiments', 'presets.py'), args.preset,
             '--mode=cpu', f'--out={out}', f'--jobs={args.jobs}'] + VARIANTS[variant]
  command += [f'--{k}={v}' for k in ('rounds', 'seeds', 'only') if (v := getattr(args, k))]
  env = {k: v for k, v in os.environ.items() if k != 'JAX_COMPILATION_CACHE_DIR'}
  env['FEDJAX_DRIFT_CACHE'] = _fresh_cache(os.path.join(workdir, f'{variant}-cache'))
  start = time.perf_counter()
  proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=workdir)
  wall = time.perf_counter() - start
  print(f'{variant}: {wall:.0f} s', flush=True)  # kept even if reading its tables fails
  if proc.returncode:
    raise SystemExit(f'{variant} failed ({proc.returncode}): {proc.stderr[-2000:]}')
  programs, rows, table = _tables(out)
  return {'wall_s': wall, 'programs': programs, 'rows': rows, 'table': table}


def _cells(table):
  """table.md with the run directory in each 'Every run diverged, so no row: METHOD @
  SCENARIO: NOTE' line replaced by runs/DIR: the note names the group's directory grouped
  and the scenario's own apart, and is otherwise the same (its runs' first diverged round,
  the checkpoint from before it)."""
  cut = lambda line: re.sub(r'runs/[^/\s;]+', 'runs/DIR', line) if line.startswith(DIVERGED) \
      else line
  return '\n'.join(cut(line) for line in table.split('\n'))


def differences(grouped, apart, most=20) -> list:
  """Where two variants' tables differ (at most `most`): 'PRESET/SCENARIO/METHOD: KEYS' for
  each results.json row that differs, and '-LINE'/'+LINE' (apart's, grouped's) for table.md lines
  that differ after _cells; [] when the tables are the same."""
  out, by_method = [], lambda rows: {r['method']: r for r in rows}
  for preset in sorted(set(grouped['rows']) | set(apart['rows'])):
    g, a = grouped['rows'].get(preset, {}), apart['rows'].get(preset, {})
    for scenario in sorted(set(g) | set(a)):
      mg, ma = by_method(g.get(scenario, [])), by_method(a.get(scenario, []))
      for m in sorted(set(mg) | set(ma)):
        rg, ra = mg.get(m, {}), ma.get(m, {})
        keys = sorted(k for k in set(rg) | set(ra) if rg.get(k) != ra.get(k))
        out += [f'{preset}/{scenario}/{m}: {",".join(keys)}'] if keys else []
  lines_g, lines_a = _cells(grouped['table']).split('\n'), _cells(apart['table']).split('\n')
  out += [f'-{line}' for line in lines_a if line not in lines_g]
  out += [f'+{line}' for line in lines_g if line not in lines_a]
  return out[:most]


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--preset', default='fedfor_epochs', help="a preset's name, or all")
  parser.add_argument('--rounds', type=int, default=0, help='override the rounds (0: the tier)')
  parser.add_argument('--seeds', type=int, default=0, help='override the seeds (0: the tier)')
  parser.add_argument('--only', default='', help="presets.py's --only: method labels")
  parser.add_argument('--jobs', type=int, default=1, help="presets.py's --jobs")
  interleave.add_flags(parser, reps=2, result='table-program-<preset>')
  args = parser.parse_args(argv)
  workdir = tempfile.mkdtemp(prefix='table-program-')
  log = lambda v, r, res: print(f'rep {r} {v}: {res["wall_s"]:.0f} s, {res["programs"]} '
                                'programs', flush=True)
  reps = interleave.repeat(list(VARIANTS), args.reps, lambda v, _: one(args, v, workdir), log)
  pairs = list(zip(reps['grouped'], reps['apart']))
  found = [differences(g, a) for g, a in pairs]
  same = not any(found)
  if same:
    shutil.rmtree(workdir, ignore_errors=True)
  else:  # kept to look at: the last repetition's directories
    print(f'the tables differ; the last repetition is kept in {workdir}:\n  '
          + '\n  '.join(next(f for f in found if f)), flush=True)
  result = {'preset': args.preset, 'mode': 'cpu', 'only': args.only or 'every method', 'rounds': args.rounds or 'the tier',
            'seeds': args.seeds or 'the tier', 'jobs': args.jobs,
            'commit': interleave.commit(ROOT), 'load_at_start': os.getloadavg()[0],
            'same_tables': same, 'differences': next((f for f in found if f), []),
            'same_text': all(g['table'] == a['table'] for g, a in pairs),
            **{v: {'programs': rs[0]['programs'], 'wall_s': [r['wall_s'] for r in rs],
                   'median_s': statistics.median(r['wall_s'] for r in rs)}
               for v, rs in reps.items()}}
  result['speedup'] = result['apart']['median_s'] / result['grouped']['median_s']
  for v in VARIANTS:
    print(f'{v:>8}: {result[v]["programs"]} programs, median {result[v]["median_s"]:.0f} s '
          f'(runs {", ".join(f"{s:.0f}" for s in result[v]["wall_s"])})')
  print(f'apart / grouped: {result["speedup"]:.2f}x; tables the same cell for cell: {same}')
  name = f'table-program-{args.preset}'
  print(interleave.write(args, name, result))


if __name__ == '__main__':
  main()

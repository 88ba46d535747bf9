"""Builds experiments/RESULTS.md from the committed results in experiments/results/.

    python experiments/collect_results.py            # rewrite experiments/RESULTS.md
    python experiments/collect_results.py --check    # exit 1 if RESULTS.md differs

Each results directory experiments/results/<preset>-<tier>/ holds what one run of
`experiments/presets.py <preset> --mode=<tier>` wrote (results.json: every method's chosen
grid point, its statistics over the seeds and the per-seed values they come from; runs/: each
method's config.json, runs.csv and metrics.csv, no checkpoints) and provenance.json (commit, command,
wall time, machine, written by whoever ran it). The tables are made by the same code as the
runner's (fedjax_drift/tables.py: selection, mean and 95% t-interval, paired differences to
FedAvg and the paper's method), so RESULTS.md is a function of these files alone; a test
(tests/test_collect_results.py) holds it to that.
"""
import argparse
import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(ROOT))

from fedjax_drift import tables  # noqa: E402

RESULTS = os.path.join(ROOT, 'results')
OUT = os.path.join(ROOT, 'RESULTS.md')
PAPER_ORDER = ('FedADC', 'FedFOR', 'FedGKD', 'IGFL')  # sections in the papers' order
LEFT_OUT = 'not in the cpu tier'  # presets.plan's reason for a run the tier leaves out

HEAD = """# Results

Every table below was produced by `experiments/presets.py` on the code of the commit it names,
and this file is rebuilt from the committed raw results (`experiments/results/<preset>-<tier>/`)
by `python experiments/collect_results.py`; a test checks that it is. Nothing here is carried
over from earlier code: the tables of earlier sessions (the old short mode, run before this
code's corrections) were removed, and stay in the git history.

**Tier.** All tables here are of the `cpu` tier (`--mode=cpu`): each paper's methods,
partition, clients per round, local work and full tuning grids, on the embedded 6,000-image
Fashion-MNIST subset with logistic regression (a 2x200 MLP with BatchNorm where the paper's
model has BatchNorm), at most 20 rounds, 3 seeds. They test the papers' *orderings* on a small
problem, not their numbers: a linear model on Fashion-MNIST is far from a CNN or ResNet on
CIFAR. The `short` and `full` tiers (the papers' data and models) are for accelerators and
have not been run here (see `experiments/PRESETS.md` for their estimated cost).

**How to read a table.** Each method's grid point is selected on a validation split (10% of
each client's training examples) unless the table says "test"; the cells are test accuracy
of the selected point (of the global model, unless the table says otherwise:
`fedadc_personalize` reports its clients' personalised accuracy): mean [95% t-interval] over
the seeds, for final (last evaluation), best (best evaluation), best by half budget (best up
to half the rounds), last-10% (mean of the evaluations in the last 10% of rounds) and at best
validation (test accuracy at the evaluation with the best validation accuracy). The preset's
reported metric (named above each table) ranks the rows; rows and grid points that lost seeds
to divergence (their seed count says how many) come after those that kept all, since a mean
over the survivors flatters them. Paired differences compare
each method with FedAvg and with the paper's own method over the same seeds (same partition,
validation split and initial model); "within noise" means the interval contains 0.

**Repeated runs.** The cpu tier maps CIFAR-10, CIFAR-100, Tiny-ImageNet and EMNIST to the
same embedded data and model, so presets (or scenarios) that differ only in the paper's
dataset run identical configurations: `fedgkd_dirichlet`, `fedgkd_cifar100` and `fedgkd_tiny`
share most runs, as do `fedgkd_buffer`'s and `fedgkd_loss`'s CIFAR-10 and CIFAR-100 scenarios
and `igfl_emnist` with `igfl`'s cross-device runs. Their agreement is one result, not several.
`experiments/presets.py` runs each distinct configuration once per command and shares its runs
among the tables that use them (`experiments/presetlib/sharing.py`: a later table's run
directory links to the first's, and its row in results.json names it as `shared_runs`); the
tables are the same cell for cell as with every sweep run on its own (`--no_share`).

**Wall times** are the runner's own (`provenance.json`, written by `experiments/presets.py`
with the commit and command), with the machine's load average at the start and end. The end
value counts the runner's own threads (about 3-4 with `--jobs=2` on 2 cores); the start value
shows whether other work was already running. Where others shared the machine, the times are
upper bounds and the provenance says so in a note.

**FedFOR.** In `fedfor_epochs` and `fedfor_alpha` the row `fedfor` is the default reading of
eq. 7 (`--for_scale=per_step`, c = α/(η H_i)) and "fedfor (eq. 7 as printed)" is c = α/η. The
cpu tier keeps the paper's batch of 128 on clients of ~150 examples, so a client takes 1-2
steps an epoch (the paper's take ~10): per step α/H_i is 2.5-5 times the last global move and
`per_step` overshoots at E = 1 and 2 as the printed scale does everywhere. The study at the end
("FedFOR's readings of eqs. 6-7") measures every reading at ~10 steps an epoch, as in the paper.
"""


def _load(directory):
  with open(os.path.join(directory, 'results.json')) as f:
    results = json.load(f)
  prov = os.path.join(directory, 'provenance.json')
  with open(prov) as f:
    return results, json.load(f)


def shared_runs_line(found):
  """How many of the method sweeps behind the tables ran, and how many read another's runs
  (results.json's shared_sweeps; results written before the runner shared runs have none)."""
  sweeps = sum(len(rows) for r in found for rows in r['scenarios'].values()) + sum(
      len(r.get('diverged', [])) for r in found)
  shared = sum(r.get('shared_sweeps', 0) for r in found)
  if not any('shared_sweeps' in r for r in found):
    return (f'\n**Shared runs.** The results here were run before runs were shared: each of '
            f'their {sweeps} method sweeps ran on its own.\n')
  return (f'\n**Shared runs.** Of the {sweeps} method sweeps behind these tables, '
          f'{sweeps - shared} ran and {shared} read the runs of an earlier sweep with the same '
          'configuration.\n')


def _order(item):
  results, _ = item
  paper = next((i for i, p in enumerate(PAPER_ORDER) if results['paper'].startswith(p)),
               len(PAPER_ORDER))
  return paper, results['preset']


def section(directory, results, prov):
  """One preset's section: what ran (tier, date, commit, command, wall time), then its tables."""
  rel = os.path.relpath(directory, ROOT)
  lines = [f'## `{results["preset"]}` ({results["mode"]} tier): {results["title"]}', '',
           f'Paper: {results["paper"]}. Tier `{results["mode"]}`, run {results["date"]} on '
           f'commit `{prov["commit"]}`'
           f'{"" if prov.get("checkout", "clean") == "clean" else " plus uncommitted changes"}'
           f'. Command: '
           f'`{prov["command"]}`. Reported metric: '
           f'{tables.HEADERS.get(results["metric"], results["metric"])}. {_timing(prov)} '
           f'Raw results: [{rel}/]({rel}/).', '']
  table = tables.markdown(results)
  lines.append(table.split('\n', 1)[1].lstrip('\n'))  # the section title replaces its heading
  lines += [f'Every run diverged, so no row: {d} (checkpoints are not committed)\n'
            for d in results.get('diverged', [])]
  plots = sorted(os.path.basename(p) for p in glob.glob(os.path.join(directory, '*.png')))
  if plots:
    lines.append('Plots: ' + ', '.join(f'[{p}]({rel}/{p})' for p in plots) + '\n')
  return '\n'.join(lines)


def _timing(prov):
  """When the preset finished, in a command that may have run several presets at once (or
  was stopped before it ran them all)."""
  minutes = lambda key: f'{prov[key] / 60:.1f} min'
  if prov.get('stopped'):
    whole = (f'The command ({prov["presets_in_command"]} presets, {prov["jobs"]} methods at a '
             f'time) was stopped after {minutes("wall_s")} of running; this one finished '
             f'{minutes("finished_after_s")} into it')
  elif prov.get('presets_in_command', 1) > 1:
    whole = (f'The command ran {prov["presets_in_command"]} presets, {prov["jobs"]} method(s) '
             f'at a time, in {minutes("wall_s")}; this one finished '
             f'{minutes("finished_after_s")} into it')
  else:
    whole = f'Wall time {minutes("wall_s")}'
  note = f' {prov["note"]}' if prov.get('note') else ''
  return (f'{whole}, on a {prov["machine"]} (load average {prov["load_start"]} at the start, '
          f'{prov["load_end"]} at the end).{note}')


def not_here(ran):
  """The cpu tier's presets without a table here, one line each: left out, or not run."""
  sys.path.insert(0, ROOT)
  import presets  # pylint: disable=g-import-not-at-top
  lines = []
  for name in presets.PRESETS:
    if name in ran:
      continue
    reasons = sorted({r for *_, rs in presets.plan(name, 'cpu') for r in rs})
    out = [r.split(': ', 1)[1] for r in reasons if r.startswith(LEFT_OUT)]
    live = presets.configs(name, 'cpu')
    why = (f'{LEFT_OUT}: ' + '; '.join(out) if out and not live else
           'pending in this build: ' + '; '.join(reasons) if not live else
           'not run yet (the session ran out of time; it runs with '
           f'`python experiments/presets.py {name} --mode=cpu`)')
    lines.append(f'- `{name}`: {why}')
  return ('## Presets without a table here\n\n' + '\n'.join(lines) + '\n') if lines else ''


def studies():
  """The studies run beside the presets (experiments/results/studies/<name>/study.md, each
  written by the benchmark that ran it, with its commit, command and raw results)."""
  texts = []
  for path in sorted(glob.glob(os.path.join(RESULTS, 'studies', '*', 'study.md'))):
    rel = os.path.relpath(os.path.dirname(path), ROOT)
    with open(path) as f:
      texts.append(f.read().rstrip('\n') + f'\n\nRaw results: [{rel}/]({rel}/).\n')
  return '\n'.join(texts)


def build():
  """The text of RESULTS.md from experiments/results/*/results.json and provenance.json, and
  the studies beside the presets (studies())."""
  found = [(_load(d), d) for d in sorted(glob.glob(os.path.join(RESULTS, '*')))
           if os.path.exists(os.path.join(d, 'results.json'))]
  found.sort(key=lambda x: _order(x[0]))
  parts = [HEAD + shared_runs_line([results for (results, _), _ in found])]
  parts += [section(d, results, prov) for (results, prov), d in found]
  parts.append(studies())
  parts.append(not_here({results['preset'] for (results, _), _ in found}))
  return '\n'.join(parts)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--check', action='store_true',
                      help='exit 1 if experiments/RESULTS.md is not what the results build')
  args = parser.parse_args()
  text = build()
  if args.check:
    with open(OUT) as f:
      same = f.read() == text
    print('RESULTS.md is current' if same else 'RESULTS.md differs from the results: rebuild it')
    return 0 if same else 1
  with open(OUT, 'w') as f:
    f.write(text)
  print(f'wrote {OUT}')
  return 0


if __name__ == '__main__':
  sys.exit(main())

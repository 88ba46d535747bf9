"""Collects experiments/results/*/table.md into experiments/RESULTS.md.

    python experiments/collect_results.py [--notes=experiments/results/NOTES.md]

The notes file (hand-written: how each ordering compares with the paper) is placed first;
other hand-written sections (experiments/results/*.md) come after the preset tables.
"""
import argparse
import glob
import os

ROOT = os.path.dirname(os.path.abspath(__file__))


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--notes', default=os.path.join(ROOT, 'results', 'NOTES.md'))
  args = parser.parse_args()
  parts = ['# Results\n',
           'Tables produced by `experiments/presets.py` on this project\'s CI-class machine '
           '(2 CPU cores, no GPU). Regenerate any of them with the command printed above it; '
           'this file is rebuilt by `python experiments/collect_results.py`.\n']
  if os.path.exists(args.notes):
    parts.append(open(args.notes).read())
  for path in sorted(glob.glob(os.path.join(ROOT, 'results', '*', 'table.md'))):
    parts.append(open(path).read())
    rel = os.path.relpath(os.path.dirname(path), ROOT)
    plots = sorted(os.path.basename(p) for p in glob.glob(os.path.join(os.path.dirname(path),
                                                                       '*.png')))
    if plots:
      parts.append('Plots: ' + ', '.join(f'[{p}]({rel}/{p})' for p in plots) + '\n')
  for path in sorted(glob.glob(os.path.join(ROOT, 'results', '*.md'))):
    if os.path.abspath(path) != os.path.abspath(args.notes):
      parts.append(open(path).read())
  with open(os.path.join(ROOT, 'RESULTS.md'), 'w') as f:
    f.write('\n'.join(parts))
  print(f'wrote {os.path.join(ROOT, "RESULTS.md")}')


if __name__ == '__main__':
  main()

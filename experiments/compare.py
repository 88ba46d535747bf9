"""Compare run directories: `python experiments/compare.py RUN_DIR... [--out=DIR]`.

One table (markdown + csv: per run directory and grid point, final and best test accuracy,
mean +- std over seeds, number of seeds) and one accuracy plot with the seeds' spread; see
fedjax_drift/compare.py (also installed as `fedjax-drift-compare`).
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from fedjax_drift import compare  # noqa: E402  pylint: disable=g-import-not-at-top

if __name__ == '__main__':
  sys.exit(compare.main())

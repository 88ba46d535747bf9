"""The library behind experiments/presets.py, one module per part, each importing only those
before it:

  loading     the tables experiments/presets/*.toml -> PRESETS, EXPERIMENTS
  tiers       the modes (full, short, cpu): one method's Config values in one scenario
  plans       a preset's runs, what this build lacks for each (pending), their Configs
  estimates   how much work a mode is (from FLOPs)
  jobs        one method's runs as a job; Runner runs jobs here or in --jobs workers
  cluster     ClusterRunner: the jobs as SLURM jobs through submitit (--executor=slurm)
  documents   settings tables, the experiments table, experiments/PRESETS.md
  running     a preset's jobs submitted, then results.json, table.md and the curves
  provenance  OUT/provenance.json

It lives beside the tables it reads, not in fedjax_drift: the registry is the repository's
experiments/presets/*.toml, and the documents and results it writes are the repository's.
Import it with experiments/ on sys.path (experiments/presets.py re-exports its names).
"""

"""OUT/provenance.json: the commit, the command, wall time, load and machine of a preset's run."""
import os
import platform
import shlex
import subprocess
import sys
import time

import jax

from fedjax_drift import report
from presetlib.cluster import read_job_files
from presetlib.loading import ROOT


def write_provenance(out_dir, started, after_s, load_start, n_presets, jobs):
  """OUT/provenance.json: the commit (with whether the checkout had changes), the command,
  when this preset finished into it and the whole command's wall time, load averages and
  the machine; experiments/collect_results.py prints them above the preset's tables. A
  preset run by a cluster executor adds `jobs`: each job's host, machine, start, wall time,
  commit and job id (OUT/jobs/*.json, presetlib.cluster)."""
  jobs = read_job_files(out_dir)
  def git(*a):
    try:
      return subprocess.run(['git', '-C', ROOT, *a], capture_output=True, text=True,
                            timeout=30).stdout.strip()
    except OSError:
      return ''
  changed = git('status', '--porcelain', '--untracked-files=no')
  report.write_json(os.path.join(out_dir, 'provenance.json'), {
      'commit': git('rev-parse', '--short', 'HEAD') or 'unknown',
      'checkout': 'with uncommitted changes' if changed else 'clean',
      'command': shlex.join(['python', 'experiments/presets.py', *sys.argv[1:]]),
      'presets_in_command': n_presets, 'jobs': jobs,
      'finished_after_s': round(after_s), 'wall_s': round(time.time() - started),
      'load_start': round(load_start, 2), 'load_end': round(os.getloadavg()[0], 2),
      'machine': f'{os.cpu_count()}-core {platform.machine()} CPU, '
                 f'{"no GPU" if jax_backend() == "cpu" else jax_backend()}',
      'started_utc': time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(started)),
      'finished_utc': time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime()),
      **({'jobs': jobs} if jobs else {})})


def jax_backend():
  """JAX's default backend ('cpu', 'gpu', ...), for the machine's line."""
  return jax.default_backend()

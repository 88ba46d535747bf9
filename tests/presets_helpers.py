"""What the tests of experiments/presets.py as a command share: the script, its tiny preset
(FedADC in two scenarios on the cpu tier, one seed), the tables of an uninterrupted run to
compare with, results.json's rows without paths, and what the run and job files say."""
import glob
import json
import os
import sys

import fedjax_drift

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'experiments'))  # presets.py imports presetlib by name
import presets  # noqa: E402  pylint: disable=wrong-import-position

SCRIPT = os.path.join(ROOT, 'experiments', 'presets.py')
PRESET = 'fedadc_cohort'


def tiny(rounds):
  """The command line of the tiny preset with `rounds` rounds (a checkpoint every 3)."""
  return [PRESET, '--mode=cpu', f'--rounds={rounds}', '--seeds=1']


def reference(out_root, rounds):
  """results.json of the tiny preset run here, uninterrupted, into out_root."""
  return presets.run_preset(PRESET, 'cpu', rounds=rounds, seeds=1, out_root=str(out_root),
                            log=lambda *_: None)


def scenarios(results):
  """results.json's rows without the run directories' paths (as JSON: tuples are lists)."""
  results = json.loads(json.dumps(results))
  return {s: [{k: ({c: v for c, v in val.items() if c != 'out'} if k == 'config' else val)
               for k, val in r.items()} for r in rows]
          for s, rows in results['scenarios'].items()}


def differences(a, b):
  """What differs between two scenarios() (for an assertion's message)."""
  return [(s, i, k, ra[k], rb.get(k)) for s in a for i, (ra, rb) in enumerate(zip(a[s], b[s]))
          for k in ra if ra[k] != rb.get(k)]


def run_ids(out):
  """{run directory: its record's run id} of every run directory under out/runs."""
  ids = {}
  for d in glob.glob(os.path.join(out, 'runs', '*')):
    record = fedjax_drift.rundir.Record.load(d)
    if record is not None:
      ids[d] = record.run_id
  return ids


def job_record(out, sweep):
  """out/jobs/<sweep>.json, which a cluster job writes (None before it is, or while it is
  being replaced)."""
  try:
    with open(os.path.join(out, 'jobs', f'{sweep}.json')) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None

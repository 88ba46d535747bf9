"""The README's first run, measured: `python experiments/run.py` with its defaults, end to end.

    python benchmarks/first_run.py --reps=2

Runs the default command --reps times, one process each, and writes
benchmarks/results/first-run-<date>.json with, per repetition, the final and best test
accuracy, the first round reaching --target_accuracy (70%), the process wall time, the
compile and training times from summary.json, and the peak RSS of the run's process. The
README's first-run paragraph quotes the newest such file, and tests/test_readme.py holds it
to that file.

What is not training, in the same record: `first_line_s` (start-up: the command to the first
line, mostly imports), `setup_s` (the first line to the run's start-up ending: data, the
initial models and the run directory, less compilation), `outputs_s` (after training: the
summaries, plots and parameters, to the process's end), so that wall_s = first_line_s +
setup_s + compile_s + train_s + outputs_s.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, 'benchmarks', 'results')
# The run in a process that reports its own peak RSS (ru_maxrss, KiB on Linux) as it exits.
CHILD = ('import atexit, resource, runpy, sys; '
         'atexit.register(lambda: print("PEAK_RSS_KB=%d" % resource.getrusage('
         'resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)); '
         'sys.argv = ["run.py"] + sys.argv[1:]; runpy.run_path({run!r}, run_name="__main__")')


def one_run(out, extra=()):
  """Runs the default command into `out` (`extra`: flags added to it); returns its
  measurements."""
  load = round(os.getloadavg()[0], 2)
  start = time.perf_counter()
  stamps = []  # (seconds since start, line) of the run's console lines (stdout)
  with tempfile.TemporaryFile('w+') as err:  # the progress bar: a file, never a full pipe
    child = subprocess.Popen([sys.executable, '-c', CHILD.format(run=os.path.join(
        ROOT, 'experiments', 'run.py')), f'--out={out}', '--compile_cache=off',  # a first run
                              *extra],
                             stdout=subprocess.PIPE, stderr=err, text=True,
                             env=dict(os.environ, PYTHONUNBUFFERED='1'))  # lines as printed
    for line in child.stdout:
      stamps.append((time.perf_counter() - start, line))
    if child.wait():
      err.seek(0)
      raise subprocess.CalledProcessError(child.returncode, child.args, stderr=err.read()[-3000:])
    wall = time.perf_counter() - start
    err.seek(0)
    peak = int(err.read().rsplit('PEAK_RSS_KB=', 1)[1].split()[0])
  with open(os.path.join(out, 'summary.json')) as f:
    summary = json.load(f)
  first_line = stamps[0][0]
  # The second line opens the run's header, printed once compiled, before the first round.
  header = stamps[1][0]
  setup = header - first_line - summary['compile_s']
  outputs = wall - header - summary['train_time_s']
  return {'final_accuracy': summary['final_accuracy'], 'best_accuracy': summary['best_accuracy'],
          'rounds_to_target': summary['rounds_to_target'],
          'target_accuracy': summary.get('target_accuracy', 0.7),
          'wall_s': round(wall, 1), 'compile_s': round(summary['compile_s'], 1),
          'train_s': round(summary['train_time_s'], 1),
          'first_line_s': round(first_line, 1), 'setup_s': round(setup, 1),
          'outputs_s': round(outputs, 1),
          'peak_rss_gb': round(peak / 2**20, 2), 'load_avg_1min_at_start': load}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--reps', type=int, default=2)
  args = parser.parse_args(argv)
  reps = []
  with tempfile.TemporaryDirectory() as tmp:
    for r in range(args.reps):
      reps.append(one_run(os.path.join(tmp, f'rep{r}')))
      print(json.dumps(reps[-1]), flush=True)
  commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip()
  import jax  # pylint: disable=g-import-not-at-top
  record = {'command': 'python experiments/run.py', 'date': datetime.date.today().isoformat(),
            'commit': commit, 'jax': jax.__version__, 'host': platform.processor() or
            platform.machine(), 'cpus': os.cpu_count(),
            'repetitions': reps}
  os.makedirs(RESULTS, exist_ok=True)
  path = os.path.join(RESULTS, f'first-run-{record["date"]}.json')
  with open(path, 'w') as f:
    json.dump(record, f, indent=1)
  print(path)


if __name__ == '__main__':
  main()

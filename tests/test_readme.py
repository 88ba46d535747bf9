"""Every command in README.md and in the docs/*.md pages runs: fenced shell blocks, inline
`python ...`, `fedjax-drift ...` and `fedjax-drift-data ...` commands and the Python examples,
each shrunk to about one round and writing into a temporary directory.

The commands are parsed from the pages, not copied here, so the pages cannot drift: a new
command is tested as soon as it is written. Placeholders (DIR, RUN_DIR, NAME, DATE) stand for
a temporary path, synthetic downloads (tests/fixtures.py) or the first preset. Datasets that
need files are imported from those synthetic downloads into a temporary cache first.

The README is a front page: short, linking every docs page. docs/package_map.md maps the package,
one line per module, the lines being the modules' docstrings (`python tests/test_readme.py`
prints the map as it must be); it is off the front page so that a new module costs it no line.
Every relative link of the pages points at a file, and at a heading where it names one.
"""
import ast
import glob
import importlib
import os
import re
import shlex
import subprocess
import sys

import pytest

import fixtures
import layouts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, 'README.md')
PACKAGE_MAP = 'docs/package_map.md'
PACKAGE = 'fedjax_drift'
README_MAX_LINES = 220
FENCE = re.compile(r'^```(\w*)[^\n]*\n(.*?)^```', re.M | re.S)
INLINE = re.compile(r'`((?:python|fedjax-drift-data|fedjax-drift) [^`]+)`')
SHELL = ('bash', 'sh', 'shell', 'console', '')
PLACEHOLDER = re.compile(r'\b(RUN_DIR|DIR|NAME|DATE)\b')
RUN_CLI = ('experiments/run.py', 'fedjax_drift.cli')  # `fedjax-drift` is python -m the latter
SHRINK = {  # script -> flags appended so that a command does about one round
    'experiments/run.py': ['--rounds=1', '--eval_every=1', '--progress=false'],
    'fedjax_drift.cli': ['--rounds=1', '--eval_every=1', '--progress=false'],
    'experiments/presets.py': ['--rounds=1', '--seeds=1'],
    'benchmarks/bench.py': ['--workloads=logreg_k100', '--rounds=1'],
    'benchmarks/scale.py': ['--quick'],  # tiny sizes over any size flag
    'benchmarks/host_state.py': ['--quick'],
    'benchmarks/step_ratio.py': ['--quick'],
    'benchmarks/plots.py': ['--reps=1'],
    'benchmarks/program_costs.py': ['--reps=1', '--preset=fedgkd_loss'],  # a small preset
    'benchmarks/table_program.py': ['--reps=1', '--rounds=1', '--seeds=1', '--only=fedavg'],
}


def pages():
  """README.md, then every docs/*.md page: paths relative to the repository root."""
  docs = glob.glob(os.path.join(ROOT, 'docs', '*.md'))
  return ['README.md'] + sorted(os.path.relpath(p, ROOT) for p in docs)


def _read(page):
  with open(os.path.join(ROOT, page), encoding='utf-8') as f:
    return f.read()


def _readme():
  return _read('README.md')


def _split_shell(block):
  """Shell text -> argv lists: continuations joined, comments dropped, split at &&."""
  commands = []
  for line in block.replace('\\\n', ' ').splitlines():
    words = shlex.split(line, comments=True)
    while words:
      cut = words.index('&&') if '&&' in words else len(words)
      commands.append(words[:cut])
      words = words[cut + 1:]
  return [c for c in commands if c]


def page_commands(text):
  """A page's text -> (kind, payload) in its order: ('shell', argv) or ('python', source)."""
  found = []
  for lang, body in FENCE.findall(text):
    if lang == 'python':
      found.append(('python', body))
    elif lang in SHELL:
      found += [('shell', argv) for argv in _split_shell(body)]
  for span in INLINE.findall(FENCE.sub('', text)):
    found += [('shell', argv) for argv in _split_shell(' '.join(span.split()))]
  return found


def readme_commands():
  """(page, kind, payload) of README.md and every docs page, page by page."""
  return [(page,) + command for page in pages() for command in page_commands(_read(page))]


def _id(item):
  page, kind, payload = item
  text = payload if kind == 'python' else ' '.join(payload)
  return f'{page}: ' + ' '.join(text.split())[:80]


COMMANDS = readme_commands()
# Pages whose Python a test of their own runs whole, unshrunk, as one program (running it
# here too, shrunk, repeated that run: 19 s of the slow command).
OWN_TEST = {'docs/new_method.md': 'tests/test_new_method.py',
            'docs/new_dataset.md': 'tests/test_new_dataset.py'}
# Commands for a lent GPU (a call that refuses a CPU by design): their own test runs the
# same script at tiny sizes on the CPU.
DEVICE_ONLY = {'benchmarks/gpu_check.py': 'tests/test_gpu_check.py'}
RUNNABLE = [c for c in COMMANDS
            if (c[1] == 'python' and c[0] not in OWN_TEST) or
            c[1] == 'shell' and c[2][0] not in ('pip',) and c[2][1:3] != ['-m', 'pytest']
            and not set(c[2]) & set(DEVICE_ONLY)]


def test_device_only_commands_have_their_own_test():
  """A device-only script shown on a page is run, --tiny on the CPU, by its own test."""
  shown = {a for c in COMMANDS if c[1] == 'shell' for a in c[2]}
  for script, test in DEVICE_ONLY.items():
    assert script in shown, f'{script} is no longer on any page: drop it from DEVICE_ONLY'
    assert '--tiny' in _read(test) and script in _read(test)


@pytest.fixture(scope='module')
def world(tmp_path_factory):
  """Synthetic downloads, a cache with them imported, and the environment for commands."""
  root = tmp_path_factory.mktemp('readme')
  downloads = root / 'downloads'
  fixtures.write_downloads(str(downloads))
  # The natural federated datasets' commands (docs/data.md) need 50 clients of their own.
  layouts.write_femnist_h5(str(downloads / 'femnist'), writers=60)
  layouts.write_shakespeare_leaf(str(downloads / 'shakespeare'), roles=60)
  env = dict(os.environ, FEDJAX_DRIFT_CACHE=str(root / 'cache'), PYTHONPATH=ROOT)
  from fedjax_drift.data import prepare  # pylint: disable=g-import-not-at-top
  old = os.environ.get('FEDJAX_DRIFT_CACHE')
  os.environ['FEDJAX_DRIFT_CACHE'] = env['FEDJAX_DRIFT_CACHE']
  try:
    prepare.import_dir(str(downloads))
  finally:
    if old is None:
      del os.environ['FEDJAX_DRIFT_CACHE']
    else:
      os.environ['FEDJAX_DRIFT_CACHE'] = old
  return {'root': root, 'downloads': str(downloads), 'env': env}


def _substitute(argv, values):
  return [PLACEHOLDER.sub(lambda m: values[m.group(1)], a) for a in argv]


def _first_preset():
  sys.path.insert(0, os.path.join(ROOT, 'experiments'))
  import presets  # pylint: disable=g-import-not-at-top
  return sorted(presets.PRESETS)[0]


def _prepare(argv, world, tmp_path):
  """A page's argv made runnable here: env prefix split off, placeholders filled, shrunk.
  Returns (env, argv, setup argv or None)."""
  env = dict(world['env'])
  while argv and re.fullmatch(r'[A-Z_]+=.*', argv[0]):
    key, _, value = argv[0].partition('=')
    env[key] = value
    argv = argv[1:]
  run_dir = str(tmp_path / 'run')
  values = {'RUN_DIR': run_dir, 'DIR': world['downloads'], 'DATE': 'readme-test',
            'NAME': _first_preset() if 'NAME' in ' '.join(argv) else 'NAME'}
  argv = _substitute(argv, values)
  if argv[0] == 'fedjax-drift-data':
    argv = [sys.executable, '-m', 'fedjax_drift.data.prepare'] + argv[1:]
  if argv[0] == 'fedjax-drift':
    argv = [sys.executable, '-m', 'fedjax_drift.cli'] + argv[1:]
  if argv[0] == 'python':
    argv = [sys.executable] + argv[1:]
  script = argv[1] if len(argv) > 1 else ''
  if script == '-m' and len(argv) > 2:  # python -m MODULE: the module is the script
    script = argv[2]
  setup = None
  if script in SHRINK:
    argv = argv + SHRINK[script]
  if script in RUN_CLI:
    if '--resume' in argv:  # something to resume: one round first, then one more
      setup = [a for a in argv if a != '--resume'] + [f'--out={run_dir}']
      argv = argv + ['--rounds=2']
    elif not any(a.startswith('--out=') for a in argv):
      argv = argv + [f'--out={run_dir}']
  if script in ('benchmarks/bench.py', 'benchmarks/scale.py', 'benchmarks/host_state.py',
                'benchmarks/step_ratio.py', 'benchmarks/plots.py',
                'benchmarks/program_costs.py', 'benchmarks/table_program.py'):
    argv = [a for a in argv if not a.startswith('--out=')] + [f'--out={tmp_path / "b.json"}']
  if script == 'experiments/presets.py':
    argv = argv + [f'--out={tmp_path / "presets"}']
  return env, argv, setup


def _check(result, argv):
  assert result.returncode == 0, f'{" ".join(argv)}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}'


def test_readme_has_commands():
  scripts = {c[2][1] for c in COMMANDS if c[1] == 'shell' and len(c[2]) > 1}
  assert 'experiments/run.py' in scripts
  assert any(c[1] == 'python' for c in COMMANDS)
  for _, kind, argv in COMMANDS:
    if kind == 'shell' and argv[0] == 'python' and argv[1].endswith('.py'):
      assert os.path.exists(os.path.join(ROOT, argv[1])), argv


def test_pages_left_to_their_own_test_are_run_there():
  """A page in OWN_TEST shows Python, and its test module runs that page (its PAGE)."""
  for page, test in OWN_TEST.items():
    assert any(p == page and kind == 'python' for p, kind, _ in COMMANDS), page
    module = importlib.import_module(os.path.basename(test)[:-len('.py')])
    assert module.PAGE.replace(os.sep, '/') == page, test
    assert module.test_the_page_runs_as_one_program.pytestmark, test  # slow: CI runs it


def test_readme_test_command_is_the_ci_command():
  """CI runs the README's test commands, in the README's order: the everyday one (`-m "not
  slow"`), then the slow tests it leaves out, so that together they are the whole suite."""
  tests = [argv for page, kind, argv in COMMANDS
           if page == 'README.md' and kind == 'shell' and argv[1:3] == ['-m', 'pytest']]
  assert tests, 'the README shows no test command'
  with open(os.path.join(ROOT, '.ci', 'run')) as f:
    ci = [shlex.split(line) for line in f if line.strip().startswith('python -m pytest')]
  assert ci == tests, (tests, ci)
  markers = [argv[argv.index('-m', 3) + 1] for argv in ci]
  assert markers == ['not slow', 'slow'], markers


def test_readme_run_commands_parse_and_validate():
  """Quick: every run.py (and fedjax-drift) command's flags parse and validate (the slow test
  runs them)."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  import fedjax_drift  # pylint: disable=g-import-not-at-top
  spec = importlib.util.spec_from_file_location('run_cli', os.path.join(ROOT, 'experiments',
                                                                         'run.py'))
  run = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(run)
  parser = run.build_parser(fedjax_drift.Config)
  checked = 0
  for _, kind, argv in COMMANDS:
    if argv[:1] == ['fedjax-drift']:
      argv = ['python', 'experiments/run.py'] + argv[1:]
    if kind != 'shell' or 'experiments/run.py' not in argv or {'--help', '--list'} & set(argv):
      continue
    args = _substitute(argv[argv.index('experiments/run.py') + 1:],
                       {'RUN_DIR': 'r', 'DIR': 'd', 'DATE': 'd', 'NAME': 'n'})
    run.check_flag_names(parser, args)
    config = fedjax_drift.Config(**vars(parser.parse_args(args)))
    config.validate()
    fedjax_drift.algorithms.recipe(config)
    checked += 1
  assert checked >= 10  # the pages were parsed


def _longest_first(item):
  """The whole cpu tier (`presets.py all`) is the suite's longest test: it is handed out first."""
  longest = item[1] != 'python' and item[2][1:3] == ['experiments/presets.py', 'all']
  return pytest.param(item, id=_id(item), marks=[pytest.mark.first] if longest else [])


@pytest.mark.slow
@pytest.mark.spread  # each command on its own: together they are a third of the suite's time
@pytest.mark.parametrize('item', [_longest_first(c) for c in RUNNABLE])
def test_readme_command_runs(item, world, tmp_path):
  _, kind, payload = item
  if kind == 'python':
    _run_python_example(payload, world, tmp_path)
    return
  if payload[1:2] == ['benchmarks/bench.py']:
    pytest.importorskip('torch', reason='the benchmark needs pip install ".[bench]"')
  env, argv, setup = _prepare(list(payload), world, tmp_path)
  if argv[1:2] == ['experiments/presets.py']:
    help_text = subprocess.run(argv[:2] + ['--help'], capture_output=True, text=True,
                               cwd=ROOT, env=env).stdout
    if '--out' not in help_text:
      pytest.skip('experiments/presets.py has no --out yet: it would write into the repository')
  for command in ([setup] if setup else []) + [argv]:
    # The whole cpu tier at one round (`presets.py all`) is the longest command: under a
    # parallel suite on 2 cores it took over 20 min.
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env,
                            timeout=3000)
    _check(result, command)


def _run_python_example(source, world, tmp_path):
  """A page's Python, with every Config shrunk to one round in tmp_path."""
  prelude = (
      'import fedjax_drift\n'
      '_Config = fedjax_drift.Config\n'
      'def _small(**kw):\n'
      f'  kw.update(rounds=1, eval_every=1, progress=False, out={str(tmp_path / "py")!r})\n'
      '  return _Config(**kw)\n'
      'fedjax_drift.Config = _small\n')
  result = subprocess.run([sys.executable, '-c', prelude + source], capture_output=True,
                          text=True, cwd=ROOT, env=world['env'], timeout=1200)
  _check(result, ['python', '-c', source])


def test_nothing_points_outside_the_repository():
  """No file may point into a sibling folder that a clone of this repository lacks."""
  skip_dirs = {'.git', '.ci-venv', 'runs', '__pycache__', '.pytest_cache'}
  needle = '../' + 'shared'
  offenders = []
  for dirpath, dirs, files in os.walk(ROOT):
    dirs[:] = [d for d in dirs if d not in skip_dirs and not d.endswith('.egg-info')]
    for name in files:
      if name.endswith(('.py', '.md', '.toml', '.txt', '.json', '.cfg', '.sh')) or name == 'run':
        with open(os.path.join(dirpath, name), encoding='utf-8', errors='replace') as f:
          if needle in f.read():
            offenders.append(os.path.relpath(os.path.join(dirpath, name), ROOT))
  assert not offenders, offenders


def test_first_run_figures_are_the_newest_measurement():
  """The README's first-run paragraph quotes benchmarks/results/first-run-*.json (newest):
  accuracies, the round reaching 70%, and the ranges of wall, compile and training time."""
  import glob  # pylint: disable=g-import-not-at-top
  import json  # pylint: disable=g-import-not-at-top
  newest = sorted(glob.glob(os.path.join(ROOT, 'benchmarks', 'results', 'first-run-*.json')))[-1]
  with open(newest) as f:
    reps = json.load(f)['repetitions']
  text = ' '.join(_readme().split())
  assert os.path.basename(newest) in text
  m = re.search(r'reached ([\d.]+)% final test accuracy \(best ([\d.]+)%\), first reaching '
                r'70% at round (\d+)', text)
  assert m, 'first-run sentence not found'
  for rep in reps:
    assert f'{100 * rep["final_accuracy"]:.1f}' == m.group(1)
    assert f'{100 * rep["best_accuracy"]:.1f}' == m.group(2)
    assert rep['rounds_to_target'] == int(m.group(3))

  def span(key, digits):
    values = [round(r[key], digits) for r in reps]
    lo, hi = (f'{v:.{digits}f}' for v in (min(values), max(values)))
    return lo if lo == hi else f'{lo}-{hi}'
  assert f'It took {span("wall_s", 0)} s of wall time' in text
  assert f'{span("compile_s", 1)} s of compilation and {span("train_s", 0)} s of training' in text
  assert f'Peak RSS was {max(r["peak_rss_gb"] for r in reps):.1f} GB' in text


def module_summary(path):
  """A module file -> its docstring's first sentence as written: the lines of its first
  paragraph up to the first that ends with a full stop, joined into one line ('' if none)."""
  with open(path, encoding='utf-8') as f:
    doc = ast.get_docstring(ast.parse(f.read())) or ''
  kept = []
  for line in doc.split('\n\n')[0].splitlines():
    kept.append(line.strip())
    if line.rstrip().endswith('.'):
      break
  return ' '.join(kept)


def package_map():
  """The package map (docs/package_map.md) as it must be: one line per module file of the
  package, in path order; a subpackage by its __init__.py, shown as its folder; an empty
  __init__.py is left out (the folder's modules are listed). Links are relative to docs/."""
  lines = []
  for path in glob.glob(os.path.join(ROOT, PACKAGE, '**', '*.py'), recursive=True):
    rel = os.path.relpath(path, ROOT).replace(os.sep, '/')
    if os.path.basename(path) == '__init__.py':
      with open(path, encoding='utf-8') as f:
        if not f.read().strip():
          continue
      rel = rel[:-len('__init__.py')]
    lines.append((rel, f'- [`{rel}`](../{rel}): {module_summary(path)}'))
  return [line for _, line in sorted(lines)]


def _written_map():
  """The '- ' lines of docs/package_map.md."""
  return [line for line in _read(PACKAGE_MAP).splitlines() if line.startswith('- ')]


def test_package_map_lists_every_module_with_its_docstring():
  """A new module (or a changed first sentence) needs its line: `python tests/test_readme.py`
  prints the whole map."""
  want, have = package_map(), _written_map()
  missing = [line for line in want if line not in have]
  stale = [line for line in have if line not in want]
  assert not missing and not stale, (f'{PACKAGE_MAP}: add or replace\n' +
                                     '\n'.join(missing) + '\nremove\n' + '\n'.join(stale))
  assert have == want, f'{PACKAGE_MAP}: keep the lines in path order'


def test_readme_is_a_front_page():
  """Short, with a link to every docs page; the rest lives in docs/."""
  text = _readme()
  assert len(text.splitlines()) < README_MAX_LINES
  linked = {os.path.normpath(t.split('#')[0]) for t in _links(text)}
  for page in pages()[1:]:
    assert page in linked, f'README.md does not link {page}'


def _links(text):
  """Targets of the markdown links of a page, outside code."""
  prose = re.sub(r'`[^`]*`', '', FENCE.sub('', text))
  return re.findall(r'\]\(([^)\s]+)\)', prose)


def _anchors(text):
  """GitHub's anchors for a page's headings: lowercase, punctuation dropped, spaces to '-',
  repeats numbered."""
  seen, anchors = {}, set()
  for heading in re.findall(r'^#{1,6} (.+)$', FENCE.sub('', text), re.M):
    slug = re.sub(r'[^\w\- ]', '', heading.strip().lower()).replace(' ', '-')
    anchors.add(f'{slug}-{seen[slug]}' if slug in seen else slug)
    seen[slug] = seen.get(slug, 0) + 1
  return anchors


@pytest.mark.parametrize('page', pages())
def test_relative_links_point_at_files_and_headings(page):
  text = _read(page)
  for target in _links(text):
    if re.match(r'[a-z]+:', target):  # https:, mailto:
      continue
    path, _, anchor = target.partition('#')
    full = os.path.normpath(os.path.join(ROOT, os.path.dirname(page), path)) if path else \
        os.path.join(ROOT, page)
    assert os.path.exists(full), f'{page}: {target} points at no file'
    assert full.startswith(ROOT + os.sep), f'{page}: {target} points outside the repository'
    if anchor and full.endswith('.md'):
      with open(full, encoding='utf-8') as f:
        assert anchor in _anchors(f.read()), f'{page}: {target} names no heading there'


if __name__ == '__main__':
  print('\n'.join(package_map()))

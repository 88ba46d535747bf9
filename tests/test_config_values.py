"""Values, not the Config, below the orchestrators (issue 32, item 3).

The orchestrating modules below read the Config and hand each component the values it needs
(as algorithms/__init__.py hands `mu` or `beta` to each paper's file through the registry).
Every other module's functions take values: no parameter is named config or cfg. Read from
the source with ast (nothing is imported).
"""
import ast
import os

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       'fedjax_drift')
# The modules that may take the Config whole (paths relative to the package).
ORCHESTRATORS = ('study.py', 'simulation.py', 'methods.py', 'algorithms/__init__.py',
                 'applies.py', 'config_checks.py', 'registry.py', 'preflight.py',
                 'distributed.py',
                 'outputs.py', 'run_data.py',  # simulation's and study's set-up, split off
                 # the partitions' registry dispatch (client_parts, check_dataset): it hands
                 # each entry its registry.Values, as registry.build does for the other kinds
                 'data/partitions.py')
CONFIG_NAMES = ('config', 'cfg')


def _takers():
  """[(module path, line, function)] of the functions outside ORCHESTRATORS with a parameter
  named one of CONFIG_NAMES."""
  found = []
  for folder, _, files in os.walk(PACKAGE):
    for name in sorted(files):
      path = os.path.join(folder, name)
      rel = os.path.relpath(path, PACKAGE).replace(os.sep, '/')
      if not name.endswith('.py') or rel in ORCHESTRATORS:
        continue
      tree = ast.parse(open(path, encoding='utf-8').read(), path)
      for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
          a = node.args
          params = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
          if any(p in CONFIG_NAMES for p in params):
            found.append((rel, node.lineno, getattr(node, 'name', '<lambda>')))
  return found


def test_orchestrators_exist():
  """A renamed orchestrator would silently drop out of the list."""
  for rel in ORCHESTRATORS:
    assert os.path.isfile(os.path.join(PACKAGE, rel)), rel


def test_only_orchestrators_take_the_config():
  assert _takers() == [], ('these take the Config below the orchestrators; pass the values '
                           'they read instead (unpacked in the orchestrating caller)')

"""The package's structure: no import cycles, the project's own imports at the top of modules,
and no module (subpackages included) over MAX_LINES lines.

Read from the source with ast (nothing is imported), so a cycle or a function-local import of
a project module fails here before it confuses a reader. The one exception is the console
entry point (fedjax_drift/cli.py), which installs its signal handlers before anything imports
jax and so imports the rest of the package inside main().
"""
import ast
import os

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       'fedjax_drift')
# Modules allowed to import project modules inside functions, and why.
LATE_IMPORTS = {'fedjax_drift.cli': 'signal handlers before jax is imported'}
# The longest a module may be (issue 47: "no room over 620 lines"): past it, split the module
# along a seam into a new, named one rather than let it grow.
MAX_LINES = 620


def _modules():
  """{dotted module name: path} for every .py file in the package."""
  found = {}
  for folder, _, files in os.walk(PACKAGE):
    for name in files:
      if name.endswith('.py'):
        path = os.path.join(folder, name)
        dotted = os.path.relpath(path, os.path.dirname(PACKAGE))[:-3].replace(os.sep, '.')
        found[dotted.removesuffix('.__init__')] = path
  return found


def _imported(node, module, is_package, modules):
  """The project modules an import statement names (a `from pkg import mod` names mod)."""
  if isinstance(node, ast.Import):
    return [a.name for a in node.names if a.name in modules]
  base = node.module or ''
  if node.level:
    parts = module.split('.')[:len(module.split('.')) - node.level + is_package]
    base = '.'.join(parts + ([base] if base else []))
  submodules = [f'{base}.{a.name}' for a in node.names if f'{base}.{a.name}' in modules]
  return submodules or ([base] if base in modules else [])


def _graph():
  """({module: set of modules imported at module level}, [(module, line, names) imported
  inside a function or class body])."""
  modules = _modules()
  top, late = {}, []
  for module, path in modules.items():
    tree = ast.parse(open(path, encoding='utf-8').read(), path)
    top[module] = set()
    is_package = int(path.endswith('__init__.py'))
    for node in ast.walk(tree):
      if isinstance(node, (ast.Import, ast.ImportFrom)):
        names = set(_imported(node, module, is_package, modules)) - {module}
        if node.col_offset == 0:
          top[module] |= names
        elif names:
          late.append((module, node.lineno, sorted(names)))
  return top, late


def _cycles(graph):
  """The strongly connected components with more than one module (Tarjan)."""
  index, low, stack, on_stack, found = {}, {}, [], set(), []

  def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in graph[v]:
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == v:
          break
      if len(component) > 1:
        found.append(sorted(component))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return found


def test_no_import_cycles():
  top, _ = _graph()
  assert _cycles(top) == []


def test_the_cycle_finder_finds_one():
  assert _cycles({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}) == [['a', 'b', 'c']]


def test_project_imports_are_at_the_top():
  _, late = _graph()
  assert [entry for entry in late if entry[0] not in LATE_IMPORTS] == []


def test_the_graph_sees_the_package():
  top, _ = _graph()
  assert 'fedjax_drift.engine' in top['fedjax_drift.distributed']
  assert 'fedjax_drift.registry' in top['fedjax_drift.data.common']


def test_no_module_is_over_the_line_limit():
  modules = _modules()
  assert any('.' in m.removeprefix('fedjax_drift.') for m in modules)  # subpackages walked
  long = {}
  for module, path in modules.items():
    with open(path, encoding='utf-8') as f:
      count = len(f.read().splitlines())
    if count > MAX_LINES:
      long[module] = count
  assert not long, f'modules over {MAX_LINES} lines (split them): {long}'

"""Each dataset registers once, beside its loader; the tables of data/sources.py derive from
those entries, and the data modules import each other without a cycle."""
import ast
import os

import pytest

from fedjax_drift import config, registry
from fedjax_drift.data import common, sources
from fedjax_drift.errors import UserError

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'fedjax_drift',
                    'data')
FIELDS = config.field_names()  # the flags modules declare (registry.flag) too


def _entries():
  return list(registry.entries('dataset').values())


def test_every_dataset_entry_has_a_summary_and_reads_config_fields():
  assert len(_entries()) >= 18
  for entry in _entries():
    assert entry.summary.strip() and '\n' not in entry.summary, entry.name
    assert isinstance(entry.info, common.DatasetInfo), entry.name
    assert callable(entry.info.load) and callable(entry.info.files), entry.name
    assert set(entry.reads) <= FIELDS, (entry.name, set(entry.reads) - FIELDS)
    assert set(entry.info.shared) <= FIELDS, (entry.name, set(entry.info.shared) - FIELDS)
    assert not set(entry.reads) & set(entry.info.shared), entry.name
    assert entry.prefix == entry.name.endswith(':'), entry.name


def test_the_dataset_specific_fields_are_declared():
  """The fields only some datasets read (the unread-flag warnings, applies.py)."""
  declared = {f for e in _entries() for f in e.reads}
  assert declared == {'hf_image_column', 'hf_label_column', 'hf_train_split', 'hf_test_split',
                      'cifar100_labels', 'emnist_split', 'digits5_parts', 'tokenizer',
                      'vocab_size', 'max_seq_len'}
  # num_clients and seed: Stack Overflow draws its users at load (data/stackoverflow.py), and
  # FEMNIST / Shakespeare under --partition=natural (data/natural.py).
  assert set(sources.load_options()) == declared | {'image_size', 'pretrained', 'num_clients',
                                                  'seed', 'partition'}
  for name in ('emnist', 'emnist_letters'):
    assert registry.find('dataset', name).reads == ('emnist_split',)
  for name in ('ag_news', 'sst5', 'text:x.csv', 'tfds:ag_news_subset'):
    assert registry.find('dataset', name).reads == ('tokenizer', 'vocab_size', 'max_seq_len')


def test_tables_derive_from_the_entries():
  entries = _entries()
  assert set(sources.importable()) == {e.name for e in entries if e.info.importable}
  assert len(set(sources.importable())) == len(sources.importable())
  assert set(sources.datasets()) == {e.info.shown for e in entries if e.info.shown}
  assert {'npz:PATH', 'tfds:NAME', 'hf:NAME[:CONFIG]', 'text:PATH', 'emnist'} <= set(
      sources.datasets())
  # EMNIST's splits are imported (and loaded) by their own names, listed as `emnist`.
  splits = [n for n in sources.importable() if n.startswith('emnist_')]
  assert len(splits) == 6 and not set(splits) & set(sources.datasets())
  assert 'emnist' not in sources.importable()


def test_each_importable_dataset_names_its_files(tmp_path):
  """Without --data_dir the imported copy; --data_dir naming a file is that file."""
  for name in sources.importable():
    assert sources.dataset_files(name, None) == [sources.imported_path(name)], name
    assert sources.dataset_files(name, str(tmp_path / 'x.zip')) == [str(tmp_path / 'x.zip')] \
        or name in ('mnist', 'fashion_mnist'), name
    assert isinstance(sources.dataset_files(name, str(tmp_path)), list), name
  assert sources.dataset_files('embedded', None) == [sources.EMBEDDED_PATH]
  assert sources.dataset_files('npz:/a/b.npz', str(tmp_path)) == ['/a/b.npz']
  assert sources.dataset_files('nope', None) == []


def test_dispatch_and_the_unknown_dataset_message():
  assert registry.find('dataset', 'npz:/x.npz').name == 'npz:'
  assert registry.find('dataset', 'emnist_foo') is None
  with pytest.raises(UserError) as e:
    sources.load('fashion-mnist')
  assert str(e.value).startswith('--dataset=fashion-mnist is unknown; use one of embedded, '
                                 'mnist, fashion_mnist, ')
  assert 'npz:PATH' in str(e.value) and 'did you mean fashion_mnist?' in str(e.value)


def _project_imports(path):
  """[(module imported, whether inside a function)] of fedjax_drift's modules in one file."""
  tree = ast.parse(open(path, encoding='utf-8').read())
  nested = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.Lambda))
            for n in ast.walk(f) if n is not f}
  out = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module:
      names = [f'{node.module}.{a.name}' for a in node.names] + [node.module]
    else:
      continue
    out += [(n, id(node) in nested) for n in names if n.startswith('fedjax_drift')]
  return out


def test_data_modules_import_each_other_without_a_cycle_and_at_the_top():
  modules = sorted(f[:-3] for f in os.listdir(DATA) if f.endswith('.py') and f != '__init__.py')
  edges = {}
  for m in modules:
    found = _project_imports(os.path.join(DATA, f'{m}.py'))
    assert not [n for n, inside in found if inside], (m, 'imports a project module in a function')
    edges[m] = {n.split('.')[2] for n, _ in found
                if n.startswith('fedjax_drift.data.') and n.split('.')[2] in modules} - {m}
  done, path = set(), []

  def visit(m):
    assert m not in path, 'import cycle: ' + ' -> '.join(path[path.index(m):] + [m])
    if m in done:
      return
    path.append(m)
    for n in sorted(edges[m]):
      visit(n)
    path.pop()
    done.add(m)
  for m in modules:
    visit(m)
  assert 'sources' not in set().union(*(edges[m] for m in modules if m != 'prepare'))

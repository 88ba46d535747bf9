"""benchmarks/table_program.py's comparison: one preset's or `all`'s tables read back, and a
diverged method's note compared but for the run directory it names."""
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'benchmarks'))
import table_program  # noqa: E402

NOTE = ('Every run diverged, so no row: fedavg @ E=8: every run diverged (first in round 1); '
        'the last good checkpoint (round 2) is in runs/{}/checkpoints; lower --lr (now 1)')


def _preset(directory, programs, lr, note_dir):
  os.makedirs(directory)
  row = {'method': 'fedavg', 'config': {'out': str(directory), 'lr': lr}, 'chosen': {}}
  with open(os.path.join(directory, 'results.json'), 'w') as f:
    json.dump({'programs': programs, 'scenarios': {'E=1': [row]}}, f)
  with open(os.path.join(directory, 'table.md'), 'w') as f:
    f.write(f'| fedavg | {lr} |\n\n' + NOTE.format(note_dir) + '\n')


def _same(a, b):
  (_, rows_a, text_a), (_, rows_b, text_b) = table_program._tables(a), table_program._tables(b)
  return rows_a == rows_b and table_program._cells(text_a) == table_program._cells(text_b)


def test_one_presets_tables_compare_but_for_directories(tmp_path):
  _preset(tmp_path / 'grouped', 5, 0.1, 'fedavg-E=1+E=8')
  _preset(tmp_path / 'apart', 25, 0.1, 'E=8-fedavg')
  _preset(tmp_path / 'changed', 25, 0.2, 'E=8-fedavg')
  assert table_program._tables(tmp_path / 'grouped')[0] == 5
  assert _same(tmp_path / 'grouped', tmp_path / 'apart')
  assert not _same(tmp_path / 'grouped', tmp_path / 'changed')  # a cell differs


def test_all_presets_are_read_and_their_programs_summed(tmp_path):
  for variant, programs, note in (('grouped', 5, 'g'), ('apart', 25, 'a')):
    for preset in ('fedfor_epochs-cpu', 'igfl-cpu'):
      _preset(tmp_path / variant / preset, programs, 0.1, note)
  programs, rows, _ = table_program._tables(tmp_path / 'grouped')
  assert programs == 10 and sorted(rows) == ['fedfor_epochs-cpu', 'igfl-cpu']
  assert _same(tmp_path / 'grouped', tmp_path / 'apart')
  os.makedirs(tmp_path / 'empty')
  with pytest.raises(SystemExit, match='holds no results.json'):
    table_program._tables(tmp_path / 'empty')


def test_differences_name_the_row_key_and_the_line(tmp_path):
  _preset(tmp_path / 'grouped', 5, 0.1, 'g')
  _preset(tmp_path / 'apart', 25, 0.2, 'a')
  read = lambda d: dict(zip(('programs', 'rows', 'table'), table_program._tables(d)))  # noqa: E731
  grouped, apart = read(tmp_path / 'grouped'), read(tmp_path / 'apart')
  assert table_program.differences(grouped, apart) == [
      './E=1/fedavg: config', '-| fedavg | 0.2 |', '+| fedavg | 0.1 |']
  assert table_program.differences(grouped, grouped) == []
  # shared_runs names another sweep's directory, which grouping renames: not a difference
  row = {'method': 'fedavg', 'config': {'out': 'x'}, 'shared_runs': 'runs/fedavg-E=1+E=8'}
  assert table_program._row(row) == {'method': 'fedavg', 'config': {}}

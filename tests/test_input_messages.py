"""Mistakes that gave a traceback or a misleading line now give one line naming the flag or
file and what is wrong (issue 34 item 5)."""
import os

import numpy as np
import pytest

from fedjax_drift import inputs, rundir, study
from fedjax_drift.data import common, partitions, tokenization
from fedjax_drift.errors import UserError, read_json_input
from helpers import tiny_config


def _x(n):
  return np.zeros((n, 3), np.float32)


def test_partition_files_with_huge_or_deeply_nested_numbers(tmp_path):
  huge = tmp_path / 'huge.json'
  huge.write_text('[[0, 1, ' + '9' * 400 + '], [2]]')
  with pytest.raises(UserError, match=r'client 0 has index 9{20}\.\.\.; indices must lie in '
                     r'\[0, 10\)'):
    partitions.from_file(str(huge), 10)
  nested = tmp_path / 'nested.json'
  nested.write_text('[' * 100000 + ']' * 100000)
  with pytest.raises(UserError, match='nested too deeply'):
    partitions.from_file(str(nested), 10)


@pytest.mark.parametrize('labels,expected', [
    (np.array(['0', '1', '0', '1']), 'y_train holds strings'),
    (np.array([0.0, 1.0, 1e20, 1.0]), 'y_train holds label 1e\\+20, not a class index'),
    (np.array([0.0, 1.0, np.nan, 1.0]), 'y_train holds label nan'),
])
def test_labels_that_are_not_class_indices(labels, expected):
  with pytest.raises(UserError, match=expected):
    common.validate('npz:x', _x(4), labels, _x(2), np.array([0, 1]))


def test_a_text_file_named_npz(tmp_path):
  path = tmp_path / 'data.npz'
  path.write_text('x,y\n1,2\n')
  with pytest.raises(UserError, match=r"data.npz is not an npz file .* starts with 'x,y'"):
    common.load_npz(str(path))
  path.write_bytes(b'')
  with pytest.raises(UserError, match='is not an npz file .* it is empty'):
    common.load_npz(str(path))


def test_domain_ids_that_are_not_contiguous():
  with pytest.raises(UserError, match=r'domain ids 0, 5 are not contiguous \(no example has '
                     r'1-4\)'):
    common.validate('npz:x', _x(4), np.array([0, 1, 0, 1]), _x(2), np.array([0, 1]),
                    domains_train=np.array([0, 5, 0, 5]), domains_test=np.array([0, 5]))


def test_an_out_with_a_byte_that_is_not_utf8(tmp_path):
  out = os.fsdecode(os.fsencode(str(tmp_path)) + b'/run_\xff')
  with pytest.raises(UserError, match=r'--out=.*run_\\xff: the path holds a byte that is not '
                     'UTF-8'):
    rundir.check_out(out, False, '')


def test_a_dangling_symlink_as_out(tmp_path):
  link = tmp_path / 'link'
  os.symlink(tmp_path / 'gone' / 'x', link)
  with pytest.raises(UserError, match=r'is a symbolic link to .*gone/x, which does not exist'):
    rundir.check_out(str(link), False, '')


def test_a_missing_pretrained_folder_is_named_before_any_work(tmp_path, tiny_npz,
                                                              unequal_partition):
  missing = str(tmp_path / 'no_checkpoint')
  with pytest.raises(UserError, match=f'--pretrained={missing} does not exist'):
    tokenization.check_pretrained(missing)
  config = tiny_config(tiny_npz, unequal_partition, pretrained=missing)
  with pytest.raises(UserError, match='does not exist'):
    inputs.input_files(study.input_flags(config))


def test_a_json_input_is_read_or_refused_in_one_line_naming_the_flag(tmp_path):
  """errors.read_json_input: the one reader of the JSON files flags name (issue 47 item 4)."""
  good = tmp_path / 'good.json'
  good.write_text('[[0, 1], [2]]')
  assert read_json_input(str(good), f'--cohorts=file:{good}') == [[0, 1], [2]]
  bad, deep = tmp_path / 'bad.json', tmp_path / 'deep.json'
  bad.write_text('[1,')
  deep.write_text('[' * 100000 + ']' * 100000)
  for path, flag, message in (
      (tmp_path / 'none.json', '--resume', f'--resume: {tmp_path / "none.json"}: file does not'),
      (bad, f'--config={bad}', f'--config={bad}: not valid JSON ('),
      (deep, f'--partition=file:{deep}', f'--partition=file:{deep}: nested too deeply; '
                                         'expected lists')):
    with pytest.raises(UserError) as e:
      read_json_input(str(path), flag, 'lists')
    assert str(e.value).startswith(message) and '\n' not in str(e.value), str(e.value)

"""Inputs that were silently wrong or dropped are refused in one line naming the file, the
line and what was found (issue 34 items 4 and 5)."""
import gzip
import hashlib
import json
import os

import numpy as np
import pytest

import fedjax_drift
import fixtures
from fedjax_drift import diagnostics
from fedjax_drift.data import common, local, prepare, text
from fedjax_drift.errors import UserError
from helpers import tiny_config


def _x(n):
  return np.zeros((n, 4), np.float32)


# Stray labels: one 255 among ten digits would make 256 classes.
@pytest.mark.parametrize('split', ['train', 'test'])
def test_a_stray_label_is_refused_in_either_split_naming_it(split):
  y = np.arange(10).repeat(5)
  stray = np.r_[y[:-1], 255]
  y_train, y_test = (stray, y) if split == 'train' else (y, stray)
  with pytest.raises(UserError) as e:
    common.validate('mnist', _x(50), y_train, _x(50), y_test)
  message = str(e.value)
  assert 'the labels found, 0-9, 255, would make 256 classes' in message, message
  counts = '1 train, 0 test' if split == 'train' else '0 train, 1 test'
  assert f'255 ({counts})' in message, message


def test_contiguous_labels_and_a_few_missing_classes_still_load():
  ds = common.validate('t', _x(8), np.array([0, 1, 2, 3, 5, 5, 1, 0]), _x(2), np.array([0, 1]))
  assert ds.num_classes == 6  # 4 of 6 classes present: not taken for stray labels


def test_a_stray_idx_training_label_is_refused_on_import(tmp_path, capsys):
  folder = tmp_path / 'mnist'
  _, y_train, _, _ = fixtures.write_idx_dir(str(folder), n_train=40, n_test=10)
  y_train[0] = 255
  write_idx = fixtures._write_idx  # pylint: disable=protected-access
  write_idx(str(folder / 'train-labels-idx1-ubyte.gz'), y_train)
  assert prepare.main(['import', str(tmp_path)]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  # the reader names the file and the example (issue 45 item 1); validate's stray-label
  # check is the dataset-wide one behind it
  assert len(err) == 1 and ('train-labels-idx1-ubyte.gz, example 0: label 255 is outside '
                            '0..9' in err[0]), err


# Text files.
def _write(path, content):
  path.write_bytes(content.encode() if isinstance(content, str) else content)
  return str(path)


def test_a_stray_text_label_is_refused(tmp_path):
  rows = ''.join(f'text {i},{i % 4}\n' for i in range(20)) + 'odd one,99\n'
  _write(tmp_path / 'train.csv', 'text,label\n' + rows)
  _write(tmp_path / 'test.csv', 'text,label\na,0\nb,1\nc,2\nd,3\n')
  texts = text.read_text_files(str(tmp_path))
  with pytest.raises(UserError, match=r'0-3, 99, would make 100 classes.*99 \(1 train'):
    common.validate('text', _x(len(texts.y_train)), texts.y_train, _x(4), texts.y_test)


@pytest.mark.parametrize('content,expected', [
    ('text,label,split\nhello,1\x00,train\nbye,0,test\n', 'line 2 holds a NUL byte'),
    ('text,label,split\nhello,1,train\nbye,0,tset\nyo,0,test\n', "line 3 has split 'tset'"),
    ('text,label,split\nhello,1,train,extra\nbye,0,test\n', 'line 2 has 4 fields, its header 3'),
    ('text,label,split\n ,1,train\n,0,train\nbye,0,test\n', 'every train text is empty'),
])
def test_csv_mistakes_are_one_line_naming_the_line(tmp_path, content, expected):
  path = _write(tmp_path / 'data.csv', content)
  with pytest.raises(UserError, match=expected):
    text.read_text_files(path)


def test_a_json_object_as_text_or_label_is_refused(tmp_path):
  rows = [{'text': 'fine', 'label': 0, 'split': 'train'},
          {'text': {'title': 'a dict'}, 'label': 1, 'split': 'train'}]
  path = _write(tmp_path / 'data.jsonl', '\n'.join(json.dumps(r) for r in rows) + '\n')
  with pytest.raises(UserError, match=r'line 2: text is \{"title": "a dict"\}, not a string'):
    text.read_text_files(path)
  rows[1] = {'text': 'x', 'label': [1, 2], 'split': 'test'}
  _write(tmp_path / 'data.jsonl', '\n'.join(json.dumps(r) for r in rows) + '\n')
  with pytest.raises(UserError, match=r'line 2: label is \[1, 2\]'):
    text.read_text_files(path)


def test_a_jsonl_syntax_error_names_its_own_line(tmp_path):
  good = json.dumps({'text': 'a', 'label': 0, 'split': 'train'})
  path = _write(tmp_path / 'data.jsonl', f'{good}\n{good}\n\n{{"text": "b", label}}\n')
  with pytest.raises(UserError, match=r'data.jsonl line 4 is not JSON'):
    text.read_text_files(path)


def test_a_csv_with_a_utf8_byte_order_mark_reads(tmp_path):
  path = _write(tmp_path / 'data.csv',
                '\ufefftext,label,split\nhello,1,train\nhi,0,train\nbye,0,test\n')
  texts = text.read_text_files(path)
  assert texts.train == ['hello', 'hi'] and list(texts.y_train) == [1, 0]


# Fashion-MNIST by the files' checksums, not the folder's name.
def _md5(data):
  return hashlib.md5(data).hexdigest()


def _as_official(monkeypatch, folder, dataset):
  """Makes the fixture's label files count as `dataset`'s official ones (the real files'
  checksums are in local.IDX_MD5; the tests cannot ship the files)."""
  table = {name: {} for name in local.IDX_MD5}
  for name in local.IDX_MD5[dataset]:
    raw = (folder / name).read_bytes()
    table[dataset][name] = ('0' * 32, _md5(gzip.decompress(raw)))  # the decompressed one
  for other in local.IDX_MD5:
    if other != dataset:
      table[other] = {n: ('1' * 32, '2' * 32) for n in local.IDX_MD5[dataset]}
  monkeypatch.setattr(local, 'IDX_MD5', table)


def test_official_fashion_mnist_files_in_any_folder_import_as_fashion_mnist(
    tmp_path, monkeypatch, capsys):
  folder = tmp_path / 'downloads' / 'plain'
  fixtures.write_idx_dir(str(folder), n_train=40, n_test=10)
  _as_official(monkeypatch, folder, 'fashion_mnist')
  assert local.idx_identity(str(folder)) == 'fashion_mnist'
  assert prepare.main(['import', str(tmp_path / 'downloads')]) == 0
  assert capsys.readouterr().out.startswith('fashion_mnist:')
  assert os.path.exists(common.imported_path('fashion_mnist'))


def test_a_name_that_contradicts_the_official_files_is_refused(tmp_path, monkeypatch, capsys):
  folder = tmp_path / 'fashion'
  fixtures.write_idx_dir(str(folder), n_train=40, n_test=10)
  _as_official(monkeypatch, folder, 'mnist')
  assert prepare.main(['import', str(tmp_path), '--dataset=fashion_mnist']) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and 'holds the official mnist files' in err[0], err
  with pytest.raises(UserError, match='--dataset=fashion_mnist, but .* official mnist'):
    local.load_idx('fashion_mnist', str(folder))


def test_files_that_are_not_the_official_ones_keep_the_folder_rule(tmp_path):
  folder = tmp_path / 'fashion'
  fixtures.write_idx_dir(str(folder), n_train=40, n_test=10)
  assert local.idx_identity(str(folder)) is None
  assert prepare._idx_name(str(folder)) == 'fashion_mnist'  # pylint: disable=protected-access


# --init_params that are not a parameter file's floats.
def _saved_params(tmp_path, tiny_npz, unequal_partition):
  path = tmp_path / 'params.npz'
  fedjax_drift.run(tiny_config(tiny_npz, unequal_partition, rounds=0, save_params=str(path),
                               out=str(tmp_path / 'saved')))
  with np.load(path) as f:
    return path, {k: f[k] for k in f.files}


def test_init_params_of_ints_or_nans_are_refused_naming_the_array(tmp_path, tiny_npz,
                                                                  unequal_partition):
  path, arrays = _saved_params(tmp_path, tiny_npz, unequal_partition)
  name = sorted(arrays)[0]
  cases = (('int', arrays[name].astype(np.int32), 'holds int32 values'),
           ('nan', np.full_like(arrays[name], np.nan), 'holds NaN or infinite'))
  for label, value, expected in cases:
    bad = tmp_path / f'{label}.npz'
    np.savez(bad, **{**arrays, name: value})
    config = tiny_config(tiny_npz, unequal_partition, init_params=str(bad),
                         out=str(tmp_path / label))
    with pytest.raises(UserError, match=f"{bad} array '{name}' {expected}"):
      fedjax_drift.run(config)


def test_feature_rounds_after_the_last_round_are_named_in_a_warning(tiny_npz,
                                                                    unequal_partition):
  config = tiny_config(tiny_npz, unequal_partition, rounds=4, diag_features_rounds='0,7,9')
  line = diagnostics.late_rounds_warning(config.diag_features_rounds, config.rounds)
  assert line.startswith('warning: --diag_features_rounds: rounds 7, 9 after --rounds=4')
  assert diagnostics.late_rounds_warning('0,9', 9) == ''


def test_a_dataset_whose_name_fixes_its_classes_refuses_labels_beyond_them():
  y = np.array([0, 3, 9, 0, 3, 9])  # three CIFAR-10 classes: not stray, the name says 10
  assert common.validate('cifar10', _x(6), y, _x(3), np.array([0, 3, 9])).num_classes == 10
  with pytest.raises(UserError, match=r'stray labels\? 10 \(1 train, 0 test\) \(mnist has 10 '
                     r'classes, 0..9\)'):
    common.validate('mnist', _x(6), np.r_[y[:-1], 10], _x(3), np.array([0, 3, 9]))

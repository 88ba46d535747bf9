"""Text data (issue 20): AG News, SST-5 and CSV/JSONL files written in their official layouts
(tests/layouts.py) and read back; tokenisation with HF `tokenizers` (trained WordPiece,
vocab.txt, tokenizer.json, --pretrained folder), its cache, `fedjax-drift-data import`,
tfds:ag_news_subset (tfds.testing.mock_data), and token ids through the batch path."""
import gzip
import json
import os
import subprocess
import sys
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_drift
import layouts
from fedjax_drift import engine
from fedjax_drift.data import (federated, partitions, pipeline, prepare, sources, text,
                               tokenization)
from fedjax_drift.errors import UserError

TOK = dict(vocab_size=120, max_seq_len=24)  # small tokenisation for the tiny copies


# --- readers --------------------------------------------------------------------------------

def test_ag_news_tgz_and_folders_read_back(tmp_path):
  expected = layouts.write_ag_news_tgz(str(tmp_path))
  archive = tmp_path / 'ag_news_csv.tgz'
  for where in (str(archive), str(tmp_path)):
    texts = text.read_ag_news(where)
    assert texts.train == expected['train'][0] and texts.test == expected['test'][0]
    np.testing.assert_array_equal(texts.y_train, expected['train'][1])
    np.testing.assert_array_equal(texts.y_test, expected['test'][1])
    assert texts.val is None
  # the extracted folder, found from its parent or named itself
  import tarfile  # pylint: disable=g-import-not-at-top
  with tarfile.open(archive) as tar:
    tar.extractall(tmp_path / 'x', filter='data')
  for where in (tmp_path / 'x', tmp_path / 'x' / 'ag_news_csv'):
    assert text.read_ag_news(str(where)).train == expected['train'][0]
  # title + " " + description, backslash and doubled quotes as written
  assert expected['train'][0][0] == ('World story 0 (AP) minister election, "talks" - #0 '
                                     '\\ minister!')


def test_sst5_zip_root_labels_leaves_and_dev(tmp_path):
  expected = layouts.write_sst5_zip(str(tmp_path))
  texts = text.read_sst5(str(tmp_path / 'trainDevTestTrees_PTB.zip'))
  for split, (strings, labels) in expected.items():
    assert getattr(texts, split) == strings
    np.testing.assert_array_equal(getattr(texts, f'y_{split}'), labels)
  assert texts.train[1] == "The film 's plot -LRB- part0 -RRB- is dull and ."
  assert text.read_sst5(str(tmp_path)).test == expected['test'][0]
  with zipfile.ZipFile(tmp_path / 'trainDevTestTrees_PTB.zip') as z:
    z.extractall(tmp_path / 'x')
  assert text.read_sst5(str(tmp_path / 'x' / 'trees')).val == expected['val'][0]
  no_dev = tmp_path / 'no_dev'
  layouts.write_sst5_zip(str(no_dev), dev=False)
  assert text.read_sst5(str(no_dev)).val is None


def test_parse_tree_by_hand():
  assert text.parse_tree("(3 (2 It) (4 (4 (2 's) (4 good)) (2 .)))") == (
      3, ['It', "'s", 'good', '.'])
  for bad, why in (('(3 (2 It) (4 good)', 'unbalanced'), ('(7 (2 It))', "label '7'"),
                   ('(3 It (2 x))', 'not a leaf'), ('(3 (2 a)) (2 b)', 'after the tree'),
                   ('(3 ())', 'empty node'), ('It was good', 'not a tree')):
    with pytest.raises(ValueError, match=why):
      text.parse_tree(bad)


@pytest.mark.parametrize('kind', ['csv', 'jsonl'])
def test_text_folder_with_string_labels(tmp_path, kind):
  expected = layouts.write_text_files(str(tmp_path), kind)
  texts = text.read_text_files(str(tmp_path))
  assert texts.train == expected['train'][0] and texts.test == expected['test'][0]
  np.testing.assert_array_equal(texts.y_train, expected['train'][1])


def test_single_text_file_needs_a_split_column(tmp_path):
  path = tmp_path / 'all.jsonl'
  splits = ['train'] * 4 + ['test', 'validation', 'train', 'test', 'dev']
  rows = [{'text': f'text {i}', 'label': i % 3, 'split': s} for i, s in enumerate(splits)]
  path.write_text(''.join(json.dumps(r) + '\n' for r in rows))
  texts = text.read_text_files(str(path))
  assert texts.train == ['text 0', 'text 1', 'text 2', 'text 3', 'text 6']
  assert texts.test == ['text 4', 'text 7'] and texts.val == ['text 5', 'text 8']
  np.testing.assert_array_equal(texts.y_test, [1, 1])
  (tmp_path / 'plain.csv').write_text('text,label\nhello,0\nbye,1\n')
  with pytest.raises(UserError, match=r'plain.csv line 2 lacks split'):
    text.read_text_files(str(tmp_path / 'plain.csv'))


def _one_line_error(fn, *args):
  with pytest.raises(UserError) as e:
    fn(*args)
  assert '\n' not in str(e.value)
  return str(e.value)


def test_damaged_and_foreign_files_are_one_line_naming_them(tmp_path):
  layouts.write_ag_news_tgz(str(tmp_path / 'ag'))
  archive = tmp_path / 'ag' / 'ag_news_csv.tgz'
  cut = tmp_path / 'cut' / 'ag_news_csv.tgz'
  cut.parent.mkdir()
  cut.write_bytes(archive.read_bytes()[:len(archive.read_bytes()) // 2])
  assert str(cut) in _one_line_error(text.read_ag_news, str(cut))
  foreign = tmp_path / 'foreign' / 'ag_news_csv'
  foreign.mkdir(parents=True)
  (foreign / 'train.csv').write_text('"9","t","d"\n')
  (foreign / 'test.csv').write_text('"1","t","d"\n')
  assert 'train.csv line 1: class index' in _one_line_error(text.read_ag_news, str(foreign))
  (foreign / 'train.csv').write_bytes(gzip.compress(b'\x89PNG not a csv'))
  assert 'train.csv' in _one_line_error(text.read_ag_news, str(foreign))
  assert 'holds no AG News files' in _one_line_error(text.read_ag_news, str(tmp_path))
  layouts.write_sst5_zip(str(tmp_path / 'sst'))
  zipped = tmp_path / 'sst' / 'trainDevTestTrees_PTB.zip'
  bad = tmp_path / 'bad_sst' / 'trainDevTestTrees_PTB.zip'
  bad.parent.mkdir()
  bad.write_bytes(zipped.read_bytes()[:100])
  assert str(bad) in _one_line_error(text.read_sst5, str(bad))
  (foreign / 'train.csv').write_text('"Class Index","Title","Description"\n"2","a","b"\n')
  assert text.read_ag_news(str(foreign)).train == ['a b']  # Kaggle's copy has a header
  (foreign / 'test.csv').unlink()
  assert 'lacks test.csv' in _one_line_error(text.read_ag_news, str(foreign))
  with zipfile.ZipFile(zipped) as z, zipfile.ZipFile(bad, 'w') as out:
    out.writestr('trees/train.txt', z.read('trees/train.txt'))
  assert 'lacks trees/test.txt' in _one_line_error(text.read_sst5, str(bad))
  trees = tmp_path / 'trees'
  trees.mkdir()
  (trees / 'train.txt').write_text('(3 (2 It) (4 good))\n(2 (2 cut) (2 off)\n')
  (trees / 'test.txt').write_text('(3 (2 It) (4 good))\n')
  assert 'train.txt line 2: unbalanced' in _one_line_error(text.read_sst5, str(trees))


# --- tokenisation ---------------------------------------------------------------------------

def _ag_texts(tmp_path):
  layouts.write_ag_news_tgz(str(tmp_path / 'ag'))
  return text.read_ag_news(str(tmp_path / 'ag'))


@pytest.mark.slow  # two fresh Python processes importing the package
def test_trained_wordpiece_is_the_same_in_every_process(tmp_path):
  """The trainer's hash maps are seeded per process; the vocabulary must not depend on it."""
  texts = _ag_texts(tmp_path).train
  (tmp_path / 'texts.json').write_text(json.dumps(texts))
  code = ('import json, sys; from fedjax_drift.data import tokenization; '
          't = tokenization.train_wordpiece(json.load(open(sys.argv[1])), 120); '
          'print(json.dumps(sorted(t.get_vocab().items())))')
  vocabs = [subprocess.run([sys.executable, '-c', code, str(tmp_path / 'texts.json')],
                           check=True, capture_output=True, text=True).stdout
            for _ in range(2)]
  assert vocabs[0] == vocabs[1]
  vocab = dict(json.loads(vocabs[0]))
  assert [vocab[t] for t in tokenization.SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
  assert len(vocab) <= 120 and 'minister' in vocab


def test_encode_truncates_pads_and_masks(tmp_path):
  tok = tokenization.train_wordpiece(_ag_texts(tmp_path).train, 120)
  x = tokenization.encode(tok, ['minister', 'minister ' * 40, ''], 8)
  assert x.dtype == np.int32 and x.shape == (3, 2, 8)
  cls, sep, word = (tok.token_to_id(t) for t in ('[CLS]', '[SEP]', 'minister'))
  np.testing.assert_array_equal(x[0, 0], [cls, word, sep, 0, 0, 0, 0, 0])
  np.testing.assert_array_equal(x[0, 1], [1, 1, 1, 0, 0, 0, 0, 0])
  np.testing.assert_array_equal(x[1, 0], [cls] + [word] * 6 + [sep])  # truncated to 8
  np.testing.assert_array_equal(x[1, 1], np.ones(8))
  np.testing.assert_array_equal(x[2, 1], [1, 1, 0, 0, 0, 0, 0, 0])  # [CLS] [SEP] only
  assert tok.padding is None  # encode works on a copy


def _vocab_txt(folder, lower=None):
  os.makedirs(folder, exist_ok=True)
  tokens = list(tokenization.SPECIAL_TOKENS) + ['hello', 'world', 'Hello', '##s', '!']
  with open(os.path.join(folder, 'vocab.txt'), 'w') as f:
    f.write('\n'.join(tokens) + '\n')
  if lower is not None:
    with open(os.path.join(folder, 'tokenizer_config.json'), 'w') as f:
      json.dump({'do_lower_case': lower}, f)
  return tokens


def test_vocab_txt_lowercasing_follows_the_checkpoint(tmp_path):
  tokens = _vocab_txt(str(tmp_path / 'uncased'))
  _vocab_txt(str(tmp_path / 'cased'), lower=False)
  uncased = tokenization.load_tokenizer(str(tmp_path / 'uncased'))
  cased = tokenization.load_tokenizer(str(tmp_path / 'cased' / 'vocab.txt'))
  ids = lambda tok: tokenization.encode(tok, ['Hello worlds!'], 7)[0, 0].tolist()
  at = tokens.index
  assert ids(uncased) == [at('[CLS]'), at('hello'), at('world'), at('##s'), at('!'),
                          at('[SEP]'), at('[PAD]')]
  assert ids(cased)[1] == at('Hello')
  (tmp_path / 'bad.txt').write_text('a\nb\n')
  with pytest.raises(UserError, match=r'lacks \[UNK\], \[CLS\], \[SEP\]'):
    tokenization.load_tokenizer(str(tmp_path / 'bad.txt'))


def test_tokenizer_json_pretrained_folder_and_auto_agree(tmp_path):
  """--tokenizer=tokenizer.json, a folder holding it and --pretrained=that folder give the
  arrays of the tokenizer they hold; auto without --pretrained trains one."""
  texts = _ag_texts(tmp_path)
  trained = tokenization.train_wordpiece(texts.train, 120)
  folder = tmp_path / 'checkpoint'
  folder.mkdir()
  trained.save(str(folder / 'tokenizer.json'))
  auto, size = text.tokenize(texts, 'auto', 120, 16)
  assert size == trained.get_vocab_size()
  for spec, pretrained in ((str(folder / 'tokenizer.json'), ''), (str(folder), ''),
                           ('auto', str(folder))):
    arrays, _ = text.tokenize(texts, spec, 999, 16, pretrained)
    np.testing.assert_array_equal(arrays['x_train'], auto['x_train'])
  (tmp_path / 'junk.json').write_text('{"not": "a tokenizer"}')
  with pytest.raises(UserError, match='--tokenizer=.*junk.json: not a tokenizers JSON'):
    text.tokenize(texts, str(tmp_path / 'junk.json'), 120, 16)
  with pytest.raises(UserError, match='--pretrained=.* holds no tokenizer.json or vocab.txt'):
    text.tokenize(texts, 'auto', 120, 16, str(tmp_path / 'ag'))


def test_second_load_reads_the_cache(tmp_path, monkeypatch):
  layouts.write_sst5_zip(str(tmp_path))
  first = sources.load('sst5', str(tmp_path), **TOK)
  assert os.listdir(os.path.join(os.environ['FEDJAX_DRIFT_CACHE'], 'tokenized'))
  def refuse(*_, **__):
    raise AssertionError('tokenised or trained again')
  monkeypatch.setattr(text, 'encode', refuse)
  monkeypatch.setattr(tokenization, 'train_wordpiece', refuse)
  second = sources.load('sst5', str(tmp_path), **TOK)
  for field in ('x_train', 'x_test', 'x_val', 'y_train', 'y_val'):
    np.testing.assert_array_equal(getattr(first, field), getattr(second, field))
  with pytest.raises(AssertionError):  # another --max_seq_len is another cache entry
    sources.load('sst5', str(tmp_path), vocab_size=120, max_seq_len=12)


def test_dataset_fields_and_token_checks(tmp_path):
  layouts.write_sst5_zip(str(tmp_path))
  ds = sources.load('sst5', str(tmp_path), **TOK)
  assert ds.num_classes == 5 and ds.x_train.shape == (10, 2, 24)
  assert ds.x_val.shape == (5, 2, 24) and ds.y_val.dtype == np.int32
  assert 0 < ds.vocab_size <= 120 and ds.x_train[:, 0].max() < ds.vocab_size
  for bad, why in ((ds.x_train.astype(np.float32), 'must be int32'),
                   (ds.x_train.copy(), 'token ids outside'), (ds.x_train.copy(), 'mask')):
    if why == 'token ids outside':
      bad[0, 0, 0] = ds.vocab_size
    if why == 'mask':
      bad[0, 1, 0] = 2
    with pytest.raises(UserError, match=why):
      sources.validate('t', bad, ds.y_train, ds.x_test, ds.y_test, vocab_size=ds.vocab_size)
  empty = ds.x_train.copy()
  empty[3, 1] = 0
  with pytest.raises(UserError, match='example 3 has no tokens'):
    sources.validate('t', empty, ds.y_train, ds.x_test, ds.y_test, vocab_size=ds.vocab_size)


# --- import ---------------------------------------------------------------------------------

def test_import_stores_texts_and_loads_like_the_files(tmp_path, capsys):
  layouts.write_ag_news_tgz(str(tmp_path / 'downloads'))
  layouts.write_sst5_zip(str(tmp_path / 'downloads' / 'stanford'))
  assert prepare.main(['import', str(tmp_path / 'downloads')]) == 0
  assert 'sst5: 10 train / 5 test / 5 validation texts' in capsys.readouterr().out
  for name, data_dir in (('ag_news', tmp_path / 'downloads'),
                         ('sst5', tmp_path / 'downloads' / 'stanford')):
    with np.load(sources.imported_path(name), allow_pickle=False) as f:  # arrays, no pickles
      assert f['text_train'].dtype == np.uint8 and f['offsets_train'].dtype == np.int64
    imported, direct = sources.load(name, **TOK), sources.load(name, str(data_dir), **TOK)
    np.testing.assert_array_equal(imported.x_train, direct.x_train)
    np.testing.assert_array_equal(imported.y_test, direct.y_test)
  assert text.load_imported('sst5').val == text.read_sst5(str(tmp_path / 'downloads' /
                                                               'stanford')).val


def test_import_errors_are_one_line(tmp_path, capsys):
  (tmp_path / 'ag_news_csv.tgz').write_bytes(b'not a tarball')
  assert prepare.main(['import', str(tmp_path)]) == 2
  err = capsys.readouterr().err.strip()
  assert '\n' not in err and 'ag_news_csv.tgz' in err
  (tmp_path / 'ag_news_csv.tgz').unlink()
  layouts.write_sst5_zip(str(tmp_path))
  assert prepare.main(['import', str(tmp_path), '--dataset=ag_news']) == 2
  assert 'found no ag_news files' in capsys.readouterr().err
  with pytest.raises(UserError, match='--dataset=ag_news needs --data_dir=DIR, or import'):
    sources.load('ag_news', **TOK)
  # an imported file that is not texts, or is cut short
  path = sources.imported_path('ag_news')
  os.makedirs(os.path.dirname(path))
  np.savez(path, x_train=np.zeros((2, 3)))
  assert 'holds no texts' in _one_line_error(sources.load, 'ag_news')
  text.save_imported('ag_news', text.read_sst5(str(tmp_path)))
  with open(path, 'rb') as f:
    raw = f.read()
  with open(path, 'wb') as f:
    f.write(raw[:len(raw) // 2])
  assert f'cannot read {path}' in _one_line_error(sources.load, 'ag_news')


# --- TFDS -------------------------------------------------------------------------------------

def test_tfds_ag_news_subset_is_tokenised():
  """tfds:ag_news_subset's string features (title, description) become token arrays."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  with tfds.testing.mock_data(num_examples=6):
    ds = sources.load('tfds:ag_news_subset', **TOK)
    train, test = (tfds.data_source('ag_news_subset', split=s) for s in ('train', 'test'))
    joined = lambda e: f'{e["title"]} {e["description"]}'
    train_texts, first = [joined(train[i]) for i in range(len(train))], joined(test[0])
  assert ds.x_train.shape == (6, 2, 24) and ds.x_train.dtype == np.int32 and ds.vocab_size
  assert ds.y_test.max() < 4
  # title + " " + description, through the WordPiece trained on the training texts
  expected = tokenization.encode(tokenization.trained_tokenizer(train_texts, 120), [first], 24)[0]
  np.testing.assert_array_equal(ds.x_test[0], expected)


# --- the batch path ---------------------------------------------------------------------------

def test_token_ids_stay_integers_through_batches(tmp_path):
  layouts.write_ag_news_tgz(str(tmp_path), per_class=4)
  ds = sources.load('ag_news', str(tmp_path), **TOK)
  assert federated.to_float(jnp.asarray(ds.x_train)).dtype == jnp.int32
  assert pipeline.preprocess(jnp.asarray(ds.x_test)).dtype == jnp.int32
  parts = partitions.partition('dirichlet', ds.y_train, 4, 0, 2, 0.5)
  data = federated.build(ds.x_train, ds.y_train, parts, ds.num_classes)
  batch = engine.make_batch_fn(data, data.client_index[0], data.client_count[0],
                               jax.random.PRNGKey(0), 3, 2)(0)
  assert batch.x.dtype == jnp.int32 and batch.x.shape == (3, 2, 24)
  rows = np.asarray(data.client_index[0])[:int(data.client_count[0])]
  assert {tuple(map(tuple, x)) for x in np.asarray(batch.x)} <= {
      tuple(map(tuple, x)) for x in ds.x_train[rows]}
  for flag, value in (('augment', 'crop_flip'), ('normalize', 'per_channel'),
                      ('normalize_mean', '0.5')):
    with pytest.raises(UserError, match=f'--{flag}={value} works on images and features; '
                                        'the data is text'):
      pipeline.check(ds.x_train, **{flag: value})


def test_registry_lists_the_text_datasets():
  from fedjax_drift import catalog  # pylint: disable=g-import-not-at-top
  listed = catalog.values('dataset')
  assert {'ag_news', 'sst5', 'text:PATH'} <= set(listed)
  assert {'ag_news', 'sst5'} <= set(sources.importable())


def test_run_inputs_fingerprint_text_files_and_tokenizer(tmp_path, monkeypatch):
  from fedjax_drift import inputs, study  # pylint: disable=g-import-not-at-top
  layouts.write_text_files(str(tmp_path / 'reviews'))
  layouts.write_sst5_zip(str(tmp_path / 'sst'))
  _vocab_txt(str(tmp_path / 'tok'), lower=True)
  monkeypatch.chdir(tmp_path)
  config = study.absolutize(fedjax_drift.Config(dataset='text:reviews', tokenizer='tok'))
  assert config.dataset == f'text:{tmp_path / "reviews"}'
  assert config.tokenizer == str(tmp_path / 'tok')
  read = inputs.fingerprint(study.input_flags(config))['files']
  files = {os.path.basename(e['path']) for e in read}
  assert files == {'train.csv', 'test.csv', 'vocab.txt', 'tokenizer_config.json'}
  config = fedjax_drift.Config(dataset='sst5', data_dir=str(tmp_path / 'sst'))
  read = inputs.fingerprint(study.input_flags(config))['files']
  assert [os.path.basename(e['path']) for e in read] == ['trainDevTestTrees_PTB.zip']


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_official_layouts_imported_and_trained_for_a_round(tmp_path):
  """The CLI end to end: both archives imported, then AG News from --data_dir trains a
  round of text_bag with a trained WordPiece vocabulary."""
  layouts.write_ag_news_tgz(str(tmp_path / 'dl'), per_class=6)
  layouts.write_sst5_zip(str(tmp_path / 'dl' / 'sst'))
  env = dict(os.environ, PYTHONPATH=ROOT)
  steps = [[sys.executable, '-m', 'fedjax_drift.data.prepare', 'import', str(tmp_path / 'dl')],
           [sys.executable, 'experiments/run.py', '--dataset=ag_news',
            f'--data_dir={tmp_path / "dl"}', '--model=text_bag', '--rounds=1',
            '--num_clients=4', '--clients_per_round=2', '--vocab_size=200',
            '--max_seq_len=32', '--progress=false', f'--out={tmp_path / "run"}']]
  for argv in steps:
    result = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
  assert {'ag_news', 'sst5'} <= {n for n in text.IMPORTABLE
                                 if os.path.exists(sources.imported_path(n))}
  summary = json.loads(open(tmp_path / 'run' / 'summary.json').read())
  assert '24 train' in result.stdout and summary

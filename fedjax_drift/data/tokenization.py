"""Tokenisers for the text datasets (Hugging Face `tokenizers`): a tokenizer.json or WordPiece
vocab.txt read from disk, or a WordPiece vocabulary trained on the training texts (cached by
content under $FEDJAX_DRIFT_CACHE/tokenizers/), and texts encoded to padded id arrays."""
import hashlib
import json
import os

import numpy as np

from fedjax_drift import report
from fedjax_drift.data import common
from fedjax_drift.errors import UserError, first_line

SPECIAL_TOKENS = ('[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]')  # BERT's, ids 0..4 when trained


def _tokenizers():
  try:
    import tokenizers  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise UserError('text datasets need the `tokenizers` library: pip install tokenizers') \
        from None
  return tokenizers


def _wordpiece(vocab, lowercase):
  """A BERT-style tokenizer around a WordPiece vocab (a dict or a vocab.txt path): BERT's
  normaliser, pre-tokeniser and [CLS] ... [SEP] post-processor, as the library's own
  BertWordPieceTokenizer assembles them."""
  tk = _tokenizers()
  model = (tk.models.WordPiece.from_file(vocab, unk_token='[UNK]') if isinstance(vocab, str)
           else tk.models.WordPiece(vocab, unk_token='[UNK]'))
  tokenizer = tk.Tokenizer(model)
  missing = [t for t in ('[UNK]', '[CLS]', '[SEP]') if tokenizer.token_to_id(t) is None]
  if missing:
    raise UserError(f'{vocab if isinstance(vocab, str) else "the vocabulary"} lacks '
                    f'{", ".join(missing)}: not a BERT WordPiece vocab.txt')
  tokenizer.add_special_tokens([t for t in SPECIAL_TOKENS if tokenizer.token_to_id(t) is not None])
  tokenizer.normalizer = tk.normalizers.BertNormalizer(lowercase=lowercase)
  tokenizer.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
  tokenizer.post_processor = tk.processors.BertProcessing(
      ('[SEP]', tokenizer.token_to_id('[SEP]')), ('[CLS]', tokenizer.token_to_id('[CLS]')))
  return tokenizer


def _lowercase_of(folder):
  """do_lower_case of the tokenizer_config.json beside a vocab.txt; True without one
  (transformers' BertTokenizer default, and the uncased checkpoints')."""
  path = os.path.join(folder, 'tokenizer_config.json')
  if not os.path.isfile(path):
    return True
  try:
    with open(path, encoding='utf-8') as f:
      return bool(json.load(f).get('do_lower_case', True))
  except (OSError, ValueError) as e:
    raise UserError(f'cannot read {path}: {first_line(e)}') from None


def load_tokenizer(path, flag='--tokenizer'):
  """A `tokenizers.Tokenizer` from tokenizer.json, a WordPiece vocab.txt, or a folder holding
  one (tokenizer.json preferred); `flag` names where PATH came from in errors."""
  tk = _tokenizers()
  if os.path.isdir(path):
    for name in ('tokenizer.json', 'vocab.txt'):
      if os.path.isfile(os.path.join(path, name)):
        return load_tokenizer(os.path.join(path, name), flag)
    raise UserError(f'{flag}={path}: the folder holds no tokenizer.json or vocab.txt')
  if not os.path.isfile(path):
    raise UserError(f'{flag}={path}: no such file')
  if path.endswith('.txt'):
    return _wordpiece(path, _lowercase_of(os.path.dirname(path)))
  try:
    return tk.Tokenizer.from_file(path)
  except Exception as e:  # pylint: disable=broad-except  (the library raises Exception)
    raise UserError(f'{flag}={path}: not a tokenizers JSON file ({first_line(e)})') from None


def train_wordpiece(texts, vocab_size):
  """A WordPiece tokenizer of at most `vocab_size` tokens (more if the texts' alphabet needs
  them) trained with `tokenizers`' WordPieceTrainer on `texts`: BERT's uncased normaliser and
  pre-tokeniser, minimum pair frequency 2 (BertWordPieceTokenizer.train's default), the whole
  alphabet kept, special tokens [PAD]=0, [UNK], [CLS], [SEP], [MASK].

  Deterministic: the trainer numbers the '##c' continuation characters in the order it meets
  words in a randomly seeded hash map, and breaks ties between equally frequent merges by
  those numbers, so two processes could learn different vocabularies. Every '##c' is given to
  the trainer up front, in sorted order, which fixes the numbering; the tokenizer is then
  rebuilt from the learned vocabulary with only BERT's five special tokens."""
  tk = _tokenizers()
  if vocab_size <= len(SPECIAL_TOKENS):
    raise UserError(f'--vocab_size={vocab_size} must be larger than the '
                    f'{len(SPECIAL_TOKENS)} special tokens')
  normalizer = tk.normalizers.BertNormalizer(lowercase=True)
  alphabet = sorted({c for t in texts for c in normalizer.normalize_str(t) if not c.isspace()})
  tokenizer = tk.Tokenizer(tk.models.WordPiece(unk_token='[UNK]'))
  tokenizer.normalizer = normalizer
  tokenizer.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
  trainer = tk.trainers.WordPieceTrainer(
      vocab_size=vocab_size, min_frequency=2, show_progress=False,
      special_tokens=list(SPECIAL_TOKENS) + ['##' + c for c in alphabet],
      initial_alphabet=alphabet, limit_alphabet=max(len(alphabet), 1))
  tokenizer.train_from_iterator(texts, trainer)
  return _wordpiece(tokenizer.get_vocab(), lowercase=True)


def digest(*parts):
  """sha256 hex of the parts, each length-prefixed (str as UTF-8), so boundaries count."""
  h = hashlib.sha256()
  for part in parts:
    data = part if isinstance(part, bytes) else str(part).encode('utf-8')
    h.update(len(data).to_bytes(8, 'little') + data)
  return h.hexdigest()


def texts_digest(strings):
  """sha256 of a list of strings (each length-prefixed, so boundaries count)."""
  return digest(*(s.encode('utf-8') for s in strings))


def trained_tokenizer(train_texts, vocab_size):
  """train_wordpiece(train_texts, vocab_size), cached as CACHE/tokenizers/wordpiece-KEY.json
  (KEY: the texts, vocab_size and the tokenizers version)."""
  tk = _tokenizers()
  key = digest('wordpiece', texts_digest(train_texts), vocab_size, tk.__version__)[:20]
  path = os.path.join(common.cache_dir(), 'tokenizers', f'wordpiece-{key}.json')
  if os.path.isfile(path):
    return load_tokenizer(path)
  tokenizer = train_wordpiece(train_texts, vocab_size)
  _write_text(path, tokenizer.to_str())
  return tokenizer


def _write_text(path, text):
  """Writes `text` (UTF-8) through a temporary renamed into place (report.atomic_write); a
  failure is one UserError."""
  report.atomic_write(path, text.encode('utf-8'), parents=True,
                      hint='set FEDJAX_DRIFT_CACHE to a writable folder with room')


def check_pretrained(path):
  """Refuses a --pretrained that is not an existing folder, naming it."""
  if not os.path.exists(path):
    raise UserError(f'--pretrained={path} does not exist (a Hugging Face checkpoint folder: '
                    'config.json, model.safetensors and its tokenizer)')
  if not os.path.isdir(path):
    raise UserError(f'--pretrained={path} is a file; name the checkpoint\'s folder')


def resolve_tokenizer(tokenizer, pretrained, train_texts, vocab_size):
  """The run's tokenizer: --tokenizer=PATH; auto: the --pretrained folder's, else WordPiece
  trained on the training texts (trained_tokenizer)."""
  if tokenizer and tokenizer != 'auto':
    return load_tokenizer(tokenizer)
  if pretrained:
    check_pretrained(pretrained)
    if not any(os.path.isfile(os.path.join(pretrained, n)) for n in ('tokenizer.json',
                                                                     'vocab.txt')):
      raise UserError(f'--pretrained={pretrained} holds no tokenizer.json or vocab.txt; name '
                      'the checkpoint\'s tokenizer with --tokenizer=PATH')
    return load_tokenizer(pretrained, '--pretrained')
  return trained_tokenizer(train_texts, vocab_size)


def _pad_token(tokenizer):
  """(pad id, pad token): the tokenizer's padding settings, [PAD], <pad>, else id 0."""
  if tokenizer.padding:
    return tokenizer.padding['pad_id'], tokenizer.padding['pad_token']
  for token in ('[PAD]', '<pad>'):
    if tokenizer.token_to_id(token) is not None:
      return tokenizer.token_to_id(token), token
  return 0, tokenizer.id_to_token(0) or '[PAD]'


def encode(tokenizer, texts, max_seq_len):
  """texts -> int32 [N, 2, max_seq_len]: token ids (with the tokenizer's special tokens) and
  the attention mask, truncated and padded on the right. The tokenizer is left unchanged."""
  if max_seq_len < 2:
    raise UserError(f'--max_seq_len={max_seq_len} must be at least 2')
  tokenizer = type(tokenizer).from_str(tokenizer.to_str())  # a copy: padding set below
  pad_id, pad_token = _pad_token(tokenizer)
  tokenizer.enable_truncation(max_length=max_seq_len)
  tokenizer.enable_padding(length=max_seq_len, pad_id=pad_id, pad_token=pad_token)
  out = np.zeros((len(texts), 2, max_seq_len), np.int32)
  chunk = 4096  # bounds the Python lists of Encodings held at once
  for start in range(0, len(texts), chunk):
    encodings = tokenizer.encode_batch(list(texts[start:start + chunk]))
    out[start:start + len(encodings), 0] = [e.ids for e in encodings]
    out[start:start + len(encodings), 1] = [e.attention_mask for e in encodings]
  return out

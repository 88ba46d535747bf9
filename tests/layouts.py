"""Tiny copies of datasets in the layouts their publishers distribute them, one
self-contained writer each: write_X(dir) writes the files and returns what a reader must give
back, so a test can compare values, labels and structure (domain ids, groups) exactly.
CIFAR-100, Tiny-ImageNet, EMNIST and SVHN writers (helper sections below) return the path
they wrote instead; their pixel content is a public function of (label, index) for tests.
"""
import gzip
import io
import json
import os
import pickle
import re
import struct
import tarfile
import zipfile

import numpy as np

# FedBN's digit archive (github.com/med-air/FedBN, utils/data_preprocess.py): per domain
# folder, partitions/train_part{k}.pkl and test.pkl pickling (uint8 images, int labels).
DIGITS5_FOLDERS = {'MNIST': (28, 28), 'SVHN': (32, 32, 3), 'USPS': (16, 16),
                   'SynthDigits': (32, 32, 3), 'MNIST_M': (28, 28, 3)}
DOMAINNET_SITES = ('clipart', 'infograph', 'painting', 'quickdraw', 'real', 'sketch')
DOMAINNET_CLASSES = ('bird', 'feather', 'headphones', 'ice_cream', 'teapot', 'tiger', 'whale',
                     'windmill', 'wine_glass', 'zebra')


def _digit_images(rng, n, shape):
  y = np.arange(n) % 10
  rng.shuffle(y)
  return rng.integers(0, 256, (n,) + shape).astype(np.uint8), y.astype(np.int64)


def _numpy1_pickle(obj):
  """A pickle naming numpy 1.x's modules (numpy.core.multiarray), as FedBN's files do (they
  were written before numpy 2 renamed numpy.core to numpy._core)."""
  return pickle.dumps(obj, protocol=2).replace(b'numpy._core.multiarray',
                                               b'numpy.core.multiarray')


def write_digits5(root, parts=3, per_part=10, n_test=12, seed=0):
  """FedBN's digit archive under root: {MNIST,SVHN,USPS,SynthDigits,MNIST_M}/partitions/
  train_part{0..parts-1}.pkl and test.pkl, with the domains' own image shapes.

  Returns {folder: (train parts [(x, y)], (x_test, y_test))} as written (labels of MNIST's
  test split are stored [N, 1], which FedBN squeezes)."""
  rng = np.random.default_rng(seed)
  written = {}
  for folder, shape in DIGITS5_FOLDERS.items():
    os.makedirs(os.path.join(root, folder, 'partitions'), exist_ok=True)
    train = [_digit_images(rng, per_part, shape) for _ in range(parts)]
    for k, (x, y) in enumerate(train):
      with open(os.path.join(root, folder, 'partitions', f'train_part{k}.pkl'), 'wb') as f:
        f.write(_numpy1_pickle((x, y)) if folder == 'MNIST' else
                pickle.dumps((x, y), pickle.HIGHEST_PROTOCOL))
    test = _digit_images(rng, n_test, shape)
    stored = (test[0], test[1][:, None]) if folder == 'MNIST' else test
    with open(os.path.join(root, folder, 'test.pkl'), 'wb') as f:
      pickle.dump(stored, f, pickle.HIGHEST_PROTOCOL)
    written[folder] = (train, test)
  return written


def _encoded(image, fmt):
  buf = io.BytesIO()
  image.save(buf, format=fmt)
  return buf.getvalue()


def write_domainnet(root, per_split=(4, 2), zipped=('quickdraw', 'sketch'), seed=0):
  """FedBN's DomainNet layout under root: DomainNet/{site}_{train,test}.pkl pickling (image
  paths 'DomainNet/<site>/<class>/<file>.jpg', class names), the images unzipped as
  DomainNet/<site>/<class>/*.jpg, or for the `zipped` sites in DomainNet/<site>.zip as the
  DomainNet site ships them. Images have varied sizes, each one flat colour; every third is
  grey ('L'), one per site is a palette PNG (FedBN turns any non-3-band image grey).

  Returns {(split, site): [(class index, (r, g, b) expected after FedBN's conversion)]}."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  base = os.path.join(root, 'DomainNet')
  os.makedirs(base, exist_ok=True)
  written = {}
  for site in DOMAINNET_SITES:
    files = {}
    for split, n in zip(('train', 'test'), per_split):
      paths, names, expected = [], [], []
      for i in range(n):
        c = int(rng.integers(0, len(DOMAINNET_CLASSES)))
        colour = tuple(int(v) for v in rng.integers(20, 236, 3))
        size = (int(rng.integers(10, 40)), int(rng.integers(10, 40)))
        if i % 3 == 2:
          grey = round(0.299 * colour[0] + 0.587 * colour[1] + 0.114 * colour[2])
          data, colour = _encoded(Image.new('L', size, grey), 'JPEG'), (grey,) * 3
        elif i == 1:
          pal = Image.new('RGB', size, colour).convert('P', palette=Image.ADAPTIVE)
          grey = int(np.asarray(pal.convert('L'))[0, 0])
          data, colour = _encoded(pal, 'PNG'), (grey,) * 3
        else:
          data = _encoded(Image.new('RGB', size, colour), 'JPEG')
        name = f'{site}/{DOMAINNET_CLASSES[c]}/{site}_{split}_{i:03d}.jpg'
        files[name] = data
        paths.append(f'DomainNet/{name}')
        names.append(DOMAINNET_CLASSES[c])
        expected.append((c, colour))
      # One site pickles numpy arrays of strings, the others lists, as either may occur.
      pair = (np.asarray(paths), np.asarray(names)) if site == 'real' else (paths, names)
      with open(os.path.join(base, f'{site}_{split}.pkl'), 'wb') as f:
        pickle.dump(pair, f, pickle.HIGHEST_PROTOCOL)
      written[split, site] = expected
    if site in zipped:
      with zipfile.ZipFile(os.path.join(base, f'{site}.zip'), 'w') as z:
        for name, data in files.items():
          z.writestr(name, data)
    else:
      for name, data in files.items():
        os.makedirs(os.path.dirname(os.path.join(base, name)), exist_ok=True)
        with open(os.path.join(base, name), 'wb') as f:
          f.write(data)
  return written


def write_hf_dataset(path, n_train=8, n_test=4, seed=0):
  """A Hugging Face DatasetDict saved with save_to_disk: 'image' (Image feature, 6x6, grey
  except one RGB training image), 'label' (ClassLabel, 3 classes), 'writer_id' (int64) and
  'style' (string) columns. Returns {split: (uint8 images [N, 6, 6, 3], labels, writer ids,
  styles)}, images as the loader must give them (grey repeated over RGB)."""
  import datasets  # pylint: disable=g-import-not-at-top
  from PIL import Image  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  features = datasets.Features({'image': datasets.Image(),
                                'label': datasets.ClassLabel(names=['ant', 'bee', 'cat']),
                                'writer_id': datasets.Value('int64'),
                                'style': datasets.Value('string')})
  splits, expected = {}, {}
  for split, n in (('train', n_train), ('test', n_test)):
    x = rng.integers(0, 256, (n, 6, 6, 3)).astype(np.uint8)
    pictures = []
    for i in range(n):
      if split == 'train' and i == 1:
        pictures.append(Image.fromarray(x[i], 'RGB'))
      else:
        x[i] = x[i, :, :, :1]
        pictures.append(Image.fromarray(x[i, :, :, 0], 'L'))
    y = np.arange(n) % 3
    writers = np.asarray([100 + 7 * (i % 3) for i in range(n)])
    styles = [('ink', 'pencil')[i % 2] for i in range(n)]
    splits[split] = datasets.Dataset.from_dict(
        {'image': pictures, 'label': y.tolist(), 'writer_id': writers.tolist(),
         'style': styles}, features=features)
    expected[split] = (x, y, writers, np.asarray(styles))
  datasets.DatasetDict(splits).save_to_disk(path)
  return expected


# ---------------------------------------------------------------------------------------------
# CIFAR-100: cifar-100-python.tar.gz

# meta's names, in the official (alphabetical) order, and each fine class's superclass.
CIFAR100_FINE = (
    'apple aquarium_fish baby bear beaver bed bee beetle bicycle bottle bowl boy bridge bus '
    'butterfly camel can castle caterpillar cattle chair chimpanzee clock cloud cockroach couch '
    'crab crocodile cup dinosaur dolphin elephant flatfish forest fox girl hamster house '
    'kangaroo keyboard lamp lawn_mower leopard lion lizard lobster man maple_tree motorcycle '
    'mountain mouse mushroom oak_tree orange orchid otter palm_tree pear pickup_truck pine_tree '
    'plain plate poppy porcupine possum rabbit raccoon ray road rocket rose sea seal shark shrew '
    'skunk skyscraper snail snake spider squirrel streetcar sunflower sweet_pepper table tank '
    'telephone television tiger tractor train trout tulip turtle wardrobe whale willow_tree wolf '
    'woman worm').split()
CIFAR100_COARSE = (
    'aquatic_mammals fish flowers food_containers fruit_and_vegetables '
    'household_electrical_devices household_furniture insects large_carnivores '
    'large_man-made_outdoor_things large_natural_outdoor_scenes large_omnivores_and_herbivores '
    'medium_mammals non-insect_invertebrates people reptiles small_mammals trees vehicles_1 '
    'vehicles_2').split()
CIFAR100_COARSE_OF_FINE = (
    4, 1, 14, 8, 0, 6, 7, 7, 18, 3, 3, 14, 9, 18, 7, 11, 3, 9, 7, 11, 6, 11, 5, 10, 7, 6, 13,
    15, 3, 15, 0, 11, 1, 10, 12, 14, 16, 9, 11, 5, 5, 19, 8, 8, 15, 13, 14, 17, 18, 10, 16, 4,
    17, 4, 2, 0, 17, 4, 18, 17, 10, 3, 2, 12, 12, 16, 12, 1, 9, 19, 2, 10, 0, 1, 16, 12, 9, 13,
    15, 13, 16, 19, 2, 4, 6, 19, 5, 5, 8, 19, 18, 1, 2, 15, 6, 0, 17, 8, 14, 13)


def cifar100_image(fine, k):
  """The 32x32x3 image number k of fine class `fine`: R encodes the class, G the row and B
  the column, so a swapped axis or channel shows."""
  rows, cols = np.meshgrid(np.arange(32), np.arange(32), indexing='ij')
  return np.stack([np.full((32, 32), 2 * fine + k), 4 * rows, 7 * cols + k], -1).astype(np.uint8)


class _Python2Pickler(pickle._Pickler):  # pylint: disable=protected-access
  """Pickles as Python 2's cPickle did for CIFAR: protocol 2, str and bytes as BINSTRING
  (Python 3 reads them back as bytes with encoding='bytes'), numpy under numpy.core."""
  dispatch = dict(pickle._Pickler.dispatch)  # pylint: disable=protected-access

  def save_py2_string(self, obj):
    raw = obj.encode('latin1') if isinstance(obj, str) else obj
    if len(raw) < 256:
      self.write(pickle.SHORT_BINSTRING + bytes([len(raw)]) + raw)
    else:
      self.write(pickle.BINSTRING + struct.pack('<i', len(raw)) + raw)
    self.memoize(obj)

  dispatch[bytes] = save_py2_string
  dispatch[str] = save_py2_string

  def save_global(self, obj, name=None):
    module = getattr(obj, '__module__', '').replace('numpy._core', 'numpy.core')
    self.write(pickle.GLOBAL + f'{module}\n{name or obj.__qualname__}\n'.encode('ascii'))
    self.memoize(obj)


def _python2_pickle(obj):
  out = io.BytesIO()
  _Python2Pickler(out, protocol=2).dump(obj)
  return out.getvalue()


def write_cifar100_tar(directory, per_class=2, test_per_class=1):
  """cifar-100-python.tar.gz: the folder cifar-100-python/ and its meta, test, train, each a
  protocol-2 pickle with the official keys; data is [N, 3072] uint8 (R, G, B planes).
  Examples are class-major: fine class c's k-th image is cifar100_image(c, k)."""
  os.makedirs(directory, exist_ok=True)
  def split(n, batch_label):
    fine = [c for c in range(100) for _ in range(n)]
    x = np.stack([cifar100_image(c, k) for c in range(100) for k in range(n)])
    return {b'filenames': [f'{CIFAR100_FINE[c]}_s_{i:06d}.png'.encode() for i, c in
                           enumerate(fine)],
            b'batch_label': batch_label, b'fine_labels': fine,
            b'coarse_labels': [CIFAR100_COARSE_OF_FINE[c] for c in fine],
            b'data': x.transpose(0, 3, 1, 2).reshape(len(x), -1)}
  members = {
      'meta': {b'fine_label_names': [n.encode() for n in CIFAR100_FINE],
               b'coarse_label_names': [n.encode() for n in CIFAR100_COARSE]},
      'test': split(test_per_class, b'testing batch 1 of 1'),
      'train': split(per_class, b'training batch 1 of 1')}
  path = os.path.join(directory, 'cifar-100-python.tar.gz')
  with tarfile.open(path, 'w:gz') as tar:
    folder = tarfile.TarInfo('cifar-100-python')
    folder.type, folder.mode = tarfile.DIRTYPE, 0o755
    tar.addfile(folder)
    for name, obj in members.items():
      raw = _python2_pickle(obj)
      info = tarfile.TarInfo(f'cifar-100-python/{name}')
      info.size = len(raw)
      tar.addfile(info, io.BytesIO(raw))
  return path


# ---------------------------------------------------------------------------------------------
# Tiny-ImageNet: tiny-imagenet-200.zip

# The first WordNet ids of the official wnids.txt, which is not sorted.
TINY_IMAGENET_WNIDS = ('n02124075', 'n04067472', 'n04540053', 'n04099969', 'n07749582',
                       'n01641577', 'n02802426', 'n09246464', 'n07920052', 'n03970156')


def tiny_imagenet_colour(label):
  """The flat RGB colour of class `label`'s images (flat, so JPEG keeps it within a few)."""
  return (30 + 20 * label, 200 - 15 * label, 90 + (37 * label) % 100)


def write_tiny_imagenet_zip(directory, classes=3, per_class=2, val_per_class=1):
  """tiny-imagenet-200.zip with the official members: wnids.txt, words.txt,
  train/<wnid>/<wnid>_boxes.txt and train/<wnid>/images/<wnid>_<k>.JPEG, val/images/
  val_<k>.JPEG with val/val_annotations.txt (file, wnid, box; tab separated), and unlabelled
  test/images/test_<k>.JPEG. Class c (c-th line of wnids.txt) is tiny_imagenet_colour(c);
  train image 0 of the last class is a greyscale JPEG, as some real ones are. Val images
  are interleaved across classes (val_0 is class 0, val_1 class 1, ...)."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  os.makedirs(directory, exist_ok=True)
  wnids = TINY_IMAGENET_WNIDS[:classes]
  def jpeg(label, grey=False):
    image = Image.new('RGB', (64, 64), tiny_imagenet_colour(label))
    out = io.BytesIO()
    (image.convert('L') if grey else image).save(out, format='JPEG', quality=95)
    return out.getvalue()
  root = 'tiny-imagenet-200/'
  path = os.path.join(directory, 'tiny-imagenet-200.zip')
  with zipfile.ZipFile(path, 'w', zipfile.ZIP_DEFLATED) as z:
    z.writestr(root, b'')
    z.writestr(root + 'test/', b'')
    z.writestr(root + 'test/images/', b'')
    for k in range(2):
      z.writestr(f'{root}test/images/test_{k}.JPEG', jpeg(k % classes))
    z.writestr(root + 'train/', b'')
    for c, wnid in enumerate(wnids):
      z.writestr(f'{root}train/{wnid}/', b'')
      z.writestr(f'{root}train/{wnid}/images/', b'')
      boxes = ''.join(f'{wnid}_{k}.JPEG\t0\t0\t63\t63\n' for k in range(per_class))
      z.writestr(f'{root}train/{wnid}/{wnid}_boxes.txt', boxes)
      for k in range(per_class):
        grey = c == classes - 1 and k == 0
        z.writestr(f'{root}train/{wnid}/images/{wnid}_{k}.JPEG', jpeg(c, grey))
    z.writestr(root + 'val/', b'')
    z.writestr(root + 'val/images/', b'')
    lines = []
    for i in range(classes * val_per_class):
      z.writestr(f'{root}val/images/val_{i}.JPEG', jpeg(i % classes))
      lines.append(f'val_{i}.JPEG\t{wnids[i % classes]}\t0\t0\t63\t63\n')
    z.writestr(root + 'val/val_annotations.txt', ''.join(lines))
    z.writestr(root + 'wnids.txt', ''.join(w + '\n' for w in wnids))
    z.writestr(root + 'words.txt', ''.join(f'{w}\tclass {w}\n' for w in TINY_IMAGENET_WNIDS))
  return path


# ---------------------------------------------------------------------------------------------
# EMNIST: NIST's gzip.zip

EMNIST_CLASSES = {'byclass': 62, 'bymerge': 47, 'balanced': 47, 'letters': 26, 'digits': 10,
                  'mnist': 10}


def emnist_image(label, k):
  """The upright 28x28 image k of class `label`: an 'L' (a bar down the left side, a foot
  along the bottom), whose brightness encodes the label."""
  image = np.zeros((28, 28), np.uint8)
  value = 40 + 3 * label + k
  image[4:24, 5:8] = value   # the upright stroke, on the left
  image[21:24, 5:20] = value  # the foot, at the bottom, pointing right
  return image


def write_emnist_zip(directory, split='byclass', per_class=2, test_per_class=1):
  """NIST's gzip.zip: gzip/emnist-<split>-{train,test}-{images-idx3,labels-idx1}-ubyte.gz
  and gzip/emnist-<split>-mapping.txt, for `split` (a name or a tuple of names). Images are
  stored transposed, as NIST stores them; `letters` labels are stored 1..26, as NIST's.
  Class c's k-th example is emnist_image(c, k) (c counted from 0 for every split)."""
  os.makedirs(directory, exist_ok=True)
  def idx(array):
    header = struct.pack('>I', 0x800 + array.ndim) + b''.join(
        struct.pack('>I', d) for d in array.shape)
    return gzip.compress(header + array.astype(np.uint8).tobytes())
  path = os.path.join(directory, 'gzip.zip')
  with zipfile.ZipFile(path, 'w', zipfile.ZIP_DEFLATED) as z:
    z.writestr('gzip/', b'')
    for s in (split,) if isinstance(split, str) else split:
      classes, shift = EMNIST_CLASSES[s], 1 if s == 'letters' else 0
      for part, n in (('train', per_class), ('test', test_per_class)):
        labels = np.array([c for c in range(classes) for _ in range(n)])
        images = np.stack([emnist_image(c, k) for c in range(classes) for k in range(n)])
        z.writestr(f'gzip/emnist-{s}-{part}-images-idx3-ubyte.gz',
                   idx(images.transpose(0, 2, 1)))  # NIST's column-major storage
        z.writestr(f'gzip/emnist-{s}-{part}-labels-idx1-ubyte.gz', idx(labels + shift))
      z.writestr(f'gzip/emnist-{s}-mapping.txt',
                 ''.join(f'{c + shift} {48 + c}\n' for c in range(classes)))
  return path


# ---------------------------------------------------------------------------------------------
# SVHN: train_32x32.mat and test_32x32.mat

def svhn_image(digit, k):
  """The 32x32x3 image k of `digit`: R encodes the digit, G the row, B the column."""
  rows, cols = np.meshgrid(np.arange(32), np.arange(32), indexing='ij')
  return np.stack([np.full((32, 32), 25 * digit + k), 5 * rows, 3 * cols + k],
                  -1).astype(np.uint8)


def write_svhn_mat(directory, per_class=2, test_per_class=1):
  """train_32x32.mat and test_32x32.mat as the official MATLAB v5 files: X uint8
  [32, 32, 3, N] and y uint8 [N, 1] with digit 0 stored as 10. Examples cycle through the
  digits 0..9 (example i is svhn_image(i % 10, i // 10)). Returns the directory."""
  import scipy.io  # pylint: disable=g-import-not-at-top
  os.makedirs(directory, exist_ok=True)
  for name, n in (('train_32x32.mat', per_class), ('test_32x32.mat', test_per_class)):
    digits = [i % 10 for i in range(10 * n)]
    x = np.stack([svhn_image(d, i // 10) for i, d in enumerate(digits)], -1)
    y = np.array([[d if d else 10] for d in digits], np.uint8)
    scipy.io.savemat(os.path.join(directory, name), {'X': x, 'y': y}, format='5',
                     do_compression=True)
  return directory


# ---------------------------------------------------------------------------------------------
# Text: AG News (ag_news_csv.tgz), SST-5 (trainDevTestTrees_PTB.zip), CSV / JSONL files

AG_NEWS_CLASSES = ('World', 'Sports', 'Business', 'Sci/Tech')
# Words typical of each class, so that a model can learn something from the tiny copies.
TOPIC_WORDS = (('minister', 'election', 'talks', 'troops'), ('match', 'season', 'coach', 'wins'),
               ('shares', 'profit', 'market', 'oil'), ('software', 'space', 'internet', 'chip'))


def topic_text(label, k):
  """A short deterministic text of class `label`, with punctuation, quotes and a backslash as
  AG News's descriptions have them."""
  words = TOPIC_WORDS[label]
  return f'{words[k % 4]} {words[(k + 1) % 4]}, "{words[(k + 2) % 4]}" - #{k} \\ {words[0]}!'


def write_ag_news_tgz(directory, per_class=3, test_per_class=2):
  """ag_news_csv.tgz as Xiang Zhang distributes it: ag_news_csv/ with train.csv, test.csv
  (no header; every field quoted: "class index 1-4","title","description"), classes.txt and
  readme.txt. Returns {'train': (texts, labels 0..3), 'test': ...}, texts as title + " " +
  description."""
  os.makedirs(directory, exist_ok=True)
  expected, members = {}, {}
  for split, n in (('train', per_class), ('test', test_per_class)):
    rows, texts, labels = [], [], []
    for k in range(n):
      for c in range(4):
        title, description = f'{AG_NEWS_CLASSES[c]} story {k} (AP)', topic_text(c, k)
        rows.append(','.join('"' + v.replace('"', '""') + '"' for v in (str(c + 1), title,
                                                                       description)))
        texts.append(f'{title} {description}')
        labels.append(c)
    members[f'ag_news_csv/{split}.csv'] = ('\n'.join(rows) + '\n').encode('utf-8')
    expected[split] = (texts, np.asarray(labels))
  members['ag_news_csv/classes.txt'] = ''.join(c + '\n' for c in AG_NEWS_CLASSES).encode()
  members['ag_news_csv/readme.txt'] = b'AG\'s News Topic Classification Dataset\n'
  path = os.path.join(directory, 'ag_news_csv.tgz')
  with tarfile.open(path, 'w:gz') as tar:
    folder = tarfile.TarInfo('ag_news_csv')
    folder.type, folder.mode = tarfile.DIRTYPE, 0o755
    tar.addfile(folder)
    for name, raw in members.items():
      info = tarfile.TarInfo(name)
      info.size = len(raw)
      tar.addfile(info, io.BytesIO(raw))
  return expected


SENTIMENT_WORDS = ('awful', 'dull', 'fine', 'good', 'brilliant')


def ptb_tree(label, words):
  """A right-branching PTB sentiment tree over `words`: leaves '(2 word)' (the sentiment word
  itself carries `label`), every inner node `label`, as SST's lines nest."""
  leaves = [f'({label if w in SENTIMENT_WORDS else 2} {w})' for w in words]
  tree = leaves[-1]
  for leaf in reversed(leaves[:-1]):
    tree = f'({label} {leaf} {tree})'
  return tree


def sst5_words(label, k):
  """The leaves of sentence k of class `label`: PTB escapes (-LRB-, 's) and a non-ASCII word."""
  return ['The', 'film', "'s", 'plot', '-LRB-', f'part{k}', '-RRB-', 'is',
          SENTIMENT_WORDS[label], 'café' if k % 2 else 'and', '.']


def write_sst5_zip(directory, per_class=2, dev_per_class=1, test_per_class=1, dev=True):
  """trainDevTestTrees_PTB.zip as Stanford distributes it: trees/train.txt, dev.txt, test.txt,
  one PTB tree per line (UTF-8). Returns {'train': (texts, labels 0..4), 'val': ..., 'test':
  ...}, texts as the leaves joined by spaces; dev=False leaves dev.txt out."""
  os.makedirs(directory, exist_ok=True)
  expected, members = {}, {}
  sizes = (('train', 'train', per_class), ('val', 'dev', dev_per_class),
           ('test', 'test', test_per_class))
  for split, name, n in sizes:
    if split == 'val' and not dev:
      continue
    lines, texts, labels = [], [], []
    for k in range(n):
      for c in range(5):
        words = sst5_words(c, k)
        lines.append(ptb_tree(c, words))
        texts.append(' '.join(words))
        labels.append(c)
    members[f'trees/{name}.txt'] = ('\n'.join(lines) + '\n').encode('utf-8')
    expected[split] = (texts, np.asarray(labels))
  path = os.path.join(directory, 'trainDevTestTrees_PTB.zip')
  with zipfile.ZipFile(path, 'w', zipfile.ZIP_DEFLATED) as z:
    z.writestr('trees/', b'')
    for name, raw in members.items():
      z.writestr(name, raw)
  return expected


def write_text_files(directory, kind='csv', per_class=2, classes=('neg', 'pos')):
  """A folder of train.<kind> and test.<kind> (kind csv: a header row text,label; jsonl: one
  {"text": ..., "label": ...} object per line), string labels. Returns {split: (texts, label
  ids in sorted order of the names)}."""
  import csv  # pylint: disable=g-import-not-at-top
  import json  # pylint: disable=g-import-not-at-top
  os.makedirs(directory, exist_ok=True)
  expected = {}
  for split, n in (('train', per_class), ('test', 1)):
    rows = [(f'{name} review, number {k}: "{name}" again', name)
            for k in range(n) for name in classes]
    path = os.path.join(directory, f'{split}.{kind}')
    with open(path, 'w', encoding='utf-8', newline='') as f:
      if kind == 'csv':
        writer = csv.writer(f)
        writer.writerow(['text', 'label'])
        writer.writerows(rows)
      else:
        f.writelines(json.dumps({'text': t, 'label': y}) + '\n' for t, y in rows)
    names = sorted(classes)
    expected[split] = ([t for t, _ in rows], np.asarray([names.index(y) for _, y in rows]))
  return expected


# --- Natural federated datasets: TFF's h5 files and LEAF's JSON ---------------------------------
# TFF (tensorflow_federated/python/simulation/datasets): fed_emnist_{train,test}.h5 with
# examples/<client_id>/{pixels float32 [n, 28, 28] (1.0 = background), label int32 [n]};
# shakespeare_{train,test}.h5 with examples/<client_id>/snippets (variable-length byte strings).
# LEAF (TalwalkarLab/leaf, data/<name>/data/{train,test}/*.json): {"users", "num_samples",
# "user_data": {uid: {"x", "y"}}}, a split's users spread over several files.

def femnist_clients(writers=4, seed=0):
  """{split: {writer_id: (pixels float32 [n, 28, 28] in k/255, labels int [n])}}: TFF/LEAF-
  style writer ids, unequal sizes, ink on a 1.0 background; the first writer's training
  labels are all 62 classes once, so the labels span FEMNIST's 0..61."""
  rng = np.random.default_rng(seed)
  out = {'train': {}, 'test': {}}
  for w in range(writers):
    uid = f'f{w:04d}_{(7 * w) % 100:02d}'
    for split, n in (('train', 62 if w == 0 else 3 + w % 5), ('test', 1 + w % 2)):
      ink = rng.integers(0, 256, (n, 28, 28)) * (rng.random((n, 28, 28)) < 0.2)
      labels = rng.permutation(62) if n == 62 else rng.integers(0, 62, n)
      out[split][uid] = ((1.0 - ink / 255).astype(np.float32), labels)
  return out


def write_femnist_h5(directory, writers=4, seed=0):
  """TFF's fed_emnist_train.h5 and fed_emnist_test.h5 in `directory`; returns femnist_clients."""
  import h5py  # pylint: disable=g-import-not-at-top (optional: the federated extra)
  clients = femnist_clients(writers, seed)
  os.makedirs(directory, exist_ok=True)
  for split, data in clients.items():
    with h5py.File(os.path.join(directory, f'fed_emnist_{split}.h5'), 'w') as f:
      for uid, (pixels, labels) in data.items():
        g = f.create_group(f'examples/{uid}')
        g.create_dataset('pixels', data=pixels)
        g.create_dataset('label', data=labels.astype(np.int32))
  return clients


def _write_leaf(directory, split_users, files=2):
  """LEAF's data/train and data/test under `directory`: each split's users spread over
  `files` JSON files named as LEAF's split_data.py names them."""
  for split, users in split_users.items():
    folder = os.path.join(directory, 'data', split)
    os.makedirs(folder, exist_ok=True)
    ids = list(users)
    for k in range(files):
      mine = ids[k::files]
      body = {'users': mine, 'num_samples': [len(users[u]['y']) for u in mine],
              'user_data': {u: users[u] for u in mine}}
      name = f'all_data_{k}_niid_0_keep_0_{split}_9.json'
      with open(os.path.join(folder, name), 'w', encoding='utf-8') as f:
        json.dump(body, f)


def write_femnist_leaf(directory, writers=4, seed=0):
  """LEAF FEMNIST JSON (x: 784 floats per image, y: ints) under directory/data/{train,test};
  returns femnist_clients."""
  clients = femnist_clients(writers, seed)
  _write_leaf(directory, {split: {u: {'x': p.reshape(len(p), -1).tolist(), 'y': y.tolist()}
                                  for u, (p, y) in data.items()}
                          for split, data in clients.items()})
  return clients


# Lines every role speaks a share of: all 26 letters in both cases, digits and punctuation, so
# the next characters cover most of LEAF's 80 symbols.
SHAKESPEARE_LINES = (
    'To be, or not to be: that is the question.\nWhether \'tis nobler in the mind to suffer',
    'THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG; 0123456789 & [so] (it) goes -- far?',
    'Sphinx of black quartz, judge my vow!  Pack my box with five dozen liquor jugs.',
    'Zounds! Vex not Jack; my quiz "wolves" fight big kebabs: 42 > 7 } done.',
)


def shakespeare_snippets(roles=3):
  """{split: {role: [snippets]}}: TFF-style role ids, unequal amounts of text per role."""
  out = {'train': {}, 'test': {}}
  for r in range(roles):
    role = f'THE_TRAGEDY_OF_HAMLET_PLAYER_{r}'
    lines = [SHAKESPEARE_LINES[(r + k) % len(SHAKESPEARE_LINES)] for k in range(3 + r % 3)]
    out['train'][role] = lines
    out['test'][role] = [SHAKESPEARE_LINES[(r + 2) % len(SHAKESPEARE_LINES)] * 2]
  return out


def write_shakespeare_h5(directory, roles=3):
  """TFF's shakespeare_train.h5 and shakespeare_test.h5 in `directory`; returns
  shakespeare_snippets."""
  import h5py  # pylint: disable=g-import-not-at-top (optional: the federated extra)
  snippets = shakespeare_snippets(roles)
  os.makedirs(directory, exist_ok=True)
  for split, data in snippets.items():
    with h5py.File(os.path.join(directory, f'shakespeare_{split}.h5'), 'w') as f:
      for role, lines in data.items():
        f.create_group(f'examples/{role}').create_dataset(
            'snippets', data=[s.encode('utf-8') for s in lines], dtype=h5py.string_dtype('utf-8'))
  return snippets


def leaf_windows(text, seq_len=80):
  """LEAF's txt_to_data (shakespeare/preprocess/gen_all_data.py), as its loop writes it."""
  text = text.replace('\n', ' ')
  text = re.sub(r'   *', r' ', text)
  xs, ys = [], []
  for i in range(0, len(text) - seq_len, 1):
    xs.append(text[i:i + seq_len])
    ys.append(text[i + seq_len])
  return xs, ys


def write_shakespeare_leaf(directory, roles=3):
  """LEAF Shakespeare JSON (x: 80-character strings, y: the next character) under
  directory/data/{train,test}; returns {split: {role: (xs, ys)}}."""
  written = {split: {role: leaf_windows(' '.join(lines)) for role, lines in data.items()}
             for split, data in shakespeare_snippets(roles).items()}
  _write_leaf(directory, {split: {r: {'x': xs, 'y': ys} for r, (xs, ys) in data.items()}
                          for split, data in written.items()})
  return written

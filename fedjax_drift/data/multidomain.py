"""FedBN's multi-domain benchmarks (FedFOR §4.3, Tables 3-5), read from the files FedBN's
public code distributes (github.com/med-air/FedBN, utils/data_utils.py and the federated/
scripts). Each is one Dataset whose examples carry a domain id (domains_train/_test) and the
domain names, so --partition=domains can give each domain its own clients.

digits5 (FedFOR Table 4): FedBN's digit archive, one folder per domain, in FedBN's order
  0 MNIST/  1 SVHN/  2 USPS/  3 SynthDigits/  4 MNIST_M/
  each with partitions/train_part{0..9}.pkl (743 or 744 training images each) and test.pkl,
  plain pickles of (images uint8, labels). FedBN's transforms give every domain 28x28 RGB:
  SVHN, USPS and SynthDigits are resized to 28x28 (bilinear), MNIST and USPS are grey
  repeated to 3 channels. FedBN trains on the first int(10 * --percent) parts (default
  --percent=0.1: part 0 only); all parts are imported, and --digits5_parts=N keeps parts
  0..N-1 (each training example's part is the group column 'fedbn_part').
domainnet (FedFOR Tables 3 and 5): FedBN's 10-class split of six DomainNet domains,
  DomainNet/{site}_train.pkl and {site}_test.pkl, pickled (image paths, class names), plus
  the images from the DomainNet site: DomainNet/{site}/<class>/*.jpg (unzipped) or
  DomainNet/{site}.zip. Sites in FedBN's order: clipart, infograph, painting, quickdraw,
  real, sketch; classes in FedBN's label_dict order. An image without three bands becomes
  grey repeated to RGB (FedBN's DomainNetDataset), then it is resized to --image_size
  (FedBN: 256; default here 64, see docs/data.md for memory). Examples keep the split files'
  order (FedBN trains on the first 5% of the smallest site's count, a prefix).
Pickles are read with formats' restricted unpickler: numpy arrays and plain containers only.
"""
import io
import os
import zipfile

import numpy as np

from fedjax_drift.data import common, formats, images
from fedjax_drift.errors import UserError

DIGITS5 = (('mnist', 'MNIST'), ('svhn', 'SVHN'), ('usps', 'USPS'),
           ('synth_digits', 'SynthDigits'), ('mnist_m', 'MNIST_M'))
DIGITS5_SIZE = 28  # FedBN's DigitModel input
DIGITS5_MAX_PARTS = 10
PART_GROUP = 'fedbn_part'
DOMAINNET_SITES = ('clipart', 'infograph', 'painting', 'quickdraw', 'real', 'sketch')
DOMAINNET_CLASSES = ('bird', 'feather', 'headphones', 'ice_cream', 'teapot', 'tiger', 'whale',
                     'windmill', 'wine_glass', 'zebra')
DOMAINNET_SIZE = 64
FOLDERS = tuple(f for _, f in DIGITS5) + DOMAINNET_SITES  # read by the readers, not walked


def read_pickle(path):
  """The object pickled in `path`, allowing numpy arrays and plain containers only."""
  try:
    with open(path, 'rb') as f:
      # latin1 reads numpy arrays pickled by Python 2 too; Python 3 pickles are unaffected.
      return formats._ArraysOnly(f, encoding='latin1').load()  # pylint: disable=protected-access
  except OSError as e:
    raise UserError(f'cannot read {path}: {e}') from None
  except Exception as e:  # pylint: disable=broad-except  (truncated or foreign pickles)
    raise UserError(f'{path} is not a pickle of numpy arrays ({type(e).__name__}: '
                    f'{str(e).splitlines()[0] if str(e) else "unreadable"})') from None


def _pair(obj, path, what):
  if not isinstance(obj, (tuple, list)) or len(obj) != 2:
    raise UserError(f'{path} does not hold a pair ({what}), as FedBN\'s files do')
  return obj


# --- digits5 -------------------------------------------------------------------------------


def read_digits_pickle(path):
  """FedBN's (images, labels) pickle -> (uint8 [N, H, W] or [N, H, W, 3], int64 [N])."""
  x, y = _pair(read_pickle(path), path, 'images, labels')
  x, y = np.asarray(x), np.asarray(y).reshape(-1)  # FedBN squeezes [N, 1] labels too
  if x.dtype != np.uint8 or not (x.ndim == 3 or (x.ndim == 4 and x.shape[-1] == 3)):
    raise UserError(f'{path}: expected uint8 images [N, H, W] or [N, H, W, 3], got '
                    f'{x.dtype} {x.shape}')
  if len(y) != len(x) or not np.issubdtype(y.dtype, np.integer) or (
      len(y) and (y.min() < 0 or y.max() > 9)):
    raise UserError(f'{path}: expected {len(x)} digit labels 0..9, got {y.dtype} {y.shape}')
  return x, y.astype(np.int64)


def digits_to_rgb(x, size=DIGITS5_SIZE):
  """FedBN's digit transforms without the normalisation: Resize([size, size]) (bilinear) where
  the size differs, then grey repeated to 3 channels. uint8 [N, H, W(, 3)] -> [N, S, S, 3]."""
  if x.shape[1:3] != (size, size):
    stack = images.ImageStack(len(x), size)
    for i, image in enumerate(x):
      stack.put(i, image)
    x = stack.result()
  if x.ndim == 3:
    x = x[..., None]
  return np.repeat(x, 3, axis=-1) if x.shape[-1] == 1 else x


def _digits_domain(folder, size):
  """One domain folder -> (x_train, y_train, part id per training example, x_test, y_test)."""
  parts = []
  while len(parts) < DIGITS5_MAX_PARTS:
    path = os.path.join(folder, 'partitions', f'train_part{len(parts)}.pkl')
    if not os.path.exists(path):
      break
    parts.append(read_digits_pickle(path))
  if not parts:
    raise UserError(f'missing {os.path.join(folder, "partitions", "train_part0.pkl")} '
                    '(FedBN\'s digit archive has partitions/train_part{0..9}.pkl per domain)')
  test = os.path.join(folder, 'test.pkl')
  if not os.path.exists(test):
    raise UserError(f'missing {test} (FedBN\'s digit archive has test.pkl per domain)')
  x_test, y_test = read_digits_pickle(test)
  part_ids = np.concatenate([np.full(len(y), k, np.int32) for k, (_, y) in enumerate(parts)])
  x_train = digits_to_rgb(np.concatenate([x for x, _ in parts]), size)
  return (x_train, np.concatenate([y for _, y in parts]), part_ids,
          digits_to_rgb(x_test, size), y_test)


def read_digits5(root, image_size=0):
  """The five domain folders under `root` -> a validated Dataset with domain ids, every train
  part (group 'fedbn_part') and images [S, S, 3], S = image_size or 28 (FedBN's size)."""
  size = image_size or DIGITS5_SIZE
  missing = [os.path.join(root, f) for _, f in DIGITS5 if not os.path.isdir(os.path.join(root, f))]
  if missing:
    raise UserError(f'digits5: missing the domain folder {missing[0]} (FedBN\'s digit archive '
                    f'holds {", ".join(f for _, f in DIGITS5)})')
  domains = [_digits_domain(os.path.join(root, folder), size) for _, folder in DIGITS5]
  cat = lambda k: np.concatenate([d[k] for d in domains])
  ids = lambda k: np.concatenate([np.full(len(d[k]), i, np.int32) for i, d in enumerate(domains)])
  return common.validate('digits5', cat(0), cat(1), cat(3), cat(4),
                         domains_train=ids(1), domains_test=ids(4),
                         domain_names=tuple(name for name, _ in DIGITS5),
                         groups={PART_GROUP: cat(2)})


def select_parts(ds, parts):
  """The Dataset with only the training examples of FedBN train parts 0..parts-1."""
  if parts <= 0 or PART_GROUP not in (ds.groups or {}):
    return ds
  available = int(ds.groups[PART_GROUP].max()) + 1
  if parts > available:
    raise UserError(f'--digits5_parts={parts}: {ds.name} has {available} train parts '
                    f'(FedBN\'s archive has {DIGITS5_MAX_PARTS})')
  keep = ds.groups[PART_GROUP] < parts
  return ds._replace(x_train=ds.x_train[keep], y_train=ds.y_train[keep],
                     domains_train=ds.domains_train[keep],
                     groups={k: v[keep] for k, v in ds.groups.items()})


# --- domainnet ----------------------------------------------------------------------------


def read_domainnet_split(path):
  """FedBN's {site}_{train,test}.pkl -> (image paths, labels 0..9 in FedBN's class order)."""
  paths, names = _pair(read_pickle(path), path, 'image paths, class names')
  paths, names = [str(p) for p in np.asarray(paths).reshape(-1)], np.asarray(names).reshape(-1)
  if len(paths) != len(names):
    raise UserError(f'{path}: {len(paths)} image paths but {len(names)} labels')
  unknown = sorted({str(n) for n in names} - set(DOMAINNET_CLASSES))
  if unknown:
    raise UserError(f'{path}: class {unknown[0]!r} is not one of FedBN\'s ten '
                    f'({", ".join(DOMAINNET_CLASSES)})')
  return paths, np.asarray([DOMAINNET_CLASSES.index(str(n)) for n in names], np.int64)


class _DomainNetImages:
  """Image bytes for a split file's path, from DomainNet/{site}/... or DomainNet/{site}.zip.

  FedBN joins each path to its data/ folder (paths start 'DomainNet/<site>/...'); any path
  is looked up from its '<site>/' component on, so the split files may live anywhere."""

  def __init__(self, root):
    self.root, self.zips = root, {}

  def _zip(self, site):
    if site not in self.zips:
      path = os.path.join(self.root, f'{site}.zip')
      try:
        self.zips[site] = zipfile.ZipFile(path) if os.path.exists(path) else None
      except (zipfile.BadZipFile, OSError) as e:
        raise UserError(f'cannot read {path} as a zip: {e}') from None
    return self.zips[site]

  def read(self, path, site):
    parts = path.replace('\\', '/').split('/')
    relative = '/'.join(parts[parts.index(site):]) if site in parts else path
    for candidate in (os.path.join(self.root, relative),
                      os.path.join(os.path.dirname(self.root), path)):
      if os.path.isfile(candidate):
        with open(candidate, 'rb') as f:
          return f.read(), candidate
    archive = self._zip(site)
    if archive is not None:
      try:
        return archive.read(relative), f'{archive.filename}:{relative}'
      except KeyError:
        pass
      except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise UserError(f'cannot read {relative} from {archive.filename}: {e}') from None
    raise UserError(f'missing DomainNet image {os.path.join(self.root, relative)} (download '
                    f'{site}.zip from the DomainNet site into {self.root}, zipped or unzipped)')

  def close(self):
    for archive in self.zips.values():
      if archive is not None:
        archive.close()


def fedbn_rgb(data, where, size):
  """Image bytes -> uint8 [size, size, 3] as FedBN's DomainNetDataset and transforms make it:
  an image without three bands becomes grey (then RGB), then Resize([size, size])."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  try:
    image = Image.open(io.BytesIO(data))
    image = image.convert('L') if len(image.getbands()) != 3 else image
    return images.fit(image.convert('RGB'), size)
  except (OSError, ValueError, Image.DecompressionBombError) as e:
    raise UserError(f'cannot decode image {where}: {e}') from None


def read_domainnet(root, image_size=0):
  """The split files in `root` and their images -> a validated Dataset, images
  [S, S, 3] uint8 with S = image_size or 64, domain ids in FedBN's site order."""
  from tqdm import tqdm  # pylint: disable=g-import-not-at-top
  size = image_size or DOMAINNET_SIZE
  splits = {}
  for split in ('train', 'test'):
    for site in DOMAINNET_SITES:
      path = os.path.join(root, f'{site}_{split}.pkl')
      if not os.path.exists(path):
        raise UserError(f'missing {path} (FedBN\'s DomainNet split files are '
                        '{site}_train.pkl and {site}_test.pkl for the six sites)')
      splits[split, site] = read_domainnet_split(path)
  total = sum(len(p) for p, _ in splits.values())
  files, out = _DomainNetImages(root), {}
  try:
    with tqdm(total=total, unit='image', desc=f'domainnet {size}x{size}', disable=None) as bar:
      for split in ('train', 'test'):
        n = sum(len(splits[split, site][0]) for site in DOMAINNET_SITES)
        x, i = np.empty((n, size, size, 3), np.uint8), 0  # streamed into, never grown
        for site in DOMAINNET_SITES:
          for path in splits[split, site][0]:
            x[i] = fedbn_rgb(*files.read(path, site), size)
            i += 1
            bar.update()
        out[split] = x
  finally:
    files.close()
  cat = lambda split: np.concatenate([splits[split, s][1] for s in DOMAINNET_SITES])
  ids = lambda split: np.concatenate([np.full(len(splits[split, s][1]), d, np.int32)
                                      for d, s in enumerate(DOMAINNET_SITES)])
  return common.validate('domainnet', out['train'], cat('train'), out['test'], cat('test'),
                         domains_train=ids('train'), domains_test=ids('test'),
                         domain_names=DOMAINNET_SITES)


# --- finding, loading ---------------------------------------------------------------------


def _is_digits5(dirpath, subdirs):
  return any(f in subdirs and os.path.exists(os.path.join(dirpath, f, 'test.pkl'))
             for _, f in DIGITS5)


def _is_domainnet(files):
  return any(f'{site}_train.pkl' in files for site in DOMAINNET_SITES)


def found_in(dirpath, files, subdirs, image_size=0):
  """[(dataset, reader)] for FedBN's digit archive or DomainNet split files in one folder."""
  found = []
  if _is_digits5(dirpath, subdirs):
    found.append(('digits5', lambda: read_digits5(dirpath, image_size)))
  if _is_domainnet(files):
    found.append(('domainnet', lambda: read_domainnet(dirpath, image_size)))
  return found


def _root(dataset, data_dir):
  """The folder under --data_dir (itself first) that holds `dataset`'s files."""
  if not os.path.isdir(data_dir):
    raise UserError(f'--data_dir={data_dir} is not a directory')
  for dirpath, subdirs, files in os.walk(data_dir):
    subdirs.sort()
    if dataset == 'digits5' and _is_digits5(dirpath, set(subdirs)):
      return dirpath
    if dataset == 'domainnet' and _is_domainnet(set(files)):
      return dirpath
  what = ('FedBN\'s digit folders (MNIST/, SVHN/, USPS/, SynthDigits/, MNIST_M/ with test.pkl)'
          if dataset == 'digits5' else 'FedBN\'s DomainNet split files ({site}_train.pkl)')
  raise UserError(f'--data_dir={data_dir} holds no {what}')


def input_files(dataset, data_dir):
  """The pickles a --data_dir read opens, for the run's input fingerprint (--resume refuses
  changed inputs). DomainNet's images are left out: hashing ~600,000 files at every start
  would cost more than the run's set-up."""
  try:
    root = _root(dataset, data_dir)
  except UserError:
    return []  # the loader names what is missing
  if dataset == 'domainnet':
    return [os.path.join(root, f'{site}_{split}.pkl') for split in ('train', 'test')
            for site in DOMAINNET_SITES]
  return sorted(os.path.join(d, f) for _, folder in DIGITS5
                for d, _, files in os.walk(os.path.join(root, folder))
                for f in files if f.endswith('.pkl'))


def load(dataset, data_dir=None, image_size=0, digits5_parts=1, **_):
  """digits5 or domainnet from --data_dir, or from the imported copy; a validated Dataset.

  An imported copy keeps the size it was imported at: a different --image_size is refused."""
  if data_dir:
    root = _root(dataset, data_dir)
    ds = read_digits5(root, image_size) if dataset == 'digits5' else read_domainnet(
        root, image_size)
  else:
    path = common.imported_path(dataset)
    ds = common.validate(dataset, *common.load_imported(dataset),
                         **common.npz_structure(path))
    if image_size and ds.x_train.shape[1] != image_size:
      raise UserError(f'--image_size={image_size}: the imported {dataset} ({path}) is '
                      f'{ds.x_train.shape[1]}x{ds.x_train.shape[2]}; import it again with '
                      f'`fedjax-drift-data import DIR --image_size={image_size}`')
  return select_parts(ds, digits5_parts) if dataset == 'digits5' else ds


common.register_dataset(
    'digits5', 'FedBN\'s five digit domains (MNIST, SVHN, USPS, SynthDigits, MNIST-M), 28x28x3, '
    'domain ids; FedBN\'s digit archive, imported once',
    load, reads=('digits5_parts',), shared=('image_size',), importable=True,
    folder_files=input_files, model='digit_cnn_bn',
    source='FedBN\'s digit_dataset.zip from '
    'https://huggingface.co/datasets/Jemary/FedBN_Dataset/blob/main/digit_dataset.zip')
common.register_dataset(
    'domainnet', 'FedBN\'s 10-class DomainNet subset, 6 domains, domain ids; FedBN\'s split '
    'files + DomainNet images, imported once at --image_size (default 64)',
    load, shared=('image_size',), importable=True, folder_files=input_files,
    model='alexnet_bn',
    source='FedBN\'s domainnet_dataset.zip from '
    'https://huggingface.co/datasets/Jemary/FedBN_Dataset/blob/main/domainnet_dataset.zip '
    'with the six domain zips from http://ai.bu.edu/M3SDA/, or run '
    '--dataset=tfds:domainnet')

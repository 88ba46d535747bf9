"""tfds:NAME and hf:... through the libraries' real loading paths, offline.

TFDS: a tiny builder is defined in a package on disk and prepared by `tfds.data_source`
itself (download_and_prepare, ArrayRecord files), the path `--dataset=tfds:NAME` takes; no
tfds.testing.mock_data. Its examples are uint8 tensors (TFDS's Image feature needs TensorFlow
to encode, which is not a dependency). HF: a DatasetDict built with `datasets` and written
with save_to_disk (tests/layouts.py)."""
import os
import sys
import textwrap

import numpy as np
import pytest
from PIL import Image

import layouts
from fedjax_drift.data import hub, sources
from fedjax_drift.errors import UserError

BUILDER = '''
import numpy as np
import tensorflow_datasets as tfds


class FedjaxDriftTinyImages(tfds.core.GeneratorBasedBuilder):
  """Images of varied sizes, grey and RGB mixed; label = brightness // 80."""
  VERSION = tfds.core.Version('1.0.0')
  BUILDER_CONFIGS = [tfds.core.BuilderConfig(name='a'), tfds.core.BuilderConfig(name='b')]

  def _info(self):
    return self.dataset_info_from_configs(features=tfds.features.FeaturesDict({
        'image': tfds.features.Tensor(shape=(None, None, None), dtype=np.uint8,
                                      encoding='zlib'),
        'label': tfds.features.ClassLabel(num_classes=3)}))

  def _split_generators(self, dl_manager):
    del dl_manager  # nothing to download
    return {'train': self._generate_examples(6), 'test': self._generate_examples(3)}

  def _generate_examples(self, n):
    for i in range(n):
      yield i, {'image': example_image(self.builder_config.name, i), 'label': i % 3}


def example_image(config, i):
  channels = 3 if i % 2 else 1
  shade = 80 * (i % 3) + (7 if config == 'b' else 0)
  return np.full((5 + i, 4 + 2 * i, channels), shade, np.uint8)
'''


@pytest.fixture(scope='module')
def tiny_builder(tmp_path_factory):
  """The builder's module, imported once (TFDS registers builders by class name)."""
  root = tmp_path_factory.mktemp('tfds_code')
  (root / 'fedjax_drift_tfds_fixture').mkdir()
  (root / 'fedjax_drift_tfds_fixture' / '__init__.py').write_text('')
  (root / 'fedjax_drift_tfds_fixture' / 'tiny.py').write_text(textwrap.dedent(BUILDER))
  sys.path.insert(0, str(root))
  try:
    import fedjax_drift_tfds_fixture.tiny as module  # pylint: disable=g-import-not-at-top
  finally:
    sys.path.remove(str(root))
  return module


def _resized(image, size):
  pil = Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image)
  return np.asarray(pil.resize((size, size), Image.BILINEAR).convert('RGB'))


def test_tfds_prepares_and_reads_without_mock_data(tiny_builder, tmp_path):
  """The real path: builder -> download_and_prepare (imports importlib_resources) ->
  ArrayRecord -> data_source; varied sizes resized, grey and RGB mixed into RGB."""
  ds = sources.load('tfds:fedjax_drift_tiny_images/a', str(tmp_path), image_size=6)
  assert ds.x_train.shape == (6, 6, 6, 3) and ds.x_test.shape == (3, 6, 6, 3)
  # data_source returns the split in its own (shuffled) order: match images by label.
  expected = {i % 3: _resized(tiny_builder.example_image('a', i), 6) for i in range(3)}
  for x, y in zip(ds.x_test, ds.y_test):
    np.testing.assert_array_equal(x, expected[int(y)])
  assert sorted(ds.y_train.tolist()) == [0, 0, 1, 1, 2, 2]
  with pytest.raises(UserError, match='holds images of different sizes .* --image_size=N'):
    sources.load('tfds:fedjax_drift_tiny_images/a', str(tmp_path))


def test_tfds_configs_joined_with_domain_ids(tiny_builder, tmp_path, monkeypatch):
  """tfds:domainnet joins one config per domain; the same code on the tiny builder's two."""
  del tiny_builder
  monkeypatch.setattr(hub, 'TFDS_DOMAINNET', ('fedjax_drift_tiny_images/a',
                                              'fedjax_drift_tiny_images/b'))
  ds = hub.load_tfds('domainnet', str(tmp_path), image_size=4)
  assert ds.domain_names == ('a', 'b')
  assert ds.domains_train.tolist() == [0] * 6 + [1] * 6
  assert ds.domains_test.tolist() == [0] * 3 + [1] * 3
  # config b's shades are 7 above a's
  assert np.all(ds.x_train[ds.domains_train == 1] % 80 == 7)
  assert np.all(ds.x_train[ds.domains_train == 0] % 80 == 0)


def test_tfds_unknown_dataset_is_one_line(tmp_path):
  with pytest.raises(UserError, match=r"tfds:no_such_dataset_xyz: TFDS could not load") as e:
    sources.load('tfds:no_such_dataset_xyz', str(tmp_path))
  assert '\n' not in str(e.value)


@pytest.fixture(scope='module')
def hf_dir(tmp_path_factory):
  path = tmp_path_factory.mktemp('hf') / 'tiny_hf'
  return str(path), layouts.write_hf_dataset(str(path))


def test_hf_save_to_disk_folder(hf_dir):
  path, written = hf_dir
  ds = sources.load(f'hf:{path}')
  x, y, writers, styles = written['train']
  np.testing.assert_array_equal(ds.x_train, x)  # grey repeated: one training image is RGB
  np.testing.assert_array_equal(ds.y_train, y)
  np.testing.assert_array_equal(ds.x_test, written['test'][0])
  # group columns: dense ids in sorted order of the values
  np.testing.assert_array_equal(ds.groups['writer_id'], np.unique(writers, return_inverse=True)[1])
  np.testing.assert_array_equal(ds.groups['style'], np.unique(styles, return_inverse=True)[1])
  assert set(ds.groups) == {'writer_id', 'style'}
  assert os.environ['HF_HUB_OFFLINE'] == '1'
  # hf:NAME with --data_dir: the saved folder DIR/NAME, splits and columns by flag
  swapped = sources.load('hf:tiny_hf', os.path.dirname(path), hf_train_split='test',
                         hf_test_split='train', hf_label_column='label', image_size=3)
  assert swapped.x_train.shape == (4, 3, 3, 3) and len(swapped.y_test) == 8


def test_hf_mistakes_are_one_line(hf_dir, tmp_path):
  path, _ = hf_dir
  cases = [
      (dict(hf_test_split='validation'),
       '--hf_test_split=validation: hf:.* has splits train, test'),
      (dict(hf_image_column='picture'), '--hf_image_column=picture: .* has columns image, label'),
      (dict(hf_label_column='style'), "label column 'style' holds <U"),
  ]
  for options, message in cases:
    with pytest.raises(UserError, match=message) as e:
      sources.load(f'hf:{path}', **options)
    assert '\n' not in str(e.value)
  with pytest.raises(UserError, match='is not a folder written by save_to_disk'):
    sources.load(f'hf:{tmp_path}')
  # not saved and not in the (empty, hermetic) cache: refused offline, nothing downloaded
  with pytest.raises(UserError, match='hf:someone/absent_dataset: not readable offline'):
    sources.load('hf:someone/absent_dataset')


def test_hf_truncated_folder_is_one_line(tmp_path):
  path = tmp_path / 'broken'
  layouts.write_hf_dataset(str(path), n_train=3, n_test=3)
  arrow = next((path / 'train').glob('*.arrow'))
  arrow.write_bytes(arrow.read_bytes()[:50])
  with pytest.raises(UserError, match=f'cannot read {path} as a save_to_disk folder') as e:
    sources.load(f'hf:{path}')
  assert '\n' not in str(e.value)

"""--model follows the dataset when the command line does not give one: a text dataset gets a
text model (--dataset=ag_news alone failed on the default CNN); --model overrides (issue 34
item 6)."""
import os

import numpy as np

from fedjax_drift import cli, registry
from fedjax_drift.data import common
from test_cli import cli as run_cli


def test_every_usual_model_is_a_registered_model():
  for name, entry in registry.entries('dataset').items():
    if entry.info.model and not callable(entry.info.model):
      assert registry.find('model', entry.info.model) is not None, (name, entry.info.model)
  assert common.usual_model('ag_news') == common.usual_model('text:/x.csv') == 'text_bag'
  assert common.usual_model('cifar10') == 'cnn_cifar'
  assert common.usual_model('mnist') == '' and common.usual_model('no_such') == ''


def test_the_command_line_picks_it_and_says_so(capsys):
  flags = {'dataset': 'ag_news', 'model': 'cnn_mnist'}
  usual = cli._with_usual_model  # pylint: disable=protected-access
  assert usual(flags, ['--dataset=ag_news'])['model'] == 'text_bag'
  assert capsys.readouterr().out == ('model: text_bag, the usual one for --dataset=ag_news '
                                     '(--model picks another)\n')
  given = usual(flags, ['--dataset=ag_news', '--model=cnn_mnist'])
  assert given['model'] == 'cnn_mnist' and capsys.readouterr().out == ''


def test_a_text_folder_alone_runs_with_the_text_model(tmp_path):
  data = tmp_path / 'texts'
  data.mkdir()
  words = ['good fine great', 'bad awful poor']
  for split, n in (('train', 40), ('test', 10)):
    rows = ''.join(f'{words[i % 2]} {i},{i % 2}\n' for i in range(n))
    (data / f'{split}.csv').write_text('text,label\n' + rows)
  out = run_cli(f'--dataset=text:{data}', '--rounds=1', '--num_clients=2',
                '--clients_per_round=2', '--local_steps=1', '--local_epochs=0',
                '--vocab_size=64', '--max_seq_len=8', '--progress=false',
                f'--out={tmp_path / "run"}')
  assert out.returncode == 0, out.stderr
  assert out.stdout.startswith('model: text_bag, the usual one for --dataset=text:'), out.stdout
  assert os.path.isfile(tmp_path / 'run' / 'config.json')


def test_npz_of_cifar_sized_images_gets_a_fitting_model_and_says_so(tmp_path, capsys):
  """Issue 45 item 11: npz: data of 32x32x3 images kept the default cnn_mnist without a
  word; its usual model, read from the file's header, is cnn_cifar, and the command line
  says so. 28x28x1 images and a missing file keep the default."""
  def write(name, shape):
    x = np.zeros((4,) + shape, np.uint8)
    np.savez(tmp_path / name, x_train=x, y_train=np.zeros(4), x_test=x, y_test=np.zeros(4))
    return f'npz:{tmp_path / name}'
  cifar, mnist = write('cifar.npz', (32, 32, 3)), write('mnist.npz', (28, 28, 1))
  assert common.usual_model(cifar) == 'cnn_cifar'
  assert common.usual_model(mnist) == common.usual_model(f'npz:{tmp_path}/gone.npz') == ''
  usual = cli._with_usual_model  # pylint: disable=protected-access
  flags = usual({'dataset': cifar, 'model': 'cnn_mnist'}, [f'--dataset={cifar}'])
  assert flags['model'] == 'cnn_cifar'
  assert capsys.readouterr().out == (f'model: cnn_cifar, the usual one for --dataset={cifar} '
                                     '(--model picks another)\n')

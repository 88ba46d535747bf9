"""The FedGen authors' code (zhuangdizhu/FedGen) on an export.py --fedgen_json directory.

  python benchmarks/crosscheck/fedgen_side.py --code=CLONE --export=DIR --out=THEIRS \
      --algorithm=FedGen --seed=S [--learning_rate ... their main.py flags]

Needs PyTorch (and numpy), not fedjax_drift. Their server and users (FedAvg: serveravg.py,
useravg.py; FedGen: serverpFedGen.py, userpFedGen.py, generator.py) run unchanged, with
their MNIST run configuration (utils/model_config.py RUNCONFIGS['mnist']); what changes:

- the data: their read_data reads the export's fedgen/train and fedgen/test, linked into
  THEIRS/work/data/Mnist/u20c10-alphaxc-ratioxc/ (their get_data_dir's layout);
- the model: our `mlp` (flatten, Linear(784, 200), ReLU, Linear(200, 200), ReLU,
  Linear(200, C)) with their Net's interface (`forward(x, start_layer_idx, logit)`, the output
  layer alone for start_layer_idx=-1), as none of their models is built on our side (their
  MNIST `cnn` has BatchNorm and a 32-wide linear latent layer); their generator's latent width
  (GENERATORCONFIGS['mnist'], 32) becomes the MLP's penultimate width, 200;
- the cohorts: select_users returns cohorts.json[round] (0-based, as their glob_iter);
- the initial weights: init.npz, loaded into the server's model before the first round;
- the seeds: torch and numpy's global generators are seeded with --seed (their main.py
  seeds torch only, with the run index).

THEIRS/round_TTTT.npz gets the server's model after every round's aggregate_parameters
(round 0: the initial one) under our names and layout, for compare.py.
"""
import argparse
import importlib
import os
import sys

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_side  # pylint: disable=wrong-import-position

DATASET = 'Mnist-alphaxc-ratioxc'  # their get_data_dir: data/Mnist/u20c10-alphaxc-ratioxc
STUBS = ('torchvision', 'tqdm', 'h5py', 'matplotlib', 'mpl_toolkits', 'seaborn')
MLP_NAMES = {'layers.1': 'dense0', 'layers.3': 'dense1', 'layers.5': 'head'}


class MLPNet(nn.Module):
  """Our `mlp` (models/mlps.py MLP, hidden 200, 200) with the interface of their Net
  (FLAlgorithms/trainmodel/models.py): forward returns {'output': log-softmax, 'logit'},
  and a negative start_layer_idx feeds x to the last -start_layer_idx layers only."""

  def __init__(self, inputs=784, hidden=(200, 200), num_classes=10):
    super().__init__()
    layers, width = [nn.Flatten(1)], inputs
    for h in hidden:
      layers += [nn.Linear(width, h), nn.ReLU()]
      width = h
    self.layers = nn.ModuleList(layers + [nn.Linear(width, num_classes)])

  def forward(self, x, start_layer_idx=0, logit=False):
    first = len(self.layers) + start_layer_idx if start_layer_idx < 0 else start_layer_idx
    z = x
    for layer in self.layers[first:]:
      z = layer(z)
    result = {'output': F.log_softmax(z, dim=1)}
    if logit or start_layer_idx < 0:
      result['logit'] = z
    return result


def mlp_name(torch_name):
  """Our name of an MLPNet parameter: layers.5.weight -> head/kernel."""
  layer, leaf = torch_name.rsplit('.', 1)
  return f"{MLP_NAMES[layer]}/{'kernel' if leaf == 'weight' else 'bias'}"


def their_args(argv):
  """Their main.py's flags (same names and defaults), plus ours: --code, --export, --out,
  --seed."""
  p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  for name in ('code', 'export', 'out'):
    p.add_argument(f'--{name}', required=True)
  p.add_argument('--seed', type=int, default=0)
  p.add_argument('--algorithm', default='FedGen', choices=('FedGen', 'FedAvg'))
  p.add_argument('--batch_size', type=int, default=32)
  p.add_argument('--gen_batch_size', type=int, default=32)
  p.add_argument('--learning_rate', type=float, default=0.01)
  p.add_argument('--personal_learning_rate', type=float, default=0.01)
  p.add_argument('--ensemble_lr', type=float, default=1e-4)
  p.add_argument('--beta', type=float, default=1.0)
  p.add_argument('--lamda', type=int, default=1)
  p.add_argument('--mix_lambda', type=float, default=0.1)
  p.add_argument('--embedding', type=int, default=0)
  p.add_argument('--num_glob_iters', type=int, default=200)
  p.add_argument('--local_epochs', type=int, default=20)
  p.add_argument('--num_users', type=int, default=20)
  p.add_argument('--K', type=int, default=1)
  p.add_argument('--no_user_lr_decay', action='store_true',
                 help='ours, a diagnostic: keep every user\'s learning rate (their users\' '
                 'ExponentialLR(gamma=0.99), stepped with the round after each local training, '
                 'gets gamma 1)')
  args = p.parse_args(argv)
  args.dataset, args.model, args.train, args.times, args.device = DATASET, 'mlp', 1, 1, 'cpu'
  args.result_path = os.path.join(os.path.abspath(args.out), 'work', 'results')
  return args


def link_data(export, work):
  """Their data folders under `work`, linked to the export's fedgen/train and fedgen/test."""
  folder = os.path.join(work, 'data', 'Mnist', 'u20c10-alphaxc-ratioxc')
  os.makedirs(folder, exist_ok=True)
  for split in ('train', 'test'):
    link = os.path.join(folder, split)
    if not os.path.islink(link):
      os.symlink(os.path.abspath(os.path.join(export, 'fedgen', split)), link)


def patch(code, export, out):
  """Imports their servers from `code` with the changes of the module docstring; returns
  {'FedAvg': class, 'FedGen': class}."""
  sys.path.insert(0, code)
  torch_side.stub_missing(STUBS)
  config = importlib.import_module('utils.model_config')
  hidden, _, channels, classes, noise = config.GENERATORCONFIGS['mnist']
  config.GENERATORCONFIGS['mnist'] = (hidden, 200, channels, classes, noise)
  Server = importlib.import_module('FLAlgorithms.servers.serverbase').Server
  cohorts = torch_side.read_json(os.path.join(export, 'cohorts.json'))
  init = torch_side.load_init(os.path.join(export, 'init.npz'))
  rounds_dir = os.path.abspath(out)

  def params_of(model):
    return {k: v.detach().numpy() for k, v in model.named_parameters()}

  def select_users(self, round, num_users, return_idx=False):  # pylint: disable=redefined-builtin
    ids = cohorts[round]
    if len(ids) != num_users:
      raise ValueError(f'cohorts.json round {round} has {len(ids)} clients, not {num_users}')
    users = [self.users[i] for i in ids]
    return (users, np.asarray(ids)) if return_idx else users

  aggregate = Server.aggregate_parameters

  def aggregate_and_save(self, partial=False):
    aggregate(self, partial)
    self.saved_rounds = getattr(self, 'saved_rounds', 0) + 1
    torch_side.save_round(rounds_dir, self.saved_rounds, params_of(self.model), mlp_name)

  def load_init(server):
    names = [k for k, _ in server.model.named_parameters()]
    state = torch_side.state_from_ours(init, names, mlp_name)
    with torch.no_grad():
      for k, p in server.model.named_parameters():
        p.copy_(torch.from_numpy(np.ascontiguousarray(state[k])))
    torch_side.save_round(rounds_dir, 0, params_of(server.model), mlp_name)

  Server.select_users = select_users
  Server.aggregate_parameters = aggregate_and_save
  Server.save_results = lambda self, args: None  # their h5py metrics file
  Server.save_model = lambda self: None
  servers = {'FedAvg': importlib.import_module('FLAlgorithms.servers.serveravg').FedAvg,
             'FedGen': importlib.import_module('FLAlgorithms.servers.serverpFedGen').FedGen}
  return servers, load_init, len(cohorts)


def main(argv=None):
  args = their_args(sys.argv[1:] if argv is None else argv)
  servers, load_init, rounds = patch(os.path.abspath(args.code), args.export, args.out)
  if args.num_glob_iters > rounds:
    raise SystemExit(f'error: --num_glob_iters {args.num_glob_iters}: cohorts.json has '
                     f'{rounds} rounds')
  with np.load(os.path.join(args.export, 'init.npz')) as f:
    inputs, classes = f['dense0/kernel'].shape[1], f['head/kernel'].shape[2]
  work = os.path.join(args.out, 'work')
  link_data(args.export, work)
  os.chdir(work)  # their get_data_dir reads data/... relative to the working directory
  torch.manual_seed(args.seed)
  np.random.seed(args.seed)
  server = servers[args.algorithm](args, (MLPNet(inputs, num_classes=classes), 'mlp'),
                                   args.seed)
  load_init(server)
  if args.no_user_lr_decay:
    for user in server.users:
      user.lr_scheduler.gamma = 1.0
  server.train(args)
  print(f'wrote {args.out}/round_0000.npz ... round_{args.num_glob_iters:04d}.npz')
  return 0


if __name__ == '__main__':
  sys.exit(main())

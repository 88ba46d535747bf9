"""The FedGKD authors' code (CGCL-codes/FedGKD) on an export.py directory: the other side.

  python benchmarks/crosscheck/fedgkd_side.py --code=CLONE --export=DIR --data=SMALL.npz \
      --out=THEIRS -- [their run_gloo.py flags]

Needs PyTorch (and numpy), not fedjax_drift. Their master and workers run as their
run_gloo.py starts them (one process per cohort slot, torch.distributed over gloo), on CPU,
forked rather than spawned so that the changes below reach every process. Their training,
aggregation and FedGKD code run unchanged; what changes is where things come from:

- the data: the npz's CIFAR-10 arrays, as their `_get_cifar` (pcode/datasets/prepare_data.py)
  makes its test set: ToTensor, then their fixed mean and std; no augmentation (a cross-check
  trains without it on both sides). Their loaders read with num_workers=0;
- the partition: client i (their ids start at 1) trains on partition.json[i - 1];
- the cohorts: round t trains cohorts.json[t - 1] (+ 1), in place of `_random_select_clients`;
- the initial weights: init.npz, loaded into the master's models after it builds them.

THEIRS/round_TTTT.npz gets the master's parameters after every round (round 0: the initial
ones) under our names and layout, for compare.py. Give their flags for a full-batch run:
--batch_size at least every client's size, --val_data_ratio 0, --train_data_ratio 1,
--on_cuda False, --partition_data origin (the partition is replaced anyway), --track_time True
and --lr_warmup_epochs (their logging and scheduler fail without them).
"""
import argparse
import importlib
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_side  # pylint: disable=wrong-import-position

# Their CIFAR-10 normalisation (pcode/datasets/prepare_data.py, _get_cifar, pn_normalize).
CIFAR10_MEAN = np.array((0.4914, 0.4822, 0.4465), np.float32)
CIFAR10_STD = np.array((0.2023, 0.1994, 0.2010), np.float32)
# Imported by their modules, used only on paths a cross-check does not take.
STUBS = ('torchvision', 'transformers', 'datasets', 'pytreebank', 'lmdb', 'cv2', 'tqdm', 'PIL',
         'pyarrow', 'msgpack', 'msgpack_numpy', 'six')
# Imported by their pcode/masters/__init__.py and pcode/workers/__init__.py but not in their
# repository (its only commit, 72e7bac): without stand-ins run_gloo.py cannot start.
ABSENT = ('pcode.masters.master_scaffold', 'pcode.workers.worker_scaffold')


class NpzImages(torch.utils.data.Dataset):
  """uint8 NHWC images and labels as their CIFAR-10 test transform gives them: CHW floats in
  [0, 1] (ToTensor), minus their mean, over their std."""

  def __init__(self, x, y):
    super().__init__()
    x = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2))).float().div(255)
    mean = torch.from_numpy(CIFAR10_MEAN)[None, :, None, None]
    std = torch.from_numpy(CIFAR10_STD)[None, :, None, None]
    self.x = x.sub(mean).div(std)
    self.targets = [int(v) for v in y]

  def __len__(self):
    return len(self.targets)

  def __getitem__(self, i):
    return self.x[i], self.targets[i]


def patch(code, export, data_path, out):
  """Imports their run_gloo from `code` with the changes of the module docstring; returns it
  and the number of rounds cohorts.json holds."""
  sys.path.insert(0, code)
  torch_side.stub_missing(STUBS, ABSENT)
  run_gloo = importlib.import_module('run_gloo')
  create_dataset = importlib.import_module('pcode.create_dataset')
  Partition = importlib.import_module('pcode.datasets.partition_data').Partition
  Master = importlib.import_module('pcode.masters.master').Master
  parts = torch_side.read_json(os.path.join(export, 'partition.json'))
  cohorts = torch_side.read_json(os.path.join(export, 'cohorts.json'))
  init = torch_side.load_init(os.path.join(export, 'init.npz'))
  with np.load(data_path) as f:
    arrays = {k: f[k] for k in f.files}

  def get_dataset(conf, name, datasets_path, split='train', **_):
    del conf, datasets_path
    if name != 'cifar10':
      raise ValueError(f'fedgkd_side.py reads CIFAR-10 arrays, not {name}')
    return NpzImages(arrays[f'x_{split}'], arrays[f'y_{split}'])

  def define_data_loader(conf, dataset, localdata_id=None, is_train=True, shuffle=True,
                         data_partitioner=None):
    if is_train:
      if list(dataset.indices) != list(range(len(dataset.data))):
        raise ValueError('their train/val split moved examples: give --val_data_ratio 0')
      dataset = Partition(dataset.data, parts[localdata_id])
    loader = torch.utils.data.DataLoader(dataset, batch_size=conf.batch_size, shuffle=shuffle,
                                         num_workers=0, drop_last=False)
    if is_train:  # what their define_data_loader sets for the worker's epoch count
      conf.n_minibatch = int(len(dataset) / conf.batch_size * conf.local_n_epochs)
    conf.num_batches_per_device_per_epoch = len(loader)
    conf.num_whole_batches_per_worker = len(loader) * conf.local_n_epochs
    return loader, data_partitioner

  def params_of(model):
    return {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}

  master_init = Master.__init__

  def init_master(self, conf):
    master_init(self, conf)
    names = list(self.master_model.state_dict())
    state = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in
             torch_side.state_from_ours(init, names, torch_side.resnet_name).items()}
    self.master_model.load_state_dict(state)
    for model in self.client_models.values():
      model.load_state_dict(state)
    torch_side.save_round(out, 0, params_of(self.master_model), torch_side.resnet_name)

  def select_clients(self):
    return sorted(c + 1 for c in cohorts[self.conf.graph.comm_round - 1])

  aggregate = Master._aggregate_model_and_evaluate

  def aggregate_and_save(self, flatten_local_models, selected_client_ids):
    aggregate(self, flatten_local_models, selected_client_ids)
    torch_side.save_round(out, self.conf.graph.comm_round, params_of(self.master_model),
                          torch_side.resnet_name)

  create_dataset.get_dataset = get_dataset
  create_dataset.define_data_loader = define_data_loader
  Master.__init__ = init_master
  Master._random_select_clients = select_clients
  Master._aggregate_model_and_evaluate = aggregate_and_save
  run_gloo.init_cuda = lambda conf: None  # CPU: their init_cuda sets a CUDA device
  return run_gloo, len(cohorts)


def _process(run_gloo, rank, size, conf):
  torch.set_num_threads(1)  # one process per cohort slot already
  run_gloo.main(rank, size, conf, conf.port)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--code', required=True, help='a clone of CGCL-codes/FedGKD')
  parser.add_argument('--export', required=True, help="export.py's --dir")
  parser.add_argument('--data', required=True, help='the npz the export read')
  parser.add_argument('--out', required=True, help='where round_TTTT.npz go')
  parser.add_argument('theirs', nargs=argparse.REMAINDER, help='-- then their flags')
  args = parser.parse_args(argv)
  run_gloo, rounds = patch(os.path.abspath(args.code), args.export, args.data, args.out)
  theirs = args.theirs[1:] if args.theirs[:1] == ['--'] else args.theirs
  sys.argv = ['run_gloo.py'] + theirs
  conf = run_gloo.get_args()
  if conf.on_cuda:
    parser.error('give their --on_cuda False (a cross-check runs on CPU)')
  conf.n_participated = int(conf.n_clients * conf.participation_ratio + 0.5)
  if conf.n_comm_rounds > rounds:
    parser.error(f'--n_comm_rounds {conf.n_comm_rounds}: cohorts.json has {rounds} rounds')
  conf.timestamp = str(int(time.time()))
  context = torch.multiprocessing.get_context('fork')
  size = conf.n_participated + 1
  processes = [context.Process(target=_process, args=(run_gloo, rank, size, conf))
               for rank in range(size)]
  for p in processes:
    p.start()
  for p in processes:
    p.join()
  failed = [rank for rank, p in enumerate(processes) if p.exitcode != 0]
  if failed:
    print(f'error: processes {failed} of their run failed', file=sys.stderr)
    return 1
  print(f'wrote {args.out}/round_0000.npz ... round_{conf.n_comm_rounds:04d}.npz')
  return 0


if __name__ == '__main__':
  sys.exit(main())

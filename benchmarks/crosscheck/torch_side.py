"""What the two PyTorch sides of a cross-check share (fedgkd_side.py, fedgen_side.py).

Runs in an environment with PyTorch and numpy only (no fedjax_drift): stand-ins for the
modules the other code imports but a cross-check never calls (torchvision, transformers, ...),
the translation between our parameter names and layout (flax: conv [h, w, in, out], dense
[in, out]) and theirs (torch: conv [out, in, h, w], linear [out, in]), and the export
directory's files.
"""
import importlib.abc
import importlib.util
import json
import os
import re
import sys

import numpy as np

# Theirs -> ours (the inverse of to_torch_layout): compare.py's, which needs numpy only.
from compare import to_flax_layout


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  """Imports any module under `roots` as an empty package whose every attribute is a dummy
  class: the other code's imports of libraries it uses only on paths a cross-check never
  takes (torchvision's datasets, transformers' BERT, ...) then succeed."""

  def __init__(self, roots):
    self.roots = set(roots)

  def find_spec(self, fullname, path=None, target=None):
    del path, target
    if fullname in self.roots or fullname.split('.')[0] in self.roots:
      return importlib.util.spec_from_loader(fullname, self, is_package=True)
    return None

  def create_module(self, spec):
    return None

  def exec_module(self, module):
    def dummy(name):
      if name.startswith('__'):
        raise AttributeError(name)
      return type(name, (), {'__init__': lambda self, *a, **k: None})
    module.__getattr__ = dummy


def stub_missing(roots, modules=()):
  """Installs stand-ins for those of the packages `roots` that are not installed and for the
  modules `modules` (dotted names the other code imports but does not ship); returns the
  names stubbed."""
  missing = [r for r in roots if importlib.util.find_spec(r) is None] + list(modules)
  if missing:
    sys.meta_path.append(_StubFinder(missing))
  return missing


def to_torch_layout(array):
  """Ours -> theirs: conv [h, w, in, out] -> [out, in, h, w], dense [in, out] -> [out, in]."""
  if array.ndim == 4:
    return array.transpose(3, 2, 0, 1)
  if array.ndim == 2:
    return array.T
  return array


def resnet_name(torch_name):
  """Our name of a parameter of FedGKD's CifarResNet (pcode/models/resnet.py), e.g.
  layer2.0.downsample.1.weight -> stage1_block0/gn_shortcut/scale."""
  leaf = {'weight': 'kernel', 'bias': 'bias'}
  norm_leaf = {'weight': 'scale', 'bias': 'bias'}
  parts = torch_name.split('.')
  if parts[0] == 'conv1':
    return 'stem/kernel'
  if parts[0] == 'bn1':
    return f'gn_stem/{norm_leaf[parts[1]]}'
  if parts[0] == 'classifier':
    return f'head/{leaf[parts[1]]}'
  match = re.fullmatch(r'layer(\d+)', parts[0])
  if not match:
    raise KeyError(torch_name)
  block = f'stage{int(match.group(1)) - 1}_block{parts[1]}'
  if parts[2] == 'downsample':
    if parts[3] == '0':
      return f'{block}/shortcut/kernel'
    return f'{block}/gn_shortcut/{norm_leaf[parts[4]]}'
  if parts[2].startswith('conv'):
    return f'{block}/{parts[2]}/kernel'
  return f'{block}/gn{parts[2][2:]}/{norm_leaf[parts[3]]}'


def load_init(path):
  """init.npz (export.py: our names, a leading run axis of 1) -> {our name: array}."""
  with np.load(path) as f:
    return {k: f[k][0] for k in f.files}


def state_from_ours(named, torch_names, name_of):
  """{torch name: array} for `torch_names`, from our {name: array} (name_of: torch -> ours)."""
  out = {}
  for t in torch_names:
    if name_of(t) not in named:
      raise KeyError(f'{t} -> {name_of(t)} is not in the initial parameters')
    out[t] = to_torch_layout(named[name_of(t)])
  if len(out) != len(named):
    extra = sorted(set(named) - {name_of(t) for t in torch_names})
    raise KeyError(f'our parameters {extra} have no counterpart there')
  return out


def save_round(directory, t, torch_params, name_of):
  """rounds/round_TTTT.npz of {torch name: array}, under our names and layout."""
  os.makedirs(directory, exist_ok=True)
  np.savez(os.path.join(directory, f'round_{t:04d}.npz'),
           **{name_of(k): to_flax_layout(v) for k, v in torch_params.items()})


def read_json(path):
  with open(path) as f:
    return json.load(f)

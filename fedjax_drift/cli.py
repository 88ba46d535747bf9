"""The `fedjax-drift` command line (also experiments/run.py): flags in, a run, an exit code.

Flags are the fields of fedjax_drift.Config (`--help` lists them by group; `--list` lists the
algorithms, models, datasets, partitions and scenarios). Bad input gives one line naming the
flag and exit code 2.

The package is imported inside the functions, not at the top: experiments/run.py loads this
file by its path, so that importing jax happens after main_exit_code's signal handlers are in
place and a signal while importing is one line too. (`fedjax-drift` and `python -m
fedjax_drift.cli` import the package first, as every console script does.)
"""
import argparse
import dataclasses
import json
import os
import signal
import sys
import typing


def _bool(text):
  value = text.lower()
  if value in ('1', 'true', 'yes', 'on'):
    return True
  if value in ('0', 'false', 'no', 'off'):
    return False
  raise argparse.ArgumentTypeError(f'expected true or false, got {text!r}')


class _Parser(argparse.ArgumentParser):
  def error(self, message):  # one line, exit 2, no usage dump
    sys.stderr.write(f'error: {message}\n')
    sys.exit(2)


def _help(field, valid):
  """The field's help text, its valid values, and its default; `%` escaped for argparse."""
  text = field.metadata.get('help', '')
  values = valid.get(field.name) or field.metadata.get('choices')
  if values:
    text += f' (one of: {", ".join(values)})'
  if field.default not in ('', None):
    text += f' [default: {field.default}]'
  return text.replace('%', '%%')


def build_parser(config_cls, suppress_defaults=False, valid=None):
  """An argparse parser with one --flag per Config field, in the fields' help groups.

  valid: {field name: valid values} listed in the help (e.g. catalog.values('algo')).
  """
  from fedjax_drift.core_flags import GROUPS  # pylint: disable=g-import-not-at-top
  parser = _Parser(usage='%(prog)s [--flag=value ...]',
                   description='Simulate federated learning under non-IID data. '
                   '`--list` shows the algorithms, models, datasets, partitions and '
                   'scenarios, one line each.',
                   allow_abbrev=False,
                   argument_default=argparse.SUPPRESS if suppress_defaults else None)
  parser.add_argument('--list', action='store_true', default=argparse.SUPPRESS,
                      help='list the valid algorithms, models, datasets, partitions and '
                      'scenarios, then exit')
  parser.add_argument('--config', default=argparse.SUPPRESS, metavar='FILE',
                      help='start from the settings in FILE (a run directory or its config.json: '
                      'rerun it), the flags given here replacing them; not --out, --resume '
                      'or --overwrite')
  groups = {name: parser.add_argument_group(f'{name} flags') for name in GROUPS}
  hints = typing.get_type_hints(config_cls)
  for f in dataclasses.fields(config_cls):
    name = f.metadata.get('group') or 'other'
    if name not in groups:
      groups[name] = parser.add_argument_group(f'{name} flags')
    kind = hints[f.name]
    kind = _bool if kind is bool else kind
    kwargs = dict(type=kind, help=_help(f, valid or {}))
    if not suppress_defaults:
      kwargs['default'] = f.default
    if kind is _bool:
      kwargs.update(nargs='?', const=True, metavar='BOOL')
    if f.metadata.get('const') is not None:  # a bare --flag means this value
      kwargs.update(nargs='?', const=f.metadata['const'])
    groups[name].add_argument(f'--{f.name}', **kwargs)
  return parser


def check_flag_names(parser, argv):
  """Raises UserError for a --flag the parser does not know, suggesting the closest one."""
  from fedjax_drift.errors import UserError, did_you_mean  # pylint: disable=g-import-not-at-top
  known = [o for a in parser._actions for o in a.option_strings]  # pylint: disable=protected-access
  for token in argv:
    if token == '--':
      return
    name = token.split('=', 1)[0]
    if name.startswith('--') and name not in known:
      raise UserError(f'unknown flag {name}{did_you_mean(name, known)}')


def _recorded_plugins(argv) -> str:
  """The --plugin value recorded in the file argv's --config names ('' when there is none,
  or the file cannot be read: _settings_file says why later)."""
  path = next((t.split('=', 1)[1] for t in argv if t.startswith('--config=')), '')
  path = os.path.join(path, 'config.json') if os.path.isdir(path) else path
  try:
    with open(path, encoding='utf-8') as f:
      return str(json.load(f).get('plugin', ''))
  except (OSError, ValueError, AttributeError):
    return ''


def with_plugins(registry, argv):
  """Loads the plugins argv's --plugin flags and its --config file name (their choices and
  flags join the registry and the Config before the parser is built); returns argv with its
  --plugin flags as one --plugin=A,B whose files are absolute paths (as config.json records
  them)."""
  text = registry.plugins_in_argv(argv)
  registry.load_plugins(_recorded_plugins(argv))
  registry.load_plugins(text)
  rest, skip = [], False
  for i, token in enumerate(argv):
    if skip or token == '--plugin' and i + 1 < len(argv):
      skip = not skip
      continue
    if not token.startswith('--plugin='):
      rest.append(token)
  return rest + ([f'--plugin={text}'] if text else [])


HARD_EXIT_S = 10  # after a signal the process ends within this (docs/reliability.md)


def main(argv=None, hard_exit_s=None):
  """Runs the command line; returns the exit code. hard_exit_s: after SIGINT, SIGTERM or
  SIGHUP the process ends within this many seconds (interrupts.hard_exit_after)."""
  import fedjax_drift  # pylint: disable=g-import-not-at-top
  from fedjax_drift import catalog, interrupts  # pylint: disable=g-import-not-at-top
  if hard_exit_s:
    interrupts.hard_exit_after(hard_exit_s)
  argv = sys.argv[1:] if argv is None else list(argv)
  try:
    argv = with_plugins(fedjax_drift.registry, argv)
    valid = {flag: catalog.values(flag) for flag in ('algo', 'model', 'dataset', 'partition',
                                                     'scenario')}
    parser = build_parser(fedjax_drift.config.config_class(), valid=valid)
    check_flag_names(parser, argv)
  except fedjax_drift.UserError as e:
    sys.stderr.write(f'error: {e}\n')
    return 2
  args = parser.parse_args(argv)
  if vars(args).pop('list', False):
    print(catalog.text())
    return 0
  with interrupts.guard():  # held while the line is written: a second signal adds nothing
    return _outcome(fedjax_drift, interrupts, args, argv)


def _outcome(fedjax_drift, interrupts, args, argv):
  """Runs and returns the exit code, writing one line on failure."""
  try:
    _run(fedjax_drift, args, argv)
  except fedjax_drift.errors.DivergenceError as e:
    sys.stderr.write(f'error: {e}\n')
    return 3
  except fedjax_drift.UserError as e:
    sys.stderr.write(f'error: {e}\n')
    return 2
  except KeyboardInterrupt as e:  # the library's Interrupted says whether --resume can continue
    interrupts.ignore()  # a second Ctrl-C must not add a traceback
    sys.stderr.write(f'error: {str(e) or "interrupted"}\n')
    return interrupts.exit_code(e)  # 130, 143 (SIGTERM), 129 (SIGHUP)
  except Exception as e:  # pylint: disable=broad-except
    if os.environ.get('FEDJAX_DRIFT_DEBUG'):
      raise
    # A collective that failed because a peer died: the runtime names the peer in its own
    # one line and ends this process (within distributed.PEER_BOUND_S) instead of this one.
    fedjax_drift.distributed.await_peer_failure(e)
    first = (str(e).strip().splitlines() or [''])[0]
    sys.stderr.write(f'error: {type(e).__name__}: {first} (set FEDJAX_DRIFT_DEBUG=1 for the '
                     'traceback)\n')
    return 1
  return 0


def _run(fedjax_drift, args, argv):
  """A run (or --resume) from the parsed flags."""
  config_file = vars(args).pop('config', '')
  # Only the flags given on this command line (for --resume and --config=FILE).
  given = vars(build_parser(fedjax_drift.config.config_class(),
                            suppress_defaults=True).parse_args(argv))
  given.pop('config', None)
  if config_file:
    if args.resume:
      raise fedjax_drift.UserError(f'--config={config_file} starts a new run; --resume '
                                   'continues the one in --out (drop one of them)')
    fedjax_drift.run(fedjax_drift.Config(**{**_settings_file(fedjax_drift, config_file),
                                            **given}))
  elif args.resume:
    # The rest come from the run's config.json.
    if not args.out:
      raise fedjax_drift.UserError('--resume needs --out=RUN_DIR, the run to continue')
    fedjax_drift.resume(args.out, **given)
  else:
    fedjax_drift.run(fedjax_drift.Config(
        **_with_personal_split(_with_bn_model(_with_usual_model(vars(args), argv), argv),
                               argv)))


FILE_SKIPS = ('out', 'resume', 'overwrite')  # where and how a rerun writes: this command's


def _settings_file(fedjax_drift, path):
  """The Config settings in a config.json (a run directory's, or one written by hand; a run
  directory stands for its config.json): its
  `_`-prefixed records and FILE_SKIPS left out. UserError naming the file when it cannot be
  read, is not a JSON object, or names a setting this version does not have."""
  if os.path.isdir(path):  # a run directory: its config.json
    path = os.path.join(path, 'config.json')
  values = fedjax_drift.errors.read_json_input(path, f'--config={path}')
  if not isinstance(values, dict):
    raise fedjax_drift.UserError(f'--config={path} is not a JSON object of settings')
  settings = {k: v for k, v in values.items() if not k.startswith('_') and k not in FILE_SKIPS}
  fedjax_drift.registry.load_plugins(settings.get('plugin', ''))  # its plugins' flags too
  known = fedjax_drift.config.field_names()
  unknown = sorted(set(settings) - known)
  if unknown:
    raise fedjax_drift.UserError(f'--config={path}: unknown setting {unknown[0]!r} (written by '
                                 'another version of fedjax-drift?)')
  return settings


def _with_usual_model(flags, argv):
  """flags with --model set to the dataset's usual one (a text model for a text dataset, ...:
  data/common.usual_model) when the command line does not give --model; says so."""
  from fedjax_drift.data import common  # pylint: disable=g-import-not-at-top
  given = any(t == '--model' or t.startswith('--model=') for t in argv)
  usual = common.usual_model(flags['dataset'])
  if given or not usual or usual == flags['model']:
    return flags
  print(f'model: {usual}, the usual one for --dataset={flags["dataset"]} (--model picks '
        'another)', flush=True)
  return {**flags, 'model': usual}


def _with_bn_model(flags, argv):
  """flags with --model set to the model's BatchNorm twin (its entry's ModelInfo.twin:
  cnn_mnist -> cnn_mnist_bn, mlp -> mlp_bn, resnet20 -> resnet20_bn) when a part of the run
  keeps BatchNorm layers local (PartNeeds.local_norms: --algo=fedbn, or --local_terms with
  fedbn) on a model that has none (algorithms/fedbn.py refuses that) and the command line
  does not give --model; says so in one line."""
  from fedjax_drift import registry  # pylint: disable=g-import-not-at-top
  algo = registry.find('algorithm', flags['algo'])
  parts = (algo.info.parts if algo else ()) + tuple(
      t.strip() for t in (flags.get('local_terms') or '').split(','))
  found = [registry.find('part', p) for p in parts if p]
  local_norms = any(e is not None and e.info is not None and e.info.local_norms for e in found)
  model = registry.find('model', flags['model'])
  twin = model.info.twin if model is not None else ''
  if _given('model', argv) or not local_norms or not twin:
    return flags
  print(f'model: {twin}, --model={model.name} with BatchNorm layers, which FedBN keeps local '
        '(--model picks another)', flush=True)
  return {**flags, 'model': twin}


def _given(flag, argv) -> bool:
  return any(t == f'--{flag}' or t.startswith(f'--{flag}=') for t in argv)


def _with_personal_split(flags, argv):
  """flags with --test_partition=like_train when a personalised --algo (ditto, fedrep,
  pfedme, apfl, local_only; or one in --grid's algo axis) would otherwise have no client test
  splits to score its clients' own models on (evaluation.resolve refuses that) and the
  command line gives neither --test_partition nor an --eval_protocol other than auto; says
  so in one line. The test set is carved like each client's training labels; config.json
  records it, so --config and --resume run the same."""
  from fedjax_drift import evaluation, methods  # pylint: disable=g-import-not-at-top
  from fedjax_drift.data import partitions  # pylint: disable=g-import-not-at-top
  if (_given('test_partition', argv) or flags.get('test_partition') != 'none'
      or flags.get('eval_protocol') != 'auto'
      or partitions.splits_test(flags.get('partition', ''))):
    return flags
  algos = methods.split_grid(flags.get('grid', ''))[0] or [flags['algo']]
  personal = [a for a in algos if a in evaluation.personal_algorithms()]
  if not personal:
    return flags
  print(f'test split: like_train, each client\'s share of the test set carved like its '
        f'training labels, so --algo={",".join(personal)} is scored by its clients\' own '
        'models (--eval_protocol=global scores the global model on the whole test set '
        'instead)', flush=True)
  return {**flags, 'test_partition': 'like_train'}


def _ignore_signals():
  for name in ('SIGINT', 'SIGTERM', 'SIGHUP'):
    signal.signal(getattr(signal, name), signal.SIG_IGN)


def main_exit_code():
  """main()'s exit code; a signal before main's own handler (while importing) or after it
  (while the interpreter shuts down) still gives one line and 128 + the signal, never a
  traceback."""
  from fedjax_drift import interrupts  # pylint: disable=g-import-not-at-top
  interrupts.early()  # already, when the package was imported by one of its programs
  try:
    code = main(hard_exit_s=HARD_EXIT_S)
  except KeyboardInterrupt as e:
    _ignore_signals()
    sys.stderr.write(f'error: {str(e) or "interrupted"}\n')
    code = 128 + getattr(e, 'signum', signal.SIGINT)
  _ignore_signals()
  from fedjax_drift import distributed  # pylint: disable=g-import-not-at-top
  if code == 1 and distributed.active():
    # A failed process of a multi-process run: JAX's exit hook would wait for the others at
    # a shutdown barrier they may never reach, then abort from C++; its line is written.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # pylint: disable=protected-access
  if code in (128 + signal.SIGINT, 128 + signal.SIGTERM, 128 + signal.SIGHUP):
    # Interrupted: what the run owns is closed and its line written. Interpreter teardown
    # with XLA's threads cut mid-work can crash (SIGSEGV instead of the exit code): skip it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # pylint: disable=protected-access
  return code


if __name__ == '__main__':
  sys.exit(main_exit_code())

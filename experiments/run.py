"""fedjax-drift command line: `python experiments/run.py --algo=fedavg --rounds=50 ...`.

Flags are the fields of fedjax_drift.Config (`--help` lists them). Bad input gives one line
naming the flag and exit code 2.
"""
import argparse
import dataclasses
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


def build_parser(config_cls, suppress_defaults=False):
  parser = _Parser(description='Simulate federated learning under non-IID data.',
                   allow_abbrev=False,
                   argument_default=argparse.SUPPRESS if suppress_defaults else None)
  hints = typing.get_type_hints(config_cls)
  for f in dataclasses.fields(config_cls):
    kind = hints[f.name]
    kind = _bool if kind is bool else kind
    kwargs = dict(type=kind, help=f.metadata.get('help', ''))
    if not suppress_defaults:
      kwargs['default'] = f.default
    if kind is _bool:
      kwargs.update(nargs='?', const=True)
    if f.metadata.get('const') is not None:  # a bare --flag means this value
      kwargs.update(nargs='?', const=f.metadata['const'])
    parser.add_argument(f'--{f.name}', **kwargs)
  return parser


def main(argv=None):
  sys.path.insert(0, str(__import__('pathlib').Path(__file__).resolve().parents[1]))
  import fedjax_drift  # pylint: disable=g-import-not-at-top
  args = build_parser(fedjax_drift.Config).parse_args(argv)
  try:
    if args.resume:
      # Only the flags given on this command line; the rest come from the run's config.json.
      given = vars(build_parser(fedjax_drift.Config, suppress_defaults=True).parse_args(argv))
      if not args.out:
        raise fedjax_drift.UserError('--resume needs --out=RUN_DIR, the run to continue')
      fedjax_drift.resume(args.out, **given)
    else:
      fedjax_drift.run(fedjax_drift.Config(**vars(args)))
  except fedjax_drift.errors.DivergenceError as e:
    sys.stderr.write(f'error: {e}\n')
    return 3
  except fedjax_drift.UserError as e:
    sys.stderr.write(f'error: {e}\n')
    return 2
  except KeyboardInterrupt as e:  # the library's Interrupted says whether --resume can continue
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not add a traceback
    sys.stderr.write(f'error: {str(e) or "interrupted"}\n')
    return 130
  except Exception as e:  # pylint: disable=broad-except
    if os.environ.get('FEDJAX_DRIFT_DEBUG'):
      raise
    first = (str(e).strip().splitlines() or [''])[0]
    sys.stderr.write(f'error: {type(e).__name__}: {first} (set FEDJAX_DRIFT_DEBUG=1 for the '
                     'traceback)\n')
    return 1
  return 0


def _main_exit_code():
  """main()'s exit code; Ctrl-C before main's own handler (while importing) or after it
  (while the interpreter shuts down) still gives one line and 130, never a traceback."""
  try:
    code = main()
  except KeyboardInterrupt:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.stderr.write('error: interrupted\n')
    return 130
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  return code


if __name__ == '__main__':
  sys.exit(_main_exit_code())

"""A user's own method from a file of their own: --plugin on the command line, or registered
from a script after `import fedjax_drift`, with a flag of its own (registry.flag and
registry.load_plugins).

The plugin's registrations must not reach this test process's registry and Config, so each
use runs in a fresh process (as tests/test_new_method.py runs docs/new_method.md).
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from fedjax_drift import cli as cli_lib
from fedjax_drift import registry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, 'experiments', 'run.py')

# A user's file: an L1 proximal term with its own --l1_mu, as a local part and an algorithm.
PLUGIN = textwrap.dedent('''
    import jax
    import jax.numpy as jnp
    from fedjax_drift import registry
    from fedjax_drift.algorithms.parts import Part
    from fedjax_drift.algorithms.recipes import Recipe, algorithm
    from fedjax_drift.bounds import NONNEG

    registry.flag('l1_mu', 0.0, 'L1-prox weight mu', group='algorithm', bounds=NONNEG,
                  gridable=True)


    @registry.registers('part', 'l1prox', 'L1 proximal term (--l1_mu)', reads=('l1_mu',))
    def _l1prox(v, **_):
      mu = v.l1_mu
      def loss(params, logits, batch, ctx):
        del logits, batch
        pairs = zip(jax.tree.leaves(params), jax.tree.leaves(ctx.global_params))
        return mu * sum(jnp.sum(jnp.abs(w - w_t)) for w, w_t in pairs)
      return Part('l1prox', loss=loss)


    algorithm('l1prox', Recipe(('l1prox',), summary='L1 proximal term (--l1_mu)'))
''')


@pytest.fixture
def plugin_file(tmp_path):
  path = tmp_path / 'my_method.py'
  path.write_text(PLUGIN)
  return path


def cli(*args, cwd):
  env = dict(os.environ, PYTHONPATH=ROOT)
  return subprocess.run([sys.executable, RUN, *args], capture_output=True, text=True,
                        cwd=cwd, env=env, timeout=600)


def tiny(npz, out):
  return [f'--dataset=npz:{npz}', '--model=logreg', '--num_clients=4', '--clients_per_round=2',
          '--rounds=1', '--local_steps=2', '--progress=false', f'--out={out}']


def test_help_and_list_show_the_plugins_flag_and_method(plugin_file):
  """--help lists --l1_mu with its help text; --list the algorithm; without --plugin the
  flag is unknown."""
  shown = cli('--plugin=my_method.py', '--help', cwd=plugin_file.parent)
  assert shown.returncode == 0, shown.stderr
  assert '--l1_mu' in shown.stdout and 'L1-prox weight mu' in shown.stdout
  listed = cli('--plugin', 'my_method.py', '--list', cwd=plugin_file.parent)
  assert listed.returncode == 0, listed.stderr
  assert 'l1prox' in listed.stdout and 'L1 proximal term (--l1_mu)' in listed.stdout
  plain = cli('--l1_mu=0.1', cwd=plugin_file.parent)
  assert plain.returncode == 2 and 'unknown flag --l1_mu' in plain.stderr


def test_command_line_runs_the_plugins_method_with_its_flag(plugin_file, tiny_npz, tmp_path):
  """A run with --plugin=FILE (relative) and --l1_mu set: config.json records the plugin as an
  absolute path and the flag's value; the flag is read, so nothing warns about it; the same
  flag with --algo=fedavg warns that nothing reads it."""
  out = tmp_path / 'run'
  done = cli('--plugin=my_method.py', '--algo=l1prox', '--l1_mu=0.01', *tiny(tiny_npz, out),
             cwd=plugin_file.parent)
  assert done.returncode == 0, done.stderr[-3000:]
  assert 'l1_mu' not in done.stdout + done.stderr  # read: no unread-flag warning
  with open(out / 'config.json') as f:
    saved = json.load(f)
  assert saved['plugin'] == str(plugin_file) and saved['l1_mu'] == 0.01
  assert saved['algo'] == 'l1prox'


@pytest.mark.slow
def test_resume_and_config_load_the_recorded_plugin(plugin_file, tiny_npz, tmp_path):
  """--resume and --config=RUN_DIR from another directory load the plugin config.json names."""
  out = tmp_path / 'run'
  first = cli('--plugin=my_method.py', '--algo=l1prox', '--l1_mu=0.01', *tiny(tiny_npz, out),
              cwd=plugin_file.parent)
  assert first.returncode == 0, first.stderr[-3000:]
  resumed = cli('--resume', f'--out={out}', '--rounds=2', cwd=ROOT)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  rerun = cli(f'--config={out}', f'--out={tmp_path / "rerun"}', '--l1_mu=0.02', cwd=ROOT)
  assert rerun.returncode == 0, rerun.stderr[-3000:]
  with open(tmp_path / 'rerun' / 'config.json') as f:
    assert json.load(f)['l1_mu'] == 0.02


# Registered from a script after `import fedjax_drift`: every derived table follows.
SCRIPT = '''
import dataclasses, pickle, sys
import fedjax_drift
from fedjax_drift import applies, catalog, cli, config, registry
assert 'l1_mu' not in config.field_names()
registry.load_plugin(sys.argv[1])
assert 'l1_mu' in config.field_names() and 'l1_mu' in applies.declared()
assert 'l1_mu' in config.gridable_fields()
c = fedjax_drift.Config(algo='l1prox', l1_mu=0.1).validate()
assert isinstance(c, fedjax_drift.Config) and c.l1_mu == 0.1
assert dataclasses.replace(c, l1_mu=0.2).l1_mu == 0.2
assert pickle.loads(pickle.dumps(c)) == c
assert applies.unread_flags(c) == [] and applies.unread_flags(
    fedjax_drift.Config(l1_mu=0.1)) == ['l1_mu']
assert '--l1_mu=0.1 not read with --algo=fedavg' in applies.warning(fedjax_drift.Config(l1_mu=0.1))
assert 'l1prox' in catalog.values('algo')
assert '--l1_mu' in cli.build_parser(config.config_class()).format_help()
try:
  fedjax_drift.Config(l1_mu=-1.0).validate()
  raise AssertionError('a negative --l1_mu was accepted')
except fedjax_drift.UserError as e:
  assert '--l1_mu' in str(e)
assert config.parse_grid('l1_mu:0,0.1') == {'l1_mu': [0.0, 0.1]}
summary = fedjax_drift.run(fedjax_drift.Config(
    algo='l1prox', grid='l1_mu:0,0.1', dataset='npz:' + sys.argv[2], model='logreg',
    num_clients=4, clients_per_round=2, rounds=1, local_steps=2, progress=False,
    out=sys.argv[3]))
assert [r['l1_mu'] for r in summary['runs']] == [0.0, 0.1]
print('script ok')
'''


def test_a_script_registers_a_method_and_flag_after_import(plugin_file, tiny_npz, tmp_path):
  """From Python: the flag joins the Config, the checks, --help, --list and --grid (traced in
  one program), though registered after the package was imported."""
  env = dict(os.environ, PYTHONPATH=ROOT)
  done = subprocess.run([sys.executable, '-c', SCRIPT, str(plugin_file), tiny_npz,
                         str(tmp_path / 'sweep')], capture_output=True, text=True, cwd=ROOT,
                        env=env, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  assert 'script ok' in done.stdout


def test_a_plugin_flag_may_not_take_a_core_flags_name():
  """registry.flag refuses --lr (a core field) and --config (the command line's own)."""
  for name in ('lr', 'config'):
    with pytest.raises(ValueError, match=f'--{name} already exists'):
      registry.flag(name, 0.0, 'x')
  assert not registry.flags()


def test_a_missing_plugin_is_one_line(tmp_path, capsys):
  """A --plugin that names no file or module: exit 2, one line naming it."""
  assert cli_lib.main([f'--plugin={tmp_path / "none.py"}']) == 2
  assert cli_lib.main(['--plugin=no_such_module_xyz']) == 2
  lines = capsys.readouterr().err.strip().splitlines()
  assert len(lines) == 2 and 'none.py: no such file' in lines[0]
  assert 'no_such_module_xyz: no file or module' in lines[1]

"""fedjax-drift: a compiled JAX simulator for client-drift control in federated learning."""
# First, before jax: in the package's own programs a signal while importing is one line.
from fedjax_drift import interrupts as _interrupts
_interrupts.early_if_program()
from fedjax_drift import algorithms  # noqa: E402  pylint: disable=wrong-import-position
from fedjax_drift.config import Config
from fedjax_drift.errors import UserError
from fedjax_drift.simulation import resume, run
from fedjax_drift.study import build, load_params, plan, prepare
from fedjax_drift.version import __version__

__all__ = ['Config', 'UserError', 'algorithms', 'build', 'load_params', 'plan', 'prepare',
           'resume', 'run']

"""fedjax-drift: a compiled JAX simulator for client-drift control in federated learning."""
from fedjax_drift import algorithms
from fedjax_drift.config import Config
from fedjax_drift.errors import UserError
from fedjax_drift.simulation import resume, run
from fedjax_drift.study import build, load_params, plan, prepare
from fedjax_drift.version import __version__

__all__ = ['Config', 'UserError', 'algorithms', 'build', 'load_params', 'plan', 'prepare',
           'resume', 'run']

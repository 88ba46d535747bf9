"""fedjax-drift: a compiled JAX simulator for client-drift control in federated learning."""
from fedjax_drift import algorithms
from fedjax_drift.config import Config
from fedjax_drift.errors import UserError
from fedjax_drift.saved import load_params
from fedjax_drift.simulation import resume, run
from fedjax_drift.study import build, plan, prepare

__all__ = ['Config', 'UserError', 'algorithms', 'build', 'load_params', 'plan', 'prepare',
           'resume', 'run']
__version__ = '0.1.0'

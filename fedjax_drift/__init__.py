"""fedjax-drift: a compiled JAX simulator for client-drift control in federated learning."""
from fedjax_drift import algorithms
from fedjax_drift.config import Config
from fedjax_drift.errors import UserError
from fedjax_drift.simulation import prepare, resume, run

__all__ = ['Config', 'UserError', 'algorithms', 'prepare', 'resume', 'run']
__version__ = '0.1.0'

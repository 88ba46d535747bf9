"""fedjax-drift: a compiled JAX simulator for client-drift control in federated learning."""
# First of all, before any Python code runs: hold SIGINT, SIGTERM and SIGHUP while _start
# sees whether this is one of the package's programs; if so a signal from here on is one
# line, else the mask is given back (fedjax_drift/_start.py). Then interrupts' own handler.
import _signal
_HELD = (_signal.pthread_sigmask(_signal.SIG_BLOCK, (_signal.SIGINT, _signal.SIGTERM,
                                                    _signal.SIGHUP))
         if hasattr(_signal, 'pthread_sigmask') else None)  # POSIX
from fedjax_drift import _start  # noqa: E402  pylint: disable=C0413
_start.install_if_program(_HELD)
from fedjax_drift import interrupts as _interrupts  # noqa: E402  pylint: disable=C0413
_interrupts.early_if_program()
from fedjax_drift import algorithms  # noqa: E402  pylint: disable=wrong-import-position
from fedjax_drift.config import Config
from fedjax_drift.errors import UserError
from fedjax_drift.simulation import resume, run
from fedjax_drift.study import build, load_params, plan, prepare
from fedjax_drift.version import __version__
from fedjax_drift import registry  # noqa: E402
registry.load_package()  # every module that registers choices, once

__all__ = ['Config', 'UserError', 'algorithms', 'build', 'load_params', 'plan', 'prepare',
           'resume', 'run']

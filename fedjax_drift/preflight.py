"""Memory checks before a run builds or compiles anything: its data, state and per-client
tables from their shapes, then XLA's estimate for the compiled segment, against
--memory_budget_gb or what this process may use (hardware.py)."""
import jax

from fedjax_drift import distributed, hardware, host_state
from fedjax_drift.errors import MemoryBudgetError, UserError


def check_memory(cfg, need, what, advice):
  """Refuses `need` bytes over --memory_budget_gb, or over 90% of what this process may use
  (available_memory: the device's limit, or the host's, cgroup and `ulimit -v` included)."""
  available = available_memory()
  budget = cfg.memory_budget_gb * 1e9 or 0.9 * available
  if budget and need > budget:
    where = (f'--memory_budget_gb={cfg.memory_budget_gb:g}' if cfg.memory_budget_gb
             else f'90% of the {available / 1e9:.1f} GB this process may use')
    raise MemoryBudgetError(f'this run needs about {size_text(need)} ({what}), over {where}; '
                            f'{advice}')


def before_build(cfg, runs):
  """study.build's check before it builds any state on the device: the data and every run's
  state and client tables, from their shapes (study.device_bytes). The per-client state
  table (SCAFFOLD's c_i, FedDyn's gradients, ...) is named with its size: at paper scale
  (FedDyn, ResNet-18, 1,000 clients: 45 GB) it is what cannot fit."""
  def check(need, client_state):
    table = ''
    if host_state.enabled(cfg.client_state):  # the table is in host memory: check it there
      check_host_table(cfg, client_state * len(runs))
    elif client_state:
      table = (f'; the per-client state of --algo={cfg.algo} alone is '
               f'{size_text(client_state)} per run ({cfg.num_clients:,} clients x '
               f'{size_text(client_state / cfg.num_clients)})')
    check_memory(cfg, need, f'data plus the state and client tables of {len(runs)} run(s), '
                  f'from their shapes, before compiling{table}', 'fewer --seeds or --grid '
                  'points, fewer --num_clients, or a smaller --model')
  return check


def check_host_table(cfg, table_bytes):
  """Refuses a host-memory client table (--client_state=host) over 90% of the host's
  available memory, or a run over several processes (each would need the whole table)."""
  if distributed.active():
    raise UserError('--client_state=host runs in one process; this launch spans '
                    f'{jax.process_count()} (use --client_state=device)')
  available = hardware.host_memory_available()
  if available and table_bytes > 0.9 * available:
    raise UserError(f'--client_state=host: the per-client state of --algo={cfg.algo} is '
                    f'{size_text(table_bytes)} in host memory, over 90% of the '
                    f'{available / 1e9:.1f} GB available; fewer --num_clients, --seeds or '
                    '--grid points')


def size_text(num_bytes):
  if num_bytes >= 1e9:
    return f'{num_bytes / 1e9:.2f} GB'
  return f'{num_bytes / 1e6:.1f} MB' if num_bytes >= 1e6 else f'{num_bytes / 1e6:.3f} MB'


def estimated_memory(compiled):
  """Bytes XLA says a compiled program needs (arguments, outputs, temporaries, less donated
  buffers), or 0 when the backend does not say."""
  stats = compiled.memory_analysis()
  if stats is None:
    return 0
  peak = getattr(stats, 'peak_memory_in_bytes', 0)
  total = (stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes
           - stats.alias_size_in_bytes)
  return int(max(peak, total))


def available_memory():
  """Bytes one device may use: the accelerator's own limit where it reports one (GPU, TPU),
  else what this process may still allocate on the host (XLA:CPU uses host memory: the OS's
  available memory, the cgroup limit and `ulimit -v`; hardware.host_memory_available), or 0
  when unknown."""
  return hardware.device_memory_bytes() or hardware.host_memory_available()

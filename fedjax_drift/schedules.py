"""Round-level learning-rate schedules on the client learning rate (--lr_schedule).

Round t (0-based: the rounds completed before it, ServerState.round) trains with

    constant:     eta_t = eta
    step:         eta_t = eta * d^floor(t / S)                   (torch's StepLR per round)
    exponential:  eta_t = eta * d^t
    cosine:       eta_t = eta * (m + (1 - m) * (1 + cos(pi * min(t, T) / T)) / 2)

with eta = --lr, d = --lr_decay, S = --lr_step_rounds, T = --rounds and m = --lr_min, the
cosine floor as a *fraction* of --lr (optax's `alpha`): the first round trains at eta, and
the floor eta * m would be reached at round T + 1, after the last one (torch's
CosineAnnealingLR with T_max = T, eta_min = m * eta). A fraction keeps a swept --lr and its
floor in proportion, so `--grid=lr:...` needs no second axis.

The value comes from optax's schedules (cosine_decay_schedule, exponential_decay with
staircase for step) evaluated at the round index inside the compiled round, so the host does
nothing per round, and a resumed run (whose checkpoint holds the round) continues the
schedule exactly. Everything that reads the learning rate reads eta_t: the clients' local
optimizer and the algorithms that scale by it (SCAFFOLD's c_i, FedFOR's alpha/eta, SlowMo's
and FedADC's 1/eta_t and alpha eta_t: FedADC Alg. 2 l.12, l.16 and Alg. 3 write eta_t).
Classifier calibration after training (--personalize) uses --lr itself.
"""
from typing import Any, NamedTuple

import jax.numpy as jnp
import optax

from fedjax_drift import registry


def _exponential(init, steps, rate, staircase):
  """optax.exponential_decay(init, steps, rate, staircase=...). A swept --lr_decay arrives
  as a tracer, which that function cannot take (it tests `decay_rate == 0` in Python), so
  for a tracer this is its formula for rate != 0 (Config.validate refuses 0); the tests
  check that the two agree."""
  if isinstance(rate, (int, float)):
    return optax.exponential_decay(init, steps, rate, staircase=staircase)

  def schedule(count):
    p = count / steps
    return init * jnp.power(rate, jnp.floor(p) if staircase else p)

  return schedule


class Flags(NamedTuple):
  """The flags a learning-rate schedule reads: --lr_schedule, --lr, --rounds and those of its
  kind. lr, lr_decay and lr_min may be traced (swept with --grid); the others are static."""
  lr_schedule: str
  lr: Any
  rounds: int
  lr_decay: Any
  lr_step_rounds: int
  lr_min: Any


def client_lr(flags: Flags):
  """round index -> client learning rate for flags.lr_schedule (an optax.Schedule), or None
  for constant: the registered schedule built from the fields it declares."""
  return registry.build('lr_schedule', flags.lr_schedule, flags)


registry.register('lr_schedule', 'constant', 'eta_t = --lr', build=lambda v: None)
registry.register('lr_schedule', 'step', 'eta * d^floor(t / S), d = --lr_decay, S = '
                  '--lr_step_rounds', reads=('lr_decay', 'lr_step_rounds'),
                  build=lambda v: _exponential(v.lr, v.lr_step_rounds, v.lr_decay,
                                               staircase=True))
registry.register('lr_schedule', 'exponential', 'eta * d^t, d = --lr_decay', reads=('lr_decay',),
                  build=lambda v: _exponential(v.lr, 1, v.lr_decay, staircase=False))
registry.register('lr_schedule', 'cosine', 'from eta down to eta * --lr_min over --rounds',
                  reads=('lr_min',),
                  build=lambda v: optax.cosine_decay_schedule(v.lr, max(v.rounds, 1),
                                                              alpha=v.lr_min))


def lr_at(schedule, lr, round_index):
  """The client learning rate of round round_index (a traced int32 inside the round): the
  schedule's value (client_lr), or lr itself, untouched, when schedule is None (constant: the
  program is then exactly the unscheduled one)."""
  if schedule is None:
    return lr
  return schedule(round_index).astype(jnp.float32)


def diagnostics(schedule, lr) -> dict:
  """The round's learning rate lr as a rounds.csv column ('client_lr'), or {} when schedule
  is None (constant)."""
  if schedule is None:
    return {}
  return {'client_lr': jnp.asarray(lr, jnp.float32)}

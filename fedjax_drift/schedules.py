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
import dataclasses

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


def client_lr(config):
  """round index -> client learning rate for config.lr_schedule (an optax.Schedule), or None
  for constant: the registered schedule built from the fields it declares. config.lr,
  lr_decay and lr_min may be traced (swept with --grid); lr_step_rounds and rounds are
  static."""
  return registry.build('lr_schedule', config.lr_schedule, config)


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
NAMES = registry.names('lr_schedule')


def at_round(config, round_index):
  """config with lr = the schedule's value at round_index (a traced int32 inside the round);
  config itself, untouched, for constant (the program is then exactly the unscheduled one)."""
  schedule = client_lr(config)
  if schedule is None:
    return config
  return dataclasses.replace(config, lr=schedule(round_index).astype(jnp.float32))


def diagnostics(config) -> dict:
  """The round's learning rate as a rounds.csv column ('client_lr'), or {} for constant."""
  if config.lr_schedule == 'constant':
    return {}
  return {'client_lr': jnp.asarray(config.lr, jnp.float32)}

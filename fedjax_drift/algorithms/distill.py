"""Distillation terms shared by FedADC+, FedGKD and FedNTD.

Convention: a KL distillation term is the batch mean of KL(teacher_tau || student_tau), both
temperature-tau softmaxes of logits, the teacher without gradient. The papers' formulas have
no tau^2 factor, and neither has the default; tau2=True (--kd_tau2) multiplies the KL by
tau^2, as the code of FedGKD (pcode/workers/worker_fedgkd.py, `_divergence`), of CS-KD
(alinlab/cs-kd train.py, `KDLoss`), which FedADC+ follows, and of FedNTD
(algorithms/fedntd/criterion.py) do. At tau = 0.5 the two differ 4x.

logit_mse (--gkd_loss=mse, FedGKD Table 9) is the batch mean of the per-example mean squared
difference of the raw logits (no temperature), which is torch's F.mse_loss(student, teacher)
with its default 'mean' reduction over a full [B, C] batch, as the FedGKD code computes it.
"""
import jax
import jax.numpy as jnp
from jax.scipy.special import xlogy

from fedjax_drift.algorithms.local import masked_mean


def kl_to_student(target_probs, student_logits, temperature):
  """Per-example KL(target || softmax(student / tau)); target_probs carry no gradient."""
  target_probs = jax.lax.stop_gradient(target_probs)
  log_student = jax.nn.log_softmax(student_logits / temperature)
  return jnp.sum(xlogy(target_probs, target_probs) - target_probs * log_student, axis=-1)


def tau2_factor(temperature, tau2):
  """tau^2 with --kd_tau2, else 1 (a Python bool: it decides the program, not a value)."""
  return temperature * temperature if tau2 else 1.0


def kd_loss(teacher_logits, student_logits, mask, temperature, tau2=False):
  """mean_x KL(softmax(teacher / tau) || softmax(student / tau)), times tau^2 if tau2."""
  target = jax.nn.softmax(jax.lax.stop_gradient(teacher_logits) / temperature)
  kl = masked_mean(kl_to_student(target, student_logits, temperature), mask)
  return tau2_factor(temperature, tau2) * kl if tau2 else kl


def logit_mse(teacher_logits, student_logits, mask):
  """mean_x mean_c (student_c - teacher_c)^2 over raw logits; the teacher has no gradient."""
  diff = student_logits - jax.lax.stop_gradient(teacher_logits)
  return masked_mean(jnp.mean(diff * diff, axis=-1), mask)

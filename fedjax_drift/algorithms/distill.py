"""Distillation terms shared by FedADC+, FedGKD and FedNTD.

Convention (the papers are silent on it): a distillation term is the batch mean of
KL(teacher_tau || student_tau), both temperature-tau softmaxes of logits, the teacher without
gradient, and no tau^2 factor.
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


def kd_loss(teacher_logits, student_logits, mask, temperature):
  """mean_x KL(softmax(teacher / tau) || softmax(student / tau))."""
  target = jax.nn.softmax(jax.lax.stop_gradient(teacher_logits) / temperature)
  return masked_mean(kl_to_student(target, student_logits, temperature), mask)

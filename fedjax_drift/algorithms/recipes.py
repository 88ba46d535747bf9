"""What an --algo name stands for: a Recipe, registered by the file of its paper's family.

A recipe is data: its local parts (registry kind 'part'), an aggregator ('aggregator'; with
`aggregator_flag`, a field of the recipe's own picks it: IGFL's 'attention' and --attention=time
give attention_time), a server optimizer ('server'), a local optimizer ('local_optimizer'; '' =
--local_optimizer, which a recipe with its own then refuses), and the paper's aggregation
weighting (used when --weighting=auto) with where the paper sets it.
"""
from typing import NamedTuple

from fedjax_drift import registry


class Recipe(NamedTuple):
  parts: tuple = ()
  aggregator: str = 'mean'
  server: str = 'avg'          # a registry 'server' entry
  weighting: str = 'examples'  # the paper's p_i: examples (n_i / n) or uniform (1/|S|)
  weighting_source: str = ''   # where the paper sets p_i
  summary: str = ''
  projection: bool = False     # the model gets a projection head before its output layer
  local_optimizer: str = ''    # a registry 'local_optimizer' entry; '' = --local_optimizer
  personal: bool = False       # clients keep their own models (--eval_protocol=local tests them)
  step_knobs: tuple = ()       # its own flags that set how far a step moves (a divergence names them)
  federated: bool = True       # False: no server or federated terms (composition is refused)
  # A Config field of the recipe's own (in its reads) whose value v makes the aggregator
  # '<aggregator>_<v>' (IGFL: 'attention' and --attention); --aggregator replaces both.
  aggregator_flag: str = ''
  # Its round with a cohort masked up to a larger size equals the lone cohort's (the server
  # update reads only the weighted sum of the deltas): a --grid may sweep --clients_per_round.
  masks_cohort: bool = False


MCMAHAN = 'McMahan et al. 2017, FedAvg: n_k/n'
INHERITS = 'inherits FedAvg\'s n_k/n averaging'  # the baselines, as the papers compare them
REDDI = 'Reddi et al. 2021, Alg. 2: (1/|S|) sum'


def algorithm(name, recipe: Recipe, reads=(), build=None):
  """Registers --algo=name as `recipe`; `reads`: fields the recipe itself reads (its
  aggregator_flag: IGFL's --attention, the query of its attention aggregator; its build's).
  build(values, algo, trainer, model, parts) -> FederatedAlgorithm, when given, turns the
  recipe's composed algorithm `algo` into the method (a personalised client update: Ditto,
  FedRep); see algorithms.get."""
  registry.register('algorithm', name, recipe.summary, reads=reads, build=build, info=recipe)


def get(name) -> Recipe:
  """The registered recipe of --algo=name (a one-line UserError naming --algo otherwise)."""
  return registry.get('algorithm', name).info


def registered() -> dict:
  """{--algo name: Recipe} of every algorithm registered now, in registration order."""
  return {name: e.info for name, e in registry.entries('algorithm').items()}

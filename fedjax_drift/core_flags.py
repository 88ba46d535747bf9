"""The core flags: every built-in flag of a run, one dataclass field each with its metadata.

Each field carries its metadata (`_f`): the help text, the --help group, the choices, the
Bounds of a number (fedjax_drift/bounds.py), and whether --grid may sweep it (gridable) or
grids it as a scenario axis (scenario_axis). config.py's Config is these fields and nothing
else of its own (plus the plugins' flags, registry.flag, in config.config_class()): its
validate() checks every field against this metadata, and the CLI builds its flags from it, so
every option is documented once, here.

Gridable fields are traced: study.py rebuilds the Config inside every compiled round with
`dataclasses.replace(config, **hp)`, where hp holds the run's values of the gridded fields as
tracers (jnp float32 scalars, one per run under the vmap). Code that reads a gridable field
below a round (algorithms, schedules, the local step) may only do arithmetic with it: no
`if config.prox_mu:`, no float(), no shapes or step counts from it (a zero that switches a part
off skips it only when the field is not gridded; gridded, the part runs with weight 0).
Config.__post_init__, which runs again at each rebuild, must not read gridable fields either.

Scenario axes (fields marked scenario_axis=True: the partition's --dirichlet_alpha and
--classes_per_client, the cohort's --clients_per_round, --local_steps and --local_epochs) may
be gridded too, but are never traced: they shape each run's host-built data, its cohort mask
or its step counts only (study.py). Every other flag is one value per command; --grid refuses
it in one line.
"""
import dataclasses

from fedjax_drift import registry
from fedjax_drift.bounds import (ABOVE_0, AT_LEAST_0, AT_LEAST_1, NONNEG, POSITIVE, UNIT,
                                 UNIT_EXCL_0, UNIT_EXCL_1, Bounds)


# The --help sections, in order; every field's metadata names one.
GROUPS = ('data', 'model', 'local training', 'algorithm', 'server', 'run', 'output',
          'diagnostics')


# image_size and digits5_parts are checked with one message naming both.
_IMAGES = ('--image_size={image_size} must be >= 0 and --digits5_parts='
           '{digits5_parts} in 1..10')


def _f(default, help_text, choices=None, group=None, *, bounds=None, gridable=False,
       scenario_axis=False):
  """A Config field: its default and metadata (help text, choices, --help group, Bounds, and
  whether --grid may sweep it: gridable fields must be floats that only enter arithmetic;
  scenario_axis fields shape only a run's host-built data or its step counts, see
  config.SCENARIO_AXES)."""
  return dataclasses.field(default=default,
                           metadata={'help': help_text, 'choices': choices, 'group': group,
                                     'bounds': bounds, 'gridable': gridable,
                                     'scenario_axis': scenario_axis})


def plugin_field(flag):
  """A registry.Flag (a plugin's own flag) -> (name, type, field) for
  dataclasses.make_dataclass: a field with the metadata a core field carries."""
  return (flag.name, type(flag.default),
          _f(flag.default, flag.help, flag.choices, flag.group, bounds=flag.bounds,
             gridable=flag.gridable))


@dataclasses.dataclass
class CoreFlags:
  """The built-in flags, one field each, in --help and config.json order; config.Config
  subclasses this and adds the behaviour (validation, plugin flags, derived values)."""

  # What to run.
  algo: str = _f('fedavg', 'federated algorithm', group='algorithm')
  model: str = _f('cnn_mnist', 'network', registry.Choices('model'), group='model')
  init: str = _f('default', 'parameter init: default (flax\'s), zeros, or torch (each layer as '
                 'PyTorch builds it, the papers\' ResNets as their code)',
                 registry.Choices('init'), group='model')
  gn_groups: int = _f(0, 'GroupNorm models (resnet8/18/20, resnet50_gn): groups per layer; '
                      '0 = the model\'s rule (exclusive with --gn_group_size)',
                      group='model', bounds=AT_LEAST_0)
  gn_group_size: int = _f(0, 'GroupNorm models: channels per group; 0 = use --gn_groups',
                          group='model', bounds=AT_LEAST_0)
  gn_eps: float = _f(-1.0, 'GroupNorm models: the ε of every GroupNorm layer; -1 = the '
                     'model\'s own (torch\'s 1e-5 for resnet8 and resnet50_gn, which follow '
                     'FedGKD\'s code; flax\'s 1e-6 for resnet18 and resnet20)', group='model',
                     bounds=POSITIVE.but(allow=-1, hint='or -1 for the model\'s own'))
  projection_hidden: int = _f(0, 'projection head (MOON, FedGKD+) hidden width; 0 = the base '
                              'model\'s feature width, as the MOON and FedGKD code (earlier '
                              'versions used --moon_projection_dim, 256)',
                              group='model', bounds=AT_LEAST_0)
  init_params: str = _f('', 'start from the global parameters in this .npz (what --save_params '
                        'writes) instead of --init; with --rounds=0 the run only evaluates '
                        'them', group='model')
  init_params_run: int = _f(0, '--init_params: which run of the file (its runs.csv row; a '
                            'single run\'s file has only run 0)', group='model', bounds=AT_LEAST_0)
  dropout: float = _f(-1.0, 'dropout rate of models with dropout (cnn_emnist): -1 = the '
                      'model\'s own, 0 = off, p = every dropout layer p', group='model',
                      bounds=UNIT_EXCL_1.but(allow=-1, hint='or -1 for the model\'s own'))
  # Data and its split across clients.
  dataset: str = _f('embedded', 'examples to train and test on', group='data')
  data_dir: str = _f('', 'directory (or file) holding the dataset\'s files; default: the '
                     'copy imported with `fedjax-drift-data import`', group='data')
  cifar100_labels: str = _f('fine', 'cifar100: the 100 fine classes or the 20 coarse '
                            'superclasses', ('fine', 'coarse'), group='data')
  emnist_split: str = _f('byclass', 'emnist: which EMNIST split (byclass: 62 classes, as IGFL; '
                         '--dataset=emnist_SPLIT says the same)',
                         ('byclass', 'bymerge', 'balanced', 'letters', 'digits', 'mnist'),
                         group='data')
  image_size: int = _f(0, 'resize images to NxN when reading tfds:, hf: or domainnet/digits5 '
                       'files in place; 0 = the dataset\'s own size (domainnet: 64, FedBN '
                       'uses 256; digits5: 28)',
                       group='data', bounds=AT_LEAST_0.but(message=_IMAGES))
  digits5_parts: int = _f(1, 'digits5: FedBN train parts per domain (743 images each); FedBN\'s '
                          '--percent=0.1 is 1, 1.0 is 10',
                          group='data', bounds=Bounds(1, 10, message=_IMAGES))
  hf_image_column: str = _f('', 'hf: the image column; empty = the Image feature', group='data')
  hf_label_column: str = _f('', 'hf: the label column; empty = the ClassLabel feature',
                            group='data')
  hf_train_split: str = _f('train', 'hf: the split to train on', group='data')
  hf_test_split: str = _f('test', 'hf: the split to test on', group='data')
  tokenizer: str = _f('auto', 'text datasets: tokenizer.json, a WordPiece vocab.txt, or a '
                      'folder holding one; auto = the --pretrained folder\'s, else a WordPiece '
                      'vocabulary of --vocab_size trained on the training texts', group='data')
  vocab_size: int = _f(8000, 'text datasets, --tokenizer=auto without --pretrained: size of '
                       'the WordPiece vocabulary trained on the training texts', group='data')
  max_seq_len: int = _f(128, 'text datasets: tokens per example (truncated or padded, with an '
                        'attention mask)', group='data')
  pretrained: str = _f('', 'a Hugging Face checkpoint folder (config.json + model.safetensors '
                       'or pytorch_model.bin), read from local disk', group='model')
  partition: str = _f('dirichlet', 'how training examples are split across clients',
                      group='data')
  classes_per_client: int = _f(2, 'shards: labels per client (s)', group='data',
                               bounds=AT_LEAST_0, scenario_axis=True)
  dirichlet_alpha: float = _f(0.5, 'dirichlet / dirichlet_client / quantity concentration',
                              group='data', bounds=POSITIVE, scenario_axis=True)
  test_partition: str = _f('none', 'split the test set across clients like the train set',
                           ('none', 'like_train'), group='data')
  val_fraction: float = _f(0.0, 'hold out this share of the training data as a validation '
                           'split (0 = none), seeded by --seed and the same for every method: '
                           'clients train on the rest, and every evaluation also reports the '
                           'global model\'s accuracy on it (metrics.csv val_accuracy)',
                           group='data', bounds=UNIT_EXCL_1.but(hint='0 = no validation split'))
  val_source: str = _f('clients', 'where --val_fraction comes from: clients = that share of '
                       'each client\'s training examples (each client\'s own train/validation '
                       'split), server = a slice of the pooled training set held out before '
                       'partitioning; dataset = the dataset\'s own validation split (SST-5\'s '
                       'dev.txt, a text: or npz: validation split), scored like server\'s, '
                       'with --val_fraction=0 and every training example kept',
                       ('clients', 'server', 'dataset'), group='data')
  val_order: str = _f('random', '--val_source=server: which slice of the pooled training set '
                      'it holds out: random = a seeded draw (refused if it misses a class); '
                      'tail = the last --val_fraction of each class in file order, FedGKD\'s '
                      'code\'s last 10% made class-covering (docs/running.md)',
                      ('random', 'tail'), group='data')
  cohort_sampler: str = _f('uniform', 'cohort sampling; cover_classes requires the cohort\'s '
                           'labels to cover every class', ('uniform', 'cover_classes'),
                           group='server')
  cohorts: str = _f('', 'file:PATH: a JSON list of one list of client ids per round (at least '
                   '--rounds lists of --clients_per_round distinct ids in [0, N)); round t uses '
                   'list t instead of sampling, to replay another code\'s cohorts; '
                   '\'\' = sample', group='server')
  scenario: str = _f('static', 'how clients and labels change over rounds',
                     registry.Choices('scenario'), group='data')
  concept_shift_prob: float = _f(0.05, 'concept_shift: probability, before each round, that one '
                                 'class chosen at random gets a new label (FedFOR §4.4)',
                                 group='data', bounds=UNIT, gridable=True)
  concept_shift_kind: str = _f('relabel', 'concept_shift: relabel = one class takes another '
                               'label (merging with its holders, FedFOR §4.4); swap = two '
                               'classes exchange labels', ('relabel', 'swap'), group='data')
  concept_shift_count: int = _f(0, 'concept_shift: exactly N shifts, at N distinct rounds drawn '
                                'per seed from 2..--rounds (FedFOR Table 5: 10 in 200); 0 = '
                                'each round with --concept_shift_prob', group='data')
  imbalance_ratio: float = _f(0.01, 'longtail_stateless: rarest / most frequent class share',
                              group='data', bounds=UNIT_EXCL_0)
  client_fraction: float = _f(0.1, 'longtail_stateless: share of the training set each fresh '
                              'client samples before the long-tail trim',
                              group='data', bounds=UNIT_EXCL_0)
  num_clients: int = _f(50, 'total number of clients N', group='data', bounds=AT_LEAST_1)
  clients_per_round: int = _f(10, 'cohort size K, sampled uniformly without replacement',
                              group='server', bounds=AT_LEAST_1, scenario_axis=True)
  dropout_prob: float = _f(0.0, 'each sampled client never reports with this probability per '
                           'round; the aggregation ignores it (0 = every client reports)',
                           group='server', bounds=UNIT_EXCL_1, gridable=True)
  straggler_frac: float = _f(0.0, 'each sampled client straggles with this probability per round:'
                             ' it runs a uniform number of its H_i steps from '
                             '--straggler_min_steps (0 = none)',
                             group='server', bounds=UNIT, gridable=True)
  straggler_min_steps: int = _f(1, 'the fewest local steps a straggler runs (capped at its H_i)',
                                group='server', bounds=AT_LEAST_1)
  # Local work.
  rounds: int = _f(50, 'communication rounds (0 = only evaluate the starting parameters, '
                   'e.g. --init_params)',
                   group='run', bounds=AT_LEAST_0.but(hint='0 = only evaluate the start'))
  local_steps: int = _f(0, 'H local steps per client (exclusive with --local_epochs)',
                        group='local training', bounds=AT_LEAST_0, scenario_axis=True)
  local_epochs: int = _f(0, 'E local epochs: client i runs E*ceil(n_i/B) steps; 0 = 1 '
                         'unless --local_steps is set',
                         group='local training', bounds=AT_LEAST_0, scenario_axis=True)
  batch_size: int = _f(32, 'local minibatch size; 0 = the client\'s full data every step',
                       group='local training', bounds=AT_LEAST_0)
  lr: float = _f(0.05, 'local learning rate eta',
                 group='local training', bounds=POSITIVE, gridable=True)
  lr_schedule: str = _f('constant', 'round-level schedule of the client learning rate, at the '
                        'round index inside the compiled round (optax; fedjax_drift/'
                        'schedules.py): step = lr * lr_decay^floor(t / lr_step_rounds), '
                        'exponential = lr * lr_decay^t, cosine = from lr down to lr * lr_min '
                        'over --rounds', registry.Choices('lr_schedule'),
                        group='local training')
  lr_decay: float = _f(0.0, '--lr_schedule=step|exponential: the factor d in (0, 1] (e.g. 0.1 '
                       'every --lr_step_rounds, or 0.998 per round); 0 = not given',
                       group='local training', gridable=True)
  lr_step_rounds: int = _f(0, '--lr_schedule=step: rounds between decays', group='local training')
  lr_min: float = _f(0.0, '--lr_schedule=cosine: the floor as a fraction of --lr (optax\'s '
                     'alpha), in [0, 1]',
                     group='local training',
                     bounds=UNIT.but(hint='a fraction of --lr'), gridable=True)
  local_momentum: float = _f(0.0, 'local SGD momentum',
                             group='local training', bounds=UNIT_EXCL_1, gridable=True)
  weight_decay: float = _f(0.0, 'L2 weight decay added to the local gradient',
                           group='local training', bounds=NONNEG.but(wording='>= 0'), gridable=True)
  weight_decay_skip: str = _f('none', 'parameters --weight_decay leaves alone: none; norm = '
                              'every normalisation layer\'s scale and bias; '
                              'norm_except_shortcut = those but a residual shortcut\'s norm, as '
                              'FedGKD\'s code (it exempts names containing "bn")',
                              ('none', 'norm', 'norm_except_shortcut'), group='local training')
  # The training pipeline (data/pipeline.py); every default leaves it as it was before.
  local_optimizer: str = _f('sgd', 'local optimizer (state reset every round); adam takes '
                            '--lr, --adam_b1, --adam_b2, --adam_eps and --weight_decay as L2',
                            registry.Choices('local_optimizer'), group='local training')
  adam_b1: float = _f(0.9, '--local_optimizer=adam: first-moment decay',
                      group='local training', bounds=UNIT_EXCL_1)
  adam_b2: float = _f(0.999, '--local_optimizer=adam: second-moment decay',
                      group='local training', bounds=UNIT_EXCL_1)
  adam_eps: float = _f(1e-8, '--local_optimizer=adam: epsilon',
                       group='local training', bounds=POSITIVE.but(wording='> 0'))
  clip_grad_norm: float = _f(0.0, 'clip each local gradient to this global L2 norm (0 = off; '
                             'the FedGKD code uses 10)',
                             group='local training',
                             bounds=NONNEG.but(wording='>= 0', hint='0 = off'))
  augment: str = _f('none', 'training-batch augmentation: crop_flip = random crop with '
                    '--augment_pad zero padding + horizontal flip (CIFAR); flip_rotate = '
                    'horizontal flip + rotation within +-(--augment_degrees) (FedBN DomainNet)',
                    registry.Choices('augment'), group='local training')
  augment_pad: int = _f(4, '--augment=crop_flip: zero padding on each side',
                        group='local training', bounds=AT_LEAST_0)
  augment_degrees: float = _f(30.0, '--augment=flip_rotate: largest rotation in degrees',
                              group='local training', bounds=Bounds(0, 180))
  normalize: str = _f('none', 'per_channel: standardise inputs (training and evaluation) with '
                      'the training images\' per-channel mean and std; fedgkd_code: with the '
                      'fixed constants FedGKD\'s code uses for the dataset (CIFAR-10: mean '
                      '0.4914, 0.4822, 0.4465, std 0.2023, 0.1994, 0.2010)',
                      ('none', 'per_channel', 'fedgkd_code'), group='local training')
  normalize_mean: str = _f('', 'explicit per-channel means, e.g. 0.4914,0.4822,0.4465 (with '
                           '--normalize_std; inputs on the [0, 1] scale)', group='local training')
  normalize_std: str = _f('', 'explicit per-channel stds (with --normalize_mean)',
                          group='local training')
  # Server.
  server_lr: float = _f(1.0, 'server learning rate (alpha)',
                        group='server', bounds=POSITIVE, gridable=True)
  weighting: str = _f('auto', 'aggregation weights p_i: auto = each algorithm\'s own box (uniform '
                      '1/|S| for slowmo, fedadc*, fedfor, igfl*, scaffold, feddyn, '
                      'fedadam/yogi/adagrad; examples n_i/n otherwise)',
                      ('auto', 'uniform', 'examples'), group='server')
  # Algorithm hyperparameters (each fedjax_drift/algorithms/*.py states its equations).
  beta: float = _f(0.9, 'FedADC / SlowMo momentum beta',
                   group='algorithm', bounds=UNIT, gridable=True)
  beta_local: float = _f(-1.0, 'FedADC beta_local for m_bar = beta_local m_t / H_i; -1 = --beta '
                         '(1 gives the 2021 conference version)',
                         group='algorithm',
                         bounds=UNIT.but(allow=-1, hint='or -1 for --beta'), gridable=True)
  beta_global: float = _f(-1.0, 'FedADC beta_global; -1 = --beta',
                          group='algorithm',
                          bounds=UNIT.but(allow=-1, hint='or -1 for --beta'), gridable=True)
  fedadc_variant: str = _f('heavy_ball', 'FedADC local step', ('heavy_ball', 'nesterov'),
                           group='algorithm')
  phi: float = _f(0.9, 'FedADC double momentum: local EMA coefficient',
                  group='algorithm', bounds=UNIT, gridable=True)
  kd_lambda: float = _f(0.35, 'FedADC+ self-confidence distillation weight lambda',
                        group='algorithm', bounds=UNIT, gridable=True)
  kd_tau2: bool = _f(False, 'multiply every KL distillation term (FedGKD*, FedADC+, FedNTD, '
                     'FedDistill+) by tau^2, as the FedGKD, CS-KD and FedNTD code do',
                     group='algorithm')
  gkd_loss: str = _f('kl', 'FedGKD distillation term: kl, or mse = mean squared difference of '
                     'the logits (FedGKD Table 9)', ('kl', 'mse'), group='algorithm')
  kd_temperature: float = _f(1.0, 'distillation temperature tau (FedADC+, FedGKD, '
                             'FedDistill+)', group='algorithm', bounds=ABOVE_0, gridable=True)
  for_alpha: float = _f(5.0, 'FedFOR alpha (App. C; --for_scale says how it scales the term)',
                        group='algorithm', bounds=NONNEG, gridable=True)
  for_scale: str = _f('per_step', 'FedFOR: how large the term is and when it acts '
                      '(docs/algorithms.md derives each, RESULTS.md measures them): '
                      'per_step = alpha / (lr H_i) at every step (H_i the client\'s local '
                      'steps; reproduces the paper\'s claims), '
                      'paper = alpha / lr at every step (eq. 7 as printed; diverges at alpha = 5), '
                      'round = alpha / lr at the last local step (the correction once a round), '
                      'epoch = alpha / lr at the last step of each local epoch',
                      ('paper', 'per_step', 'round', 'epoch'), group='algorithm')
  for_gate: str = _f('coordinate', 'FedFOR: where U = relu applies: coordinate = to each '
                     'coordinate\'s product (eq. 7), vector = to the whole inner product (one U '
                     'of the sum, eq. 6 gated)', ('coordinate', 'vector'), group='algorithm')
  gkd_gamma: float = _f(0.2, 'FedGKD distillation weight gamma (the loss adds gamma/2 KL)',
                        group='algorithm', bounds=NONNEG, gridable=True)
  gkd_buffer: int = _f(5, 'FedGKD / FedGKD-Vote: number M of past global models kept',
                       group='algorithm', bounds=AT_LEAST_1)
  gkd_buffer_start: str = _f('initial', 'FedGKD buffer before round 1: initial = holds w_0 '
                             '(the paper), aggregated = empty, no distillation in round 1 '
                             '(the authors\' code)', ('initial', 'aggregated'),
                             group='algorithm')
  vote_lambda: float = _f(0.1, 'FedGKD-Vote scale lambda',
                          group='algorithm', bounds=NONNEG, gridable=True)
  vote_val_size: int = _f(500, 'FedGKD-Vote: training examples held out for server validation '
                          '(drawn from the --val_source=server split when there is one)',
                          group='algorithm', bounds=AT_LEAST_1)
  attention: str = _f('self', 'IGFL-S attention query; time = §4.3, time_rows = the row-averaged '
                      'reading of Alg. 3 option III', ('self', 'global', 'time', 'time_rows'),
                      group='algorithm')
  attention_similarity: str = _f('dot', 'IGFL-S score', ('dot', 'cosine'), group='algorithm')
  attention_temperature: float = _f(1.0, 'IGFL-S scores are divided by this',
                                    group='algorithm', bounds=ABOVE_0, gridable=True)
  igfl_group: float = _f(1.0, 'IGFL-C: scale of the group term Delta_G (1 = the paper, '
                         '0 = FedAvg steps)', group='algorithm', bounds=NONNEG, gridable=True)
  prox_mu: float = _f(0.01, 'FedProx mu', group='algorithm', bounds=NONNEG, gridable=True)
  dyn_alpha: float = _f(0.01, 'FedDyn alpha', group='algorithm', bounds=NONNEG, gridable=True)
  curv_lambda: float = _f(0.01, 'FedCurv lambda', group='algorithm', bounds=NONNEG, gridable=True)
  distill_lambda: float = _f(1.0, 'FedDistill+ weight lambda of the KL to the global '
                             'per-label logits (1 = the FedGen code; 0 = FedAvg)',
                             group='algorithm', bounds=NONNEG, gridable=True)
  fedgen_alpha: float = _f(10.0, 'FedGen: client weight alpha of the CE of the head on generated '
                           'features (the FedGen code\'s generative_alpha, RUNCONFIGS mnist/celeb/'
                           'emnist: 10); 0 with --fedgen_beta=0 = FedAvg',
                           group='algorithm', bounds=NONNEG, gridable=True)
  fedgen_beta: float = _f(10.0, 'FedGen: client weight beta of the KL to the head\'s output on '
                          'generated features of the batch\'s labels (the code\'s '
                          'generative_beta: 10 mnist/celeb, 1 emnist)',
                          group='algorithm', bounds=NONNEG, gridable=True)
  fedgen_decay: float = _f(0.98, 'FedGen: alpha and beta are multiplied by this each round '
                           '(floor 1e-4; the code\'s exp_lr_scheduler decay=0.98)',
                           group='algorithm', bounds=UNIT_EXCL_0, gridable=True)
  fedgen_noise_dim: int = _f(32, 'FedGen: generator noise width (the code\'s GENERATORCONFIGS: '
                             '32 mnist/emnist, 64 cifar)', group='algorithm', bounds=AT_LEAST_1)
  fedgen_hidden: int = _f(256, 'FedGen: generator hidden width (the code: 256 mnist/emnist, '
                          '512 cifar; FedGKD §5.1: 512 ResNet-8, 2048 ResNet-50)',
                          group='algorithm', bounds=AT_LEAST_1)
  fedgen_steps: int = _f(50, 'FedGen: server Adam steps on the generator per round (the code: '
                         'ensemble_epochs 50 / 5 teacher iterations x 5)',
                         group='algorithm', bounds=AT_LEAST_0)
  fedgen_lr: float = _f(3e-4, 'FedGen: generator Adam learning rate, times 0.98 each round (the '
                        'code\'s ensemble_lr: 3e-4 mnist/celeb, 1e-4 emnist)',
                        group='algorithm', bounds=NONNEG, gridable=True)
  fedgen_weight_decay: float = _f(1e-2, 'FedGen: generator Adam L2 weight decay (the code\'s '
                                  'RUNCONFIGS weight_decay 1e-2)',
                                  group='algorithm', bounds=NONNEG, gridable=True)
  fedgen_batch: int = _f(0, 'FedGen: labels per generator step on the server; 0 = --batch_size '
                         '(the code trains it with the users\' batch_size), or 32 if that is 0',
                         group='algorithm', bounds=AT_LEAST_0)
  fedgen_client_batch: int = _f(32, 'FedGen: generated features per local step (the code\'s '
                                '--gen_batch_size=32)', group='algorithm', bounds=AT_LEAST_1)
  fedgen_diversity: float = _f(1.0, 'FedGen: weight of the generator\'s diversity loss (the '
                               'code\'s ensemble_eta=1)',
                               group='algorithm', bounds=NONNEG, gridable=True)
  fedgen_teacher: str = _f('clients', 'FedGen: the generator\'s teacher loss; clients = sum_k '
                           'w_k(y) CE(head_k(z), y) (the code), ensemble = CE of the label-'
                           'weighted sum of the heads\' logits', ('clients', 'ensemble'),
                           group='algorithm')
  ntd_beta: float = _f(0.3, 'FedNTD beta', group='algorithm', bounds=NONNEG, gridable=True)
  ntd_temperature: float = _f(1.0, 'FedNTD temperature tau',
                              group='algorithm', bounds=ABOVE_0, gridable=True)
  rs_alpha: float = _f(0.5, 'FedRS: scale of absent classes\' logits (1 = FedAvg)',
                       group='algorithm', bounds=UNIT, gridable=True)
  moon_mu: float = _f(1.0, 'MOON contrastive weight mu',
                      group='algorithm', bounds=NONNEG, gridable=True)
  moon_temperature: float = _f(0.5, 'MOON temperature tau',
                               group='algorithm', bounds=ABOVE_0, gridable=True)
  moon_projection_dim: int = _f(256, 'MOON / FedGKD+ projection head width',
                                group='algorithm', bounds=AT_LEAST_1)
  ditto_lambda: float = _f(0.1, 'Ditto lambda: pull of the personal model to the global one',
                           group='algorithm', bounds=NONNEG, gridable=True)
  fedrep_head_fraction: float = _f(0.9, 'FedRep: share of a client\'s H_i steps that train its '
                                   'head (first), the rest train the body (the code: 9 of 10 '
                                   'epochs)', group='algorithm', bounds=UNIT, gridable=True)
  pfedme_lambda: float = _f(15.0, 'pFedMe lambda of the Moreau envelope',
                            group='algorithm', bounds=NONNEG, gridable=True)
  pfedme_inner_steps: int = _f(5, 'pFedMe K: inner steps solving the personalised problem',
                               group='algorithm', bounds=AT_LEAST_1)
  pfedme_personal_lr: float = _f(0.09, 'pFedMe personal learning rate of the inner steps',
                                 group='algorithm', bounds=POSITIVE, gridable=True)
  apfl_alpha: float = _f(0.25, 'APFL mixing weight alpha of the personal model (its start when '
                         'adaptive)', group='algorithm', bounds=UNIT, gridable=True)
  apfl_alpha_lr: float = _f(0.0, 'APFL learning rate of alpha (0 = fixed alpha)',
                            group='algorithm', bounds=NONNEG, gridable=True)
  server_optimizer: str = _f('', 'override the server optimizer: avg, slowmo, adam, yogi, '
                             'adagrad', group='server')
  server_beta1: float = _f(0.9, 'FedAdam/FedYogi/FedAdagrad first-moment decay',
                           group='server', bounds=UNIT, gridable=True)
  server_beta2: float = _f(0.99, 'FedAdam/FedYogi second-moment decay',
                           group='server', bounds=UNIT, gridable=True)
  server_tau: float = _f(0.01, 'FedAdam/FedYogi/FedAdagrad adaptivity tau',
                         group='server', bounds=ABOVE_0, gridable=True)
  server_momentum: float = _f(0.0, 'add SlowMo server momentum with this beta to any algorithm',
                              group='server', bounds=UNIT)
  local_terms: str = _f('', 'comma list of extra local parts: fedadc, self_kd, for, gkd, '
                        'gkd_vote, igfl_c, prox, scaffold, dyn, curv, curv_stateless, ntd, rs; '
                        'topk, qsgd compress the upload',
                        group='algorithm')
  aggregator: str = _f('', 'override the aggregator: mean, attention_self, attention_global, '
                       'attention_time, attention_time_rows, median, trimmed_mean, krum, '
                       'dp_gaussian', group='algorithm')
  # Robust aggregation (algorithms/robust.py), compressed uploads (compression.py), DP (dp.py).
  trim_beta: float = _f(0.1, '--aggregator=trimmed_mean: fraction beta of the cohort dropped at '
                        'each end of every coordinate (0 = the --weighting mean, FedAvg\'s, '
                        'not the paper\'s uniform mean unless --weighting=uniform)',
                        group='algorithm',
                        bounds=UNIT_EXCL_1.but(high=0.5, wording='in [0, 0.5)'))
  krum_byzantine: int = _f(1, '--aggregator=krum: f, the Byzantine clients assumed (scores sum '
                           'the K - f - 2 nearest squared distances)', group='algorithm',
                           bounds=AT_LEAST_0)
  krum_select: int = _f(1, '--aggregator=krum: m updates of the lowest scores averaged (1 = '
                        'Krum, more = Multi-Krum, >= K = the --weighting mean, FedAvg\'s, not '
                        'the paper\'s uniform mean unless --weighting=uniform)', group='algorithm',
                        bounds=AT_LEAST_1)
  topk_fraction: float = _f(0.1, '--local_terms=topk: fraction of each parameter array\'s '
                            'entries a client uploads (1 = all)', group='algorithm',
                            bounds=UNIT_EXCL_0)
  qsgd_levels: int = _f(16, '--local_terms=qsgd: quantisation levels s', group='algorithm',
                        bounds=AT_LEAST_1)
  error_feedback: bool = _f(True, '--local_terms=topk|qsgd: keep each client\'s compression '
                            'residual and add it to its next upload', group='algorithm')
  dp_clip: float = _f(1.0, '--algo=dp_fedavg / --aggregator=dp_gaussian: clip norm S of each '
                      'client update (inf = no clipping)', group='algorithm', bounds=ABOVE_0)
  dp_noise: float = _f(1.0, 'DP-FedAvg noise multiplier sigma: the mean gets N(0, (sigma S / '
                       'K)^2) noise (0 = none)', group='algorithm', bounds=NONNEG)
  dp_delta: float = _f(1e-5, 'DP-FedAvg: delta at which the epsilon spent is reported',
                       group='algorithm', bounds=UNIT_EXCL_0.but(high_open=True,
                                                                 wording='in (0, 1)'))
  # Personalisation after training (FedADC §IV-D).
  personalize: str = _f('none', 'calibrate: each client fine-tunes the last layer on its data',
                        registry.Choices('personalize'), group='algorithm')
  personalize_epochs: int = _f(2, 'local epochs of classifier calibration',
                               group='algorithm', bounds=AT_LEAST_1)
  personalize_term: str = _f('none', 'extra calibration term', registry.Choices('personalize_term'),
                             group='algorithm')
  # Execution.
  seed: int = _f(0, 'run seed: partition, init, cohorts and batches derive from it', group='run')
  matmul_precision: str = _f('highest', 'float32 matmuls and convolutions: highest = full '
                             'float32 everywhere (as on CPU); default = the backend\'s own '
                             '(TF32 on NVIDIA GPUs, bfloat16 passes on TPUs: faster, results '
                             'differ from CPU in the 3rd-4th digit)', ('highest', 'default'),
                             group='run')
  client_parallelism: str = _f('auto', 'how cohort clients run inside the compiled round',
                               ('auto', 'vmap', 'sequential'), group='run')
  cohort_chunk: int = _f(0, 'clients vmapped together per chunk; 0 = from --client_parallelism',
                         group='run', bounds=AT_LEAST_0)
  devices: int = _f(1, 'split the cohort over this many devices (a jax.sharding mesh)',
                    group='run', bounds=AT_LEAST_1)
  client_state: str = _f('device', 'where the per-client state table (SCAFFOLD\'s c_i, '
                         'FedDyn\'s gradients, ...) lives: device = inside the compiled program; '
                         'host = in host memory, the cohort\'s rows copied in and out each round '
                         '(populations whose table exceeds the device memory)',
                         ('device', 'host'), group='run')
  distributed: str = _f('auto', 'one run across processes with jax.distributed: auto = when '
                       '--num_processes > 1 or --coordinator_address is given, or a multi-'
                       'process SLURM / Open MPI launch is detected; on = always (JAX detects '
                       'what is not given, e.g. on a Cloud TPU pod); off = never',
                       ('auto', 'on', 'off'), group='run')
  coordinator_address: str = _f('', 'jax.distributed: host:port of process 0 (the same on every '
                                'process)', group='run')
  num_processes: int = _f(0, 'jax.distributed: number of processes (0 = detect)', group='run')
  process_id: int = _f(-1, 'jax.distributed: this process\'s id, 0 .. num_processes-1 '
                       '(-1 = detect)', group='run')
  conv_impl: str = _f('auto', 'how convolutions are computed: im2col (patches + GEMM), lax '
                      '(lax.conv_general_dilated: cuDNN, TPU) or onednn (oneDNN custom calls on '
                      'CPU; pip install ".[onednn]" and a C++ compiler, else im2col, said in '
                      'one line); auto = onednn on x86 CPUs where it builds (else im2col, '
                      'saying why once), lax on GPU/TPU',
                      ('auto', 'im2col', 'lax', 'onednn'), group='model')
  memory_budget_gb: float = _f(0.0, 'refuse to start if the data and state (checked from '
                               'shapes before building) or XLA\'s estimate for one segment need '
                               'more than this (0 = 90% of what this process may use now: free '
                               'memory, cgroup limit, ulimit -v)',
                               group='run', bounds=NONNEG.but(wording='a number >= 0'))
  compile_cache: str = _f('auto', "XLA's persistent compilation cache: auto = CACHE/xla (CACHE = "
                          '$FEDJAX_DRIFT_CACHE or ~/.cache/fedjax_drift; a JAX_COMPILATION_CACHE_DIR '
                          'you set wins), off, or a directory: programs compiled before (a rerun, a '
                          'resume, a preset\'s methods on one model) are read, not compiled again',
                          group='run')
  plugin: str = _f('', 'comma list of Python files or modules to import before the other '
                   'flags are read (or give --plugin again): they register methods, datasets '
                   'and flags of their own (docs/new_method.md); config.json records them, so '
                   '--resume and --config=RUN_DIR load them too', group='run')
  seeds: int = _f(1, 'run this many seeds (seed, seed+1, ...) in one vmapped program',
                  group='run', bounds=AT_LEAST_1)
  grid: str = _f('', "sweep float hyperparameters in the same program, e.g. "
                 "'lr:0.01,0.05;beta:0.8,0.9' with slowmo (the cartesian product; an axis "
                 "the run does not read is refused)", group='run')
  run_chunk: int = _f(0, 'runs vmapped together in a sweep; 0 = all',
                      group='run', bounds=AT_LEAST_0)
  # Evaluation and output.
  eval_every: int = _f(5, 'evaluate the global model every this many rounds',
                       group='output', bounds=AT_LEAST_1)
  eval_batch_size: int = _f(1000, 'test examples per evaluation batch',
                            group='output', bounds=AT_LEAST_1)
  eval_protocol: str = _f('auto', 'global: the global model on the whole test set; fedbn: '
                          'each client\'s own model (global weights + its local BatchNorm '
                          'layers) on its own test split, accuracy = the mean over domains '
                          '(FedBN); local: a personalised method\'s (local_only, ditto, '
                          'fedrep, pfedme, apfl) clients\' own models on their own test '
                          'splits, accuracy = the mean over clients; auto = local for the '
                          'personalised methods (without client test splits the command '
                          'line adds --test_partition=like_train and says so, the library '
                          'refuses; --eval_protocol=global scores their global model), '
                          'fedbn when BatchNorm stays local and clients have test splits '
                          '(--partition=domains or --test_partition=like_train), else '
                          'global. The run, summary.json and an algo: '
                          'grid\'s table.csv name the scored model (scored_model). With test '
                          'splits every protocol also reports the mean, std and worst '
                          'per-client accuracy (metrics.csv client_*)',
                          ('auto', 'global', 'fedbn', 'local'), group='output')
  select_on: str = _f('auto', 'how a --grid sweep picks its point (summary.json selected): '
                      'by the validation split\'s accuracy (needs --val_fraction or '
                      '--val_source=dataset), or by the test accuracy, as several papers '
                      'did; auto = validation when the run has a validation split, else test',
                      ('auto', 'validation', 'test'),
                      group='output')
  target_accuracy: float = _f(0.7, 'report the first round reaching this test accuracy',
                              group='output', bounds=UNIT)
  out: str = _f('', 'run directory (default: runs/<algo>-<dataset>-<partition>-s<seed>-<time>)',
                group='output')
  overwrite: str = dataclasses.field(default='', metadata={
      **_f('', "replace an existing run directory: bare --overwrite removes only what its "
           "fedjax-drift record (.fedjax-drift.json) lists, refusing if anything else is there; "
           "--overwrite=force removes everything but the inputs, only in an empty or recorded "
           "directory, never $HOME", group='output').metadata, 'const': 'yes'})
  checkpoint_every: int = _f(0, 'save the state pytree every this many rounds (0 = at every '
                             'evaluation)', group='run', bounds=AT_LEAST_0)
  keep_checkpoints: int = _f(2, 'checkpoints kept in RUN_DIR/checkpoints',
                             group='run', bounds=AT_LEAST_1)
  resume: bool = _f(False, 'continue the run in --out from its latest checkpoint', group='run')
  save_params: str = _f('', 'write the final global parameters to this .npz', group='output')
  tensorboard: bool = _f(False, 'also write the metrics as TensorBoard events to '
                        'RUN_DIR/tensorboard (pip install ".[tensorboard]" in the clone)',
                        group='output')
  progress: bool = _f(True, 'show a progress bar', group='output')
  # Diagnostics for the papers' figures (fedjax_drift/diagnostics.py); each off by default.
  diag_client_acc: bool = _f(False, 'write RUN_DIR/client_acc.csv: at every evaluation, each '
                             'cohort client\'s local model (after local training, before '
                             'aggregation) on the global test set (FedGKD Fig. 2)',
                             group='diagnostics')
  diag_features_rounds: str = _f('', 'comma list of rounds (0 = the initial model) at which '
                                 'to write the global model\'s penultimate-layer features of '
                                 'the first --diag_features_n test examples to '
                                 'RUN_DIR/features.npz, for t-SNE (FedGKD Fig. 2)',
                                 group='diagnostics')
  diag_features_n: int = _f(500, 'test examples whose features --diag_features_rounds writes',
                            group='diagnostics')
  diag_attention: bool = _f(False, 'IGFL attention aggregators: write every round\'s K x K '
                            'attention matrix to RUN_DIR/attention.npz and the pair match rate '
                            '(IGFL Fig. 2) to RUN_DIR/attention.csv', group='diagnostics')
  personalize_every_eval: bool = _f(False, 'with --personalize=calibrate: calibrate and test '
                                    'every client at every evaluation (metrics.csv column '
                                    'personalized_accuracy; FedADC Fig. 7), not only after '
                                    'the last round',
                                    group='diagnostics')

"""pFL reporting (issue 45 item 12): a personalised method's evaluation gives the global
model's per-client accuracy beside its personal models' (global_client_mean_accuracy), and
--personalize=calibrate's summary has the global model's min and max."""
import numpy as np

from fedjax_drift import personalize
from helpers import tiny_config
from test_local_only import LR, STEPS, _accuracy, _data, _evaluate, _row


def test_personal_method_reports_the_global_model_on_each_clients_split(tiny_npz,
                                                                        unequal_partition):
  config = tiny_config(tiny_npz, unequal_partition, algo='ditto', clients_per_round=4,
                       local_steps=STEPS, lr=LR, test_partition='like_train')
  s, state, result = _evaluate(config, 2)
  data, params = _data(tiny_npz), _row(state.params, 0)
  own = [_accuracy(params, data['x_test'][p], data['y_test'][p])
         for p in s.experiments[0].test_parts if len(p)]
  np.testing.assert_allclose(result['global_client_mean_accuracy'][0], np.mean(own), rtol=1e-6)
  assert 'client_mean_accuracy' in result  # the personal models', beside it


def test_local_only_has_no_global_model_column(tiny_npz, unequal_partition):
  config = tiny_config(tiny_npz, unequal_partition, algo='local_only', clients_per_round=4,
                       local_steps=STEPS, lr=LR, test_partition='like_train')
  assert 'global_client_mean_accuracy' not in _evaluate(config, 1)[2]


def test_calibrate_summary_has_the_global_models_min_and_max():
  before, after = np.array([0.2, 0.6, 0.9, 0.0]), np.array([0.5, 0.7, 0.95, 0.0])
  result = personalize.summarize(before, after, np.array([3, 4, 5, 0]))  # the last: no test
  assert (result['global_model_min_accuracy'], result['global_model_max_accuracy']) == (0.2, 0.9)
  assert (result['calibrated_min_accuracy'], result['calibrated_max_accuracy']) == (0.5, 0.95)

"""fedjax-drift-compare: runs of different datasets, models or round counts get their columns
and a warning; a single seed shows its value, not "± 0.00"; --out naming a file is one line
(issue 34 items 4, 5 and 6)."""
import json

from fedjax_drift import compare


def _run_dir(root, name, dataset='mnist', model='cnn', rounds=10, seeds=(0,), acc=0.5):
  """A finished run directory as compare reads it: config.json, runs.csv, metrics.csv."""
  path = root / name
  path.mkdir()
  runs = [{'run': i, 'seed': s} for i, s in enumerate(seeds)]
  (path / 'config.json').write_text(json.dumps({
      'algo': 'fedavg', 'dataset': dataset, 'model': model, 'rounds': rounds,
      '_resolved': {'runs': runs}}))
  (path / 'runs.csv').write_text('run,seed,status,final_accuracy,best_accuracy\n' + ''.join(
      f'{i},{s},ok,{acc + 0.01 * i},{acc + 0.02}\n' for i, s in enumerate(seeds)))
  (path / 'metrics.csv').write_text('run,round,test_accuracy\n' + ''.join(
      f'{i},{t},{acc}\n' for i in range(len(seeds)) for t in (0, rounds)))
  return str(path)


def test_runs_of_different_settings_get_columns_and_a_warning(tmp_path, capsys):
  dirs = [_run_dir(tmp_path, 'a'), _run_dir(tmp_path, 'b', dataset='cifar10', rounds=50)]
  assert compare.main([*dirs, f'--out={tmp_path / "out"}']) == 0
  out, err = capsys.readouterr()
  lines = err.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('warning: these runs differ in dataset and '
                                                 'rounds (dataset: mnist, cifar10; rounds: 10, '
                                                 '50)'), err
  assert '| run directory | algorithm | dataset | rounds | grid point |' in out
  assert '| a | fedavg | mnist | 10 |' in out and '| b | fedavg | cifar10 | 50 |' in out
  assert lines[0] in (tmp_path / 'out' / 'comparison.md').read_text()


def test_runs_of_one_setting_have_no_extra_column_or_warning(tmp_path, capsys):
  dirs = [_run_dir(tmp_path, 'a', seeds=(0, 1)), _run_dir(tmp_path, 'b', seeds=(0, 1))]
  assert compare.main([*dirs, f'--out={tmp_path / "out"}']) == 0
  out, err = capsys.readouterr()
  assert err == '' and '| run directory | algorithm | grid point |' in out
  assert ' ± ' in out  # two seeds: a spread


def test_a_single_seed_shows_its_value_without_a_spread(tmp_path, capsys):
  assert compare.main([_run_dir(tmp_path, 'a', acc=0.5), f'--out={tmp_path / "out"}']) == 0
  out = capsys.readouterr().out
  assert '| 50.00 | 52.00 |' in out and '± 0.00' not in out


def test_out_naming_a_file_is_one_line(tmp_path, capsys):
  target = tmp_path / 'taken.txt'
  target.write_text('mine')
  assert compare.main([_run_dir(tmp_path, 'a'), f'--out={target}']) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and f'--out={target} is a file' in err[0], err
  assert target.read_text() == 'mine'


def test_compressed_runs_show_accuracy_against_bytes_sent(tmp_path, capsys):
  """Issue 45 item 7: with rounds.csv's upload_bytes (--local_terms=topk|qsgd), compare's
  table has each row's megabytes uploaded per run and comparison_bytes.png plots accuracy
  against the megabytes sent; runs without it get neither."""
  topk = _run_dir(tmp_path, 'topk', rounds=4, seeds=(0, 1))
  (tmp_path / 'topk' / 'rounds.csv').write_text('run,round,upload_bytes\n' + ''.join(
      f'{i},{t},250000\n' for i in range(2) for t in range(1, 5)))
  plain = _run_dir(tmp_path, 'plain', rounds=4)
  assert compare.main([topk, plain, f'--out={tmp_path / "out"}']) == 0
  out = capsys.readouterr().out
  assert '| uploaded (MB per run) |' in out
  assert out.splitlines()[-3].endswith('| 1 |') and out.splitlines()[-2].endswith('| n/a |')
  rows = compare.groups([compare.read_run_dir(topk)])
  label, (sent, mean, _) = next(iter(compare.byte_curves(rows).items()))
  assert 'topk' in label and sent == [0.0, 1.0] and list(mean) == [0.5, 0.5]
  assert (tmp_path / 'out' / 'comparison_bytes.png').is_file()
  assert compare.main([plain, f'--out={tmp_path / "out2"}']) == 0
  assert 'uploaded' not in capsys.readouterr().out
  assert not (tmp_path / 'out2' / 'comparison_bytes.png').exists()

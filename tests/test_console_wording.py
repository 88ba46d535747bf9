"""The console's closing and header lines read as sentences: 'rounds to 70%: None' became
'70% not reached', 'up to 1 steps' became '1 step' (issue 34 item 6)."""
from fedjax_drift import results
from test_cli import cli


def test_the_target_in_words():
  assert results.target_words(None, 0.7) == '70% not reached'
  assert results.target_words(12, 0.7) == '70% reached at round 12'


def test_a_run_with_one_local_step_says_so(tmp_path, tiny_npz):
  out = cli(f'--dataset=npz:{tiny_npz}', '--model=logreg', '--rounds=1', '--num_clients=4',
            '--clients_per_round=2', '--local_steps=1', '--local_epochs=0', '--progress=false',
            '--target_accuracy=0.99', f'--out={tmp_path / "run"}')
  assert out.returncode == 0, out.stderr
  assert 'local work: 1 step per client per round;' in out.stdout, out.stdout
  assert '99% not reached' in out.stdout and 'None' not in out.stdout, out.stdout

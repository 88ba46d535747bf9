"""tfds: offline fails within seconds in one line, instead of TFDS retrying its download for
minutes (issue 34 item 6)."""
import socket
import time

import pytest

from fedjax_drift.data import hub
from fedjax_drift.errors import UserError


def test_an_unprepared_tfds_dataset_offline_is_refused_at_once(tmp_path, monkeypatch):
  pytest.importorskip('tensorflow_datasets')
  monkeypatch.setattr(hub, 'online', lambda *a, **k: False)
  start = time.monotonic()
  with pytest.raises(UserError, match=r'tfds:mnist is not prepared in .* internet is '
                     'unreachable'):
    hub.load_tfds('mnist', data_dir=str(tmp_path / 'tfds'))
  assert time.monotonic() - start < 60  # the import of tensorflow_datasets included


def test_the_probe_is_bounded_and_says_false_for_a_closed_port():
  with socket.socket() as server:  # a port that nothing listens on once closed
    server.bind(('127.0.0.1', 0))
    port = server.getsockname()[1]
  start = time.monotonic()
  assert hub.online(('127.0.0.1', port), seconds=2) is False
  assert time.monotonic() - start < 3
  with socket.socket() as server:
    server.bind(('127.0.0.1', 0))
    server.listen()
    assert hub.online(server.getsockname(), seconds=2) is True

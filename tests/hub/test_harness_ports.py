"""The hub harness itself: a port that another process takes between :func:`free_port` and the hub's bind.

Two test workers, clusters and browsers share the machine, so a port free
when picked may be taken when the proxy binds it; the hub then exits with
"Address already in use" before it ever answered (seen in a run of the
real plane's fault matrix). The harness picks its ports again.
"""

from __future__ import annotations

import socket

from tests.support import hubharness
from tests.support.hubharness import Hub


def test_a_port_taken_before_the_hub_binds_is_picked_again(tmp_path, monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        picks = iter([port])
        real = hubharness.free_port
        monkeypatch.setattr(hubharness, "free_port", lambda: next(picks, None) or real())
        hub = Hub(tmp_path, tmp_path / "no-kubeconfig", "")
        assert hub.port == port
        try:
            hub.start()
            assert hub.port != port and hub.answered
            assert "Address already in use" in hub.log(None)  # the first try met the taken port
        finally:
            hub.stop()

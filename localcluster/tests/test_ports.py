"""localcluster.ports: ports chosen below the kernel's ephemeral range, and the fallback when it leaves no room."""

from __future__ import annotations

import socket

from localcluster import ports


def test_free_port_is_below_the_ephemeral_range_and_bindable():
    low = ports.ephemeral_low()
    chosen = {ports.free_port() for _ in range(20)}
    assert all(p < low for p in chosen), (low, chosen)
    for p in chosen:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_no_room_below_the_range_takes_the_kernels_choice(monkeypatch, tmp_path):
    (tmp_path / "range").write_text("1024\t65535\n")
    monkeypatch.setattr(ports, "_RANGE_FILE", tmp_path / "range")
    assert ports.ephemeral_low() == 1024

    def no_search(port):
        raise AssertionError(f"searched below a range that leaves no room: {port}")

    monkeypatch.setattr(ports, "port_free", no_search)
    assert 0 < ports.free_port() < 65536


def test_an_unreadable_range_file_means_linuxs_default(monkeypatch, tmp_path):
    monkeypatch.setattr(ports, "_RANGE_FILE", tmp_path / "missing")
    assert ports.ephemeral_low() == 32768


def test_port_free_sees_a_listener():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert not ports.port_free(s.getsockname()[1])

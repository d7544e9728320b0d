"""The one-time banner of a dashboard action (workspacespawner.dashboard.flash): only the viewer it was left for reads
it, and only a sentence on one of the two banners; anything else shows nothing."""

from __future__ import annotations

import pytest

from workspacespawner.dashboard import flash


def test_a_flash_is_read_by_its_viewer_only():
    value = flash.encode("ann", "done", "Snapshot s-1 of home-ann taken.").encode()
    assert flash.decode(value, "ann") == {"done": "Snapshot s-1 of home-ann taken."}
    assert flash.decode(value, "bob") == {}


@pytest.mark.parametrize("value", [None, b"", b"not json", b"[1]", b'{"to": "ann", "kind": "info", "text": "x"}',
                                   b'{"to": "ann", "kind": "error", "text": 3}', b'{"to": "ann", "kind": "error"}'])
def test_anything_else_shows_nothing(value):
    assert flash.decode(value, "ann") == {}


def test_only_the_two_banners():
    with pytest.raises(ValueError):
        flash.encode("ann", "info", "x")

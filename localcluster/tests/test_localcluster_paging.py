"""List paging in the local cluster's store: pages from a token show the list as it was; an expired token is 410.

kube-apiserver serves a continued page from etcd's snapshot at the first
page's resourceVersion and answers 410 Expired, with a token that continues
at the current state, once etcd has compacted that revision
(``localcluster/tests/realplane/test_api_semantics.py`` runs the rest of the
paging probe on both planes).
"""

from __future__ import annotations

import pytest
from localcluster.errors import ApiError
from localcluster.store import Store

from localcluster import paging


@pytest.fixture
def store():
    return Store(history=6)


def configmaps(store):
    return store.kind("", "v1", "configmaps")


def make(store, name, value="1"):
    store.create(configmaps(store), "default", {"metadata": {"name": name}, "data": {"v": value}})


def names(items):
    return [o["metadata"]["name"] for o in items]


def test_a_page_shows_objects_as_they_were(store):
    for name in ("a", "b", "c"):
        make(store, name)
    kind = configmaps(store)
    first, meta = store.list_chunk(kind, "default", limit=1)
    assert names(first) == ["a"] and meta["remainingItemCount"] == 2
    store.patch(kind, "default", "b", {"data": {"v": "2"}}, "application/merge-patch+json")
    store.delete(kind, "default", "c")
    make(store, "d")
    rest, more = store.list_chunk(kind, "default", continue_token=meta["continue"])
    assert names(rest) == ["b", "c"] and rest[0]["data"] == {"v": "1"}
    assert more == {"resourceVersion": meta["resourceVersion"]}


def test_an_expired_token_is_410_with_one_that_continues_now(store):
    for name in ("a", "b", "c"):
        make(store, name)
    kind = configmaps(store)
    _, meta = store.list_chunk(kind, "default", limit=1)
    for i in range(8):  # more changes than the history keeps
        store.patch(kind, "default", "b", {"data": {"v": str(i)}}, "application/merge-patch+json")
    with pytest.raises(ApiError) as err:
        store.list_chunk(kind, "default", continue_token=meta["continue"])
    assert (err.value.code, err.value.reason) == (410, "Expired")
    assert err.value.message == paging.INCONSISTENT_CONTINUE
    token = err.value.status()["metadata"]["continue"]
    rest, more = store.list_chunk(kind, "default", continue_token=token)
    assert names(rest) == ["b", "c"] and rest[0]["data"] == {"v": "7"}
    assert more["resourceVersion"] == str(store.resource_version)


@pytest.mark.parametrize(
    ("token", "detail"),
    [
        ("%%%", "continue key is not valid: "),
        (paging.encode("a\x00", 0), "incorrect encoded start resourceVersion"),
        (paging.encode("", 5), "encoded start key empty"),
    ],
)
def test_bad_tokens_are_400(store, token, detail):
    with pytest.raises(ApiError) as err:
        store.list_chunk(configmaps(store), "default", continue_token=token)
    assert err.value.code == 400 and err.value.message.startswith("invalid continue token: continue key is not valid")
    assert detail in err.value.message

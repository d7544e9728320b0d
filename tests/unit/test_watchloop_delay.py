"""The watch loop's wait between failed tries (workspacespawner.k8s.watchloop.retry_delay): doubling, capped, jittered."""

from __future__ import annotations

import pytest

from workspacespawner.k8s.watchloop import FIRST_RETRY, RETRY_CAP, is_expired, retry_delay


def test_the_wait_doubles_from_the_first_retry_up_to_the_cap():
    ceilings = [retry_delay(n, rand=lambda: 1.0) for n in range(1, 12)]
    assert ceilings[:5] == pytest.approx([FIRST_RETRY * 2**i for i in range(5)])
    assert max(ceilings) == RETRY_CAP and ceilings[-1] == RETRY_CAP
    assert ceilings == sorted(ceilings)


def test_the_wait_never_exceeds_the_cap_after_any_number_of_failures():
    """kubespawner's loop waits 25.6 s after its eighth failure and gives up after its ninth; ours goes on."""
    assert all(retry_delay(n) <= RETRY_CAP for n in range(1, 1000))
    assert RETRY_CAP <= 5


def test_jitter_draws_between_half_and_all_of_the_ceiling():
    assert retry_delay(20, rand=lambda: 0.0) == RETRY_CAP / 2
    assert retry_delay(1, rand=lambda: 0.0) == FIRST_RETRY / 2


def test_only_a_410_is_an_expired_resource_version():
    from kubernetes_asyncio.client import ApiException

    assert is_expired(ApiException(status=410, reason="Expired"))
    assert not is_expired(ApiException(status=503, reason="ServiceUnavailable"))
    assert not is_expired(RuntimeError("410"))

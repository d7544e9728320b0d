"""An admission webhook that does not answer (``k8s.admission.webhook_down``) is told apart from an API outage.

The message is kube-apiserver 1.34's when Kueue's Pod webhook (failurePolicy Fail) cannot be called, read on the
real control plane with Kueue's manager killed (tests/hub/test_gpu_queue_real.py); the student reads our sentence,
never the cluster's words.
"""

from __future__ import annotations

import json

from kubernetes_asyncio.client.rest import ApiException

from workspacespawner.k8s.admission import webhook_down
from workspacespawner.k8s.owned import outage_error

KUEUE_DOWN = ('Internal error occurred: failed calling webhook "mpod.kb.io": failed to call webhook: Post '
              '"https://kueue-webhook-service.kueue-system.svc:443/mutate--v1-pod?timeout=10s": EOF')


def api_error(status: int, message: str) -> ApiException:
    error = ApiException(status=status, reason="Internal Server Error")
    error.body = json.dumps({"kind": "Status", "status": "Failure", "message": message, "code": status})
    return error


def test_a_webhook_that_does_not_answer_is_said_in_our_words():
    error = api_error(500, KUEUE_DOWN)
    assert webhook_down(error)
    said = outage_error(error)
    assert said.reason == "webhook-down" and said.status_code == 503
    assert said.message.startswith("A check the cluster runs before anything starts (an admission webhook, such as "
                                   "the GPU queues') is not answering, so nothing was started and no disk was changed.")
    assert "kueue" not in said.message and "mpod" not in said.message and "mpod.kb.io" in said.detail


def test_an_api_server_outage_is_still_an_outage():
    error = api_error(503, "the server is currently unable to handle the request")
    assert not webhook_down(error)
    assert outage_error(error).reason == "kubernetes-api"
    assert not webhook_down(api_error(400, "failed calling webhook"))  # not a 5xx: a refusal

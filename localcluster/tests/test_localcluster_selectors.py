"""Label and field selectors of the local cluster, against Kubernetes' semantics.

Covers ``localcluster.selectors``: every label selector form
of ``k8s.io/apimachinery/pkg/labels`` (exists, ``!key``, ``=``, ``==``, ``!=``,
``in``, ``notin``, ``>``/``<``, empty values, prefixed keys, whitespace,
``in``/``notin`` as values), which forms also match a missing key, malformed
selectors answering 400 BadRequest, and field selectors (``=``, ``==``, ``!=``
on each supported field, escapes, missing fields read as ``""``, unsupported
fields answering ``field label not supported``). Pure functions, no cluster.
"""

from __future__ import annotations

import pytest
from localcluster.errors import ApiError
from localcluster.selectors import SUPPORTED_FIELDS, FieldSelector, LabelSelector

USER = {"app": "jupyterhub", "component": "singleuser-server", "hub.jupyter.org/username": "alice"}


def sel(text):
    return LabelSelector.parse(text)


# --- label selectors ------------------------------------------------------------


@pytest.mark.parametrize("text", [None, "", "   "])
def test_empty_label_selector_matches_everything(text):
    selector = sel(text)
    assert selector.empty()
    assert selector.matches(USER)
    assert selector.matches({})
    assert selector.matches(None)


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        # key exists
        ("app", USER, True),
        ("missing", USER, False),
        # !key: key does not exist
        ("!missing", USER, True),
        ("!app", USER, False),
        ("!app", None, True),
        # = and == : key present with that value
        ("app=jupyterhub", USER, True),
        ("app==jupyterhub", USER, True),
        ("app=other", USER, False),
        ("missing=jupyterhub", USER, False),
        # != : value differs, or key missing
        ("app!=other", USER, True),
        ("app!=jupyterhub", USER, False),
        ("missing!=x", USER, True),
        ("missing!=x", None, True),
        # in / notin
        ("component in (singleuser-server,hub)", USER, True),
        ("component in (hub,proxy)", USER, False),
        ("missing in (a,b)", USER, False),
        ("component notin (hub,proxy)", USER, True),
        ("component notin (hub,singleuser-server)", USER, False),
        ("missing notin (a,b)", USER, True),
        # prefixed keys
        ("hub.jupyter.org/username=alice", USER, True),
        ("hub.jupyter.org/username in (bob,alice)", USER, True),
        ("hub.jupyter.org/username!=alice", USER, False),
        ("!hub.jupyter.org/username", USER, False),
        # several requirements are ANDed
        ("app=jupyterhub,component=singleuser-server", USER, True),
        ("app=jupyterhub,component=hub", USER, False),
        ("app,!missing,hub.jupyter.org/username notin (bob)", USER, True),
    ],
)
def test_label_selector_forms(text, labels, expected):
    assert sel(text).matches(labels) is expected


def test_whitespace_is_tolerated_everywhere():
    text = "  app = jupyterhub ,component   in ( hub , singleuser-server ) , ! missing , x != y "
    assert sel(text).matches(USER)
    assert sel("\tapp\n==\tjupyterhub").matches(USER)


def test_empty_values():
    assert sel("tier=").matches({"tier": ""})
    assert not sel("tier=").matches({"tier": "gold"})
    assert not sel("tier=").matches({})
    assert sel("tier==,app").matches({"tier": "", "app": "x"})
    assert sel("tier!=").matches({"tier": "gold"})
    assert sel("tier!=").matches({})
    # Empty members of a value set, and "()", stand for the empty value.
    assert sel("tier in (gold,)").matches({"tier": ""})
    assert sel("tier in (,gold)").matches({"tier": "gold"})
    assert sel("tier in (a,,b)").matches({"tier": ""})
    assert sel("tier in ()").matches({"tier": ""})
    assert not sel("tier in ()").matches({"tier": "gold"})


def test_in_and_notin_are_keywords_only_in_operator_position():
    assert sel("x in (in,notin)").matches({"x": "notin"})
    assert sel("in=notin").matches({"in": "notin"})
    assert sel("notin").matches({"notin": "1"})


def test_greater_and_less_than():
    assert sel("gpus>1").matches({"gpus": "2"})
    assert not sel("gpus>1").matches({"gpus": "1"})
    assert sel("gpus<2").matches({"gpus": "1"})
    assert not sel("gpus<2").matches({"gpus": "not-a-number"})
    assert not sel("gpus>0").matches({})


def test_requirements_are_sorted_by_key():
    assert [r.key for r in sel("b=1,a=2,c").requirements] == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("app=jupyterhub,", "found '', expected: identifier after ','"),
        (",app", "found ',', expected: !, identifier, or 'end of string'"),
        ("=x", "found '=', expected: !, identifier, or 'end of string'"),
        ("app jupyterhub", "unable to parse requirement: found 'jupyterhub', expected: '=', '!='"),
        ("app=a=b", "found '=', expected: ',' or 'end of string'"),
        ("!app=x", "found '=', expected: ',' or 'end of string'"),
        ("app in x", "unable to parse requirement: found 'x' expected: '('"),
        ("app in (a", "unable to parse requirement: found '', expected: ',' or ')'"),
        ("app in (a b)", "unable to parse requirement: found 'b', expected: ',' or ')'"),
        ("app in (a,=)", "unable to parse requirement: found '=', expected: ',', or identifier"),
        ("app in (a,,)", "unable to parse requirement: found ')', expected: ',', or identifier"),
        ("app=(x)", "unable to parse requirement: found '(', expected: identifier"),
        ("!", "unable to parse requirement: found '', expected: identifier"),
        ("app>x", "unable to parse requirement: values[0]: Invalid value: \"x\""),
        ("-bad=x", 'unable to parse requirement: key: Invalid value: "-bad"'),
        ("a/b/c=x", 'unable to parse requirement: key: Invalid value: "a/b/c"'),
        ("Example.com/app=x", "unable to parse requirement: key: Invalid value"),
        ("app=-x", 'unable to parse requirement: values[0][app]: Invalid value: "-x"'),
        ("app=" + "v" * 64, "unable to parse requirement: values[0][app]: Invalid value"),
        ("k" * 64, "unable to parse requirement: key: Invalid value"),
    ],
)
def test_malformed_label_selectors_are_400(text, message):
    with pytest.raises(ApiError) as caught:
        sel(text)
    assert caught.value.code == 400
    assert caught.value.reason == "BadRequest"
    assert caught.value.message.startswith(message), caught.value.message


def test_label_value_of_63_characters_is_fine():
    value = "v" * 63
    assert sel(f"app={value}").matches({"app": value})
    assert sel(f"{'p' * 200}.example.com/{'n' * 63}").matches({f"{'p' * 200}.example.com/{'n' * 63}": ""})


# --- field selectors ------------------------------------------------------------

POD = {
    "metadata": {"name": "jupyter-alice", "namespace": "hub"},
    "spec": {"nodeName": "gpu-node-1"},
    "status": {"phase": "Running"},
}

EVENT = {
    "metadata": {"name": "jupyter-alice.17a", "namespace": "hub"},
    "involvedObject": {
        "kind": "Pod",
        "namespace": "hub",
        "name": "jupyter-alice",
        "uid": "1234-5678",
        "apiVersion": "v1",
        "resourceVersion": "42",
        "fieldPath": "spec.containers{notebook}",
    },
    "reason": "Scheduled",
    "type": "Normal",
    "source": {"component": "default-scheduler"},
    "reportingComponent": "default-scheduler",
}


def fsel(text):
    return FieldSelector.parse(text)


@pytest.mark.parametrize("text", [None, "", ","])
def test_empty_field_selector_matches_everything(text):
    assert fsel(text).empty()
    assert fsel(text).matches(POD)


@pytest.mark.parametrize(
    ("field", "obj", "value"),
    [
        ("metadata.name", POD, "jupyter-alice"),
        ("metadata.namespace", POD, "hub"),
        ("status.phase", POD, "Running"),
        ("spec.nodeName", POD, "gpu-node-1"),
        ("involvedObject.kind", EVENT, "Pod"),
        ("involvedObject.namespace", EVENT, "hub"),
        ("involvedObject.name", EVENT, "jupyter-alice"),
        ("involvedObject.uid", EVENT, "1234-5678"),
        ("involvedObject.apiVersion", EVENT, "v1"),
        ("involvedObject.resourceVersion", EVENT, "42"),
        ("involvedObject.fieldPath", EVENT, "spec.containers{notebook}"),
        ("reason", EVENT, "Scheduled"),
        ("type", EVENT, "Normal"),
        ("source", EVENT, "default-scheduler"),
        ("reportingComponent", EVENT, "default-scheduler"),
    ],
)
def test_each_supported_field(field, obj, value):
    assert field in SUPPORTED_FIELDS
    assert fsel(f"{field}={value}").matches(obj)
    assert fsel(f"{field}=={value}").matches(obj)
    assert not fsel(f"{field}!={value}").matches(obj)
    assert not fsel(f"{field}=other").matches(obj)
    assert fsel(f"{field}!=other").matches(obj)


def test_missing_field_compares_as_empty_string():
    pending = {"metadata": {"name": "p"}}
    assert fsel("spec.nodeName=").matches(pending)
    assert fsel("spec.nodeName!=gpu-node-1").matches(pending)
    assert not fsel("spec.nodeName=gpu-node-1").matches(pending)
    # Cluster-scoped objects have no namespace.
    assert fsel("metadata.namespace=").matches({"metadata": {"name": "gpu-node-1"}})


def test_terms_are_anded():
    assert fsel("metadata.name=jupyter-alice,status.phase=Running").matches(POD)
    assert not fsel("metadata.name=jupyter-alice,status.phase!=Running").matches(POD)
    # kubectl describe pod's event query.
    query = (
        "involvedObject.name=jupyter-alice,involvedObject.namespace=hub,"
        "involvedObject.kind=Pod,involvedObject.uid=1234-5678"
    )
    assert fsel(query).matches(EVENT)


def test_escaped_values():
    obj = {"metadata": {"name": "a,b=c\\d"}}
    assert fsel(r"metadata.name=a\,b\=c\\d").matches(obj)


def test_operator_split_at_first_occurrence():
    # "a!=b" is "!=" and "a==b" is "==", never "=" with a value starting with "=".
    assert fsel("metadata.name==x").terms == (("metadata.name", "=", "x"),)
    assert fsel("metadata.name!=x").terms == (("metadata.name", "!=", "x"),)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("foo=bar", "field label not supported: foo"),
        ("spec.restartPolicy=Always,metadata.name=x", "field label not supported: spec.restartPolicy"),
        ("metadata.name =x", "field label not supported: metadata.name "),
        ("=x", "field label not supported: "),
        ("metadata.name", "invalid selector: 'metadata.name'; can't understand 'metadata.name'"),
        ("metadata.name=a=b", "invalid field selector: unescaped character in value: ="),
        (r"metadata.name=a\x", r"invalid field selector: invalid escape sequence: \x"),
        ("metadata.name=a\\", "invalid field selector: invalid escape sequence: \\"),
    ],
)
def test_malformed_field_selectors_are_400(text, message):
    with pytest.raises(ApiError) as caught:
        fsel(text)
    assert caught.value.code == 400
    assert caught.value.reason == "BadRequest"
    assert caught.value.message == message

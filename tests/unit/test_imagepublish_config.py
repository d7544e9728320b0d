"""``c.ImagePublish``: who may publish golden images, how, and where they go (:mod:`workspacespawner.config.imagepublish`).

Covers: working defaults; a bad mode, snapshot class, teacher group or namespace refused naming the setting and the
value, at hub start-up too; the golden-image namespace from ``c.ImagePublish.namespace``, else the spawner's
``vm_golden_image_namespace``, else its default; an admin may publish anyone's workspace, a teacher their own only,
anyone else nobody's.
"""

from __future__ import annotations

import pytest
from traitlets import TraitError
from traitlets.config import Config

from workspacespawner.config.imagepublish import ImagePublish, golden_namespace, publish_settings
from workspacespawner.spawner import check_hub_config


def test_defaults_work():
    settings = publish_settings(Config())
    assert (settings.mode, settings.snapshot_class, settings.teacher_groups, settings.namespace) == ("snapshot", None, [], None)
    assert golden_namespace(Config()) == "golden-images"


@pytest.mark.parametrize("name, value", [
    ("mode", "copy"), ("snapshot_class", "Not A Class"), ("teacher_groups", [" "]), ("namespace", "Golden_Images"),
])
def test_bad_settings_name_themselves(name, value):
    config = Config({"ImagePublish": {name: value}})
    with pytest.raises(TraitError, match=name):
        publish_settings(config)
    with pytest.raises(TraitError, match=name):
        check_hub_config(config)


def test_the_golden_image_namespace():
    spawner = Config({"WorkspaceSpawner": {"vm_golden_image_namespace": "images"}})
    assert golden_namespace(spawner) == "images"
    spawner.ImagePublish.namespace = "published"
    assert golden_namespace(spawner) == "published"


def test_who_may_publish():
    settings = ImagePublish(teacher_groups=["teachers"])
    assert settings.may_publish(viewer="root", admin=True, groups=(), owner="ann")
    assert settings.may_publish(viewer="tom", admin=False, groups={"teachers"}, owner="tom")
    assert not settings.may_publish(viewer="tom", admin=False, groups={"teachers"}, owner="ann")
    assert not settings.may_publish(viewer="ann", admin=False, groups={"students"}, owner="ann")
    assert not ImagePublish().may_publish(viewer="tom", admin=False, groups={"teachers"}, owner="tom")

"""The configuration reference: autodoc-traits' directives, shown as our settings are set.

``.. autoconfigurable:: workspacespawner.quota.config.WorkspaceQuota`` (with
``:members:``) documents the class's own configurable traits and nothing
else: a trait appears under the class that defines it, once. A trait of a
mixin of ``WorkspaceSpawner`` (``HomeTraits``, ``VMTraits``, ...) is named as
it is set, ``c.WorkspaceSpawner.<trait>``. Each trait says where a
zero-to-jupyterhub deployment sets it: the values key the trait declares
(``z2jh``: a deprecated alias of a kubespawner setting names the chart's
key), else the chart's own key when the chart's ``jupyterhub_config.py`` sets a
trait of that name, else ``hub.config.<Class>.<trait>``.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from autodoc_traits import ConfigurableDocumenter, TraitDocumenter
from sphinx.ext.autodoc import AttributeDocumenter
from traitlets import TraitType, Undefined
from traitlets.config import Configurable

#: The z2jh chart's hub configuration the tests carry (chart 4.4.0).
CHART_CONFIG = Path(__file__).resolve().parents[3] / "tests/data/z2jh-chart-4.4.0/jupyterhub/files/hub/jupyterhub_config.py"


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


@functools.cache
def chart_values_paths() -> dict[str, str]:
    """Trait name -> the values key the chart's ``jupyterhub_config.py`` sets it from (``singleuser.storage.capacity``)."""
    tree = ast.parse(CHART_CONFIG.read_text())
    found: dict[str, str] = {}

    def call_of(node):
        return isinstance(node, ast.Call) and getattr(node.func, "id", None) == "set_config_if_not_none"

    for node in ast.walk(tree):
        if call_of(node) and len(node.args) == 3:
            _section, trait, key = node.args
            if isinstance(trait, ast.Constant) and isinstance(key, ast.Constant):
                found[trait.value] = key.value
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Tuple):
            # for trait, cfg_key in (("mem_limit", "memory.limit"), ("uid", None), ...): ... "singleuser." + cfg_key
            prefix = next((c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and str(c.value).endswith(".")), None)
            for element in node.iter.elts:
                if prefix and isinstance(element, ast.Tuple) and len(element.elts) == 2:
                    trait, key = (e.value for e in element.elts)
                    found[trait] = prefix + (key if key is not None else _camel(trait))
    return found


def section_of(cls: type) -> str:
    """The config section a class's traits are set in: its own name, or WorkspaceSpawner's for its mixins."""
    if issubclass(cls, Configurable):
        return cls.__name__
    from workspacespawner.spawner import WorkspaceSpawner

    if issubclass(WorkspaceSpawner, cls):
        return WorkspaceSpawner.__name__
    raise ValueError(f"{cls.__qualname__}: neither Configurable nor a mixin of WorkspaceSpawner")


def defining_class(cls: type, name: str) -> type:
    return next(klass for klass in cls.__mro__ if name in vars(klass))


def values_path(section: str, name: str, trait: TraitType) -> str:
    """Where a z2jh deployment sets the trait."""
    declared = getattr(trait, "z2jh", None) or trait.metadata.get("z2jh")
    if declared:
        return declared
    if name in chart_values_paths():
        return chart_values_paths()[name]
    return f"hub.config.{section}.{name}"


class SettingsDocumenter(ConfigurableDocumenter):
    """``autoconfigurable``: the class's own configurable traits only (no method, no inherited trait)."""

    def get_object_members(self, want_all):
        check, members = super().get_object_members(want_all)
        own = [
            member
            for member in members
            if isinstance(member.object, TraitType)
            and member.object.metadata.get("config")
            and member.__name__ in vars(self.object)
        ]
        return check, own


class SettingDocumenter(TraitDocumenter):
    """autodoc-traits' trait documenter, naming the section a trait is set in and its z2jh values path."""

    def add_directive_header(self, sig):
        trait = self.object
        section, name = section_of(self.parent), self.objpath[-1]
        new = getattr(trait, "new", None)
        if new:  # a deprecated alias (config.traittypes.DeprecatedAlias) has no value of its own
            self.options.annotation = f"c.{section}.{name}, an alias of c.{getattr(trait, 'section', section)}.{new}"
        else:
            default = "" if trait.default_value is Undefined else repr(trait.default_value)
            self.options.annotation = f"c.{section}.{name} = {type(trait).__name__}({default})"
        AttributeDocumenter.add_directive_header(self, sig)

    def add_content(self, more_content):
        super().add_content(more_content)
        source = self.get_sourcename()
        name, trait = self.objpath[-1], self.object
        section = section_of(self.parent)
        self.add_line("", source)
        self.add_line(f"z2jh values: ``{values_path(section, name, trait)}``", source)


def setup(app):
    app.setup_extension("autodoc_traits")
    app.add_autodocumenter(SettingsDocumenter, override=True)
    app.add_autodocumenter(SettingDocumenter, override=True)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

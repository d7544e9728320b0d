"""Golden-image versions: the naming convention of versioned DataSources, and the start-up check of the profiles' images.

A VM workspace's root disk is cloned once from a golden image (a CDI
``DataSource``) and then belongs to the user. A new month's image is a new
DataSource, never an old one overwritten, so a name says which version a disk
was cloned from. The convention::

    <family>-<YYYY>-<MM>[-r<N>]

``family`` says what the image is (``ubuntu-24.04-gpu``), ``YYYY-MM`` the
month it was built, and ``-r<N>`` (N from 2 to 99) a respin: the N-th image of
that month, when one had to be rebuilt (``ubuntu-24.04-gpu-2026-11-r2``). The
whole name is a DNS-1123 subdomain (lowercase letters, digits, ``-`` and
``.``, at most 253 characters), as a DataSource's name must be.

:func:`parse_image_name` reads a name (pure); :func:`cloned_from` reads which
image a root DataVolume was cloned from (its
:data:`~workspacespawner.core.names.GOLDEN_IMAGE_ANNOTATION`, else its
``spec.sourceRef``); :class:`GoldenImages` (``c.GoldenImages``) checks the
profiles' images at hub start-up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from traitlets import Bool, TraitError
from traitlets.config import LoggingConfigurable

from workspacespawner.config.check import merged_settings
from workspacespawner.core import names

#: A DNS-1123 subdomain (Kubernetes' rule for most object names, DataSources' included).
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_VERSIONED = re.compile(r"^(?P<family>.+)-(?P<year>[0-9]{4})-(?P<month>0[1-9]|1[0-2])(?:-r(?P<respin>[2-9]|[1-9][0-9]))?$")

#: The convention in words, for messages.
CONVENTION = "<family>-<YYYY>-<MM> with an optional -r<N> respin, such as ubuntu-24.04-gpu-2026-11"


@dataclass(frozen=True)
class ImageVersion:
    """A versioned golden image's name read apart: ``family`` (``ubuntu-24.04-gpu``), ``year`` and ``month`` it was
    built, ``respin`` (0: the month's first image; N: its N-th)."""

    family: str
    year: int
    month: int
    respin: int = 0

    @property
    def version(self) -> str:
        """``2026-11``, or ``2026-11-r2`` for a respin: the part of the name after the family."""
        month = f"{self.year:04d}-{self.month:02d}"
        return f"{month}-r{self.respin}" if self.respin else month


def parse_image_name(name: str) -> ImageVersion | None:
    """The :class:`ImageVersion` of golden image ``name`` (a DataSource's name), or None when the name does not follow
    the convention (:data:`CONVENTION`) or is not a DNS-1123 subdomain."""
    if not isinstance(name, str) or len(name) > 253 or not _SUBDOMAIN.match(name):
        return None
    found = _VERSIONED.match(name)
    if found is None or not _SUBDOMAIN.match(found["family"]):
        return None
    return ImageVersion(found["family"], int(found["year"]), int(found["month"]), int(found["respin"] or 0))


def version_label(name: str) -> str:
    """What the pages say of ``name``'s version: ``2026-11``, ``2026-11-r2``, or ``no version in its name``."""
    parsed = parse_image_name(name)
    return parsed.version if parsed else "no version in its name"


def describe_image(name: str) -> str:
    """``ubuntu-24.04-gpu-2026-11 (version 2026-11)``, or ``ubuntu-22.04-gpu (no version in its name)``."""
    parsed = parse_image_name(name)
    return f"{name} (version {parsed.version})" if parsed else f"{name} ({version_label(name)})"


def image_name(reference: str) -> str:
    """The DataSource name of a ``namespace/name`` reference (a bare name is its own)."""
    return reference.rpartition("/")[2]


def cloned_from(datavolume: dict | None) -> str | None:
    """``namespace/name`` of the DataSource a root DataVolume was cloned from, or None when it says none.

    Its :data:`~workspacespawner.core.names.GOLDEN_IMAGE_ANNOTATION` (written when it was made), else its
    ``spec.sourceRef`` of kind ``DataSource`` (CDI ``cdi.kubevirt.io/v1beta1``; a sourceRef without a namespace is
    the DataVolume's own).
    """
    meta = (datavolume or {}).get("metadata") or {}
    recorded = (meta.get("annotations") or {}).get(names.GOLDEN_IMAGE_ANNOTATION)
    if recorded:
        return recorded
    ref = ((datavolume or {}).get("spec") or {}).get("sourceRef") or {}
    if ref.get("kind") != "DataSource" or not ref.get("name"):
        return None
    return f"{ref.get('namespace') or meta.get('namespace') or ''}/{ref['name']}"


def profile_golden_images(profile_list, *, default_kind: str, default_image: str) -> list[tuple[str, str, str]]:
    """``[(profile slug, field, image name)]`` of every golden image a static ``profile_list`` may clone from.

    A profile is a VM profile when its ``kubespawner_override.workspace_kind`` (else ``default_kind``) is ``vm``, or
    a choice of one of its options makes it one; its image is its ``kubespawner_override.vm_golden_image``, else
    ``default_image`` (field ``c.WorkspaceSpawner.vm_golden_image``). A choice that sets ``vm_golden_image`` adds its
    own. No profile_list (None or empty) and ``default_kind`` ``vm``: the default image, under slug ``""``.
    A callable profile_list, and values that are not text, are not listed (what a user types is not known here).
    """
    if callable(profile_list):
        return []
    default_field = "c.WorkspaceSpawner.vm_golden_image"
    if not profile_list:
        return [("", default_field, default_image)] if default_kind == "vm" else []
    found = []
    for index, profile in enumerate(profile_list if isinstance(profile_list, list) else ()):
        if not isinstance(profile, dict):
            continue
        slug = profile.get("slug") or f"#{index}"
        override = profile.get("kubespawner_override") or {}
        choices = [(f"profile_options.{opt}.choices.{name}.kubespawner_override", (choice or {}).get("kubespawner_override") or {})
                   for opt, option in (profile.get("profile_options") or {}).items()
                   for name, choice in ((option or {}).get("choices") or {}).items()]
        vm = override.get("workspace_kind", default_kind) == "vm" or any(c.get("workspace_kind") == "vm" for _, c in choices)
        if vm:
            field = "kubespawner_override.vm_golden_image" if "vm_golden_image" in override else default_field
            found.append((slug, field, override.get("vm_golden_image", default_image)))
        found += [(slug, f"{where}.vm_golden_image", c["vm_golden_image"]) for where, c in choices if "vm_golden_image" in c]
    return [(slug, field, image) for slug, field, image in found if isinstance(image, str)]


class GoldenImages(LoggingConfigurable):
    """How strictly the profiles' golden images must follow the naming convention (``c.GoldenImages``)."""

    require_versioned = Bool(
        False,
        config=True,
        help="""Refuse to start the hub when a VM profile's golden image has no version in its name.

        The convention: ``<family>-<YYYY>-<MM>``, optionally ``-r<N>`` for the
        N-th image of a month (``ubuntu-24.04-gpu-2026-11``,
        ``ubuntu-24.04-gpu-2026-11-r2``). False (the default): the hub starts
        and logs a warning per profile whose ``vm_golden_image`` (its own, or
        ``c.WorkspaceSpawner.vm_golden_image``) has none. True: the hub stops
        at start-up with an error naming the profile and the image.
        """,
    )

    def check_profiles(self, profile_list, *, default_kind: str, default_image: str) -> list[str]:
        """Check the images of :func:`profile_golden_images`; return a sentence per unversioned one (each logged as a
        warning). Raises ``traitlets.TraitError`` naming the first one when :attr:`require_versioned` is set."""
        problems = [
            (f"profile_list: profile {slug!r}, field {field!r}: " if slug else f"{field}: ")
            + f"golden image {image!r} has no version in its name ({CONVENTION})"
            for slug, field, image in profile_golden_images(profile_list, default_kind=default_kind,
                                                            default_image=default_image)
            if parse_image_name(image) is None
        ]
        if problems and self.require_versioned:
            raise TraitError(f"{problems[0]}; c.GoldenImages.require_versioned is True")
        for problem in problems:
            self.log.warning("%s", problem)
        return problems


def golden_image_namespace(config) -> str:
    """Where the golden images (CDI DataSources) are, from the hub's traitlets ``Config``: the spawner's
    ``vm_golden_image_namespace`` (``c.Spawner``/``c.KubeSpawner``/``c.WorkspaceSpawner``), else the default."""
    return merged_settings(config).get("vm_golden_image_namespace") or names.GOLDEN_IMAGE_NAMESPACE

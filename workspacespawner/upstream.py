"""The one place the package reaches kubespawner's and JupyterHub's private members (names starting with ``_``).

Neither project promises to keep them: an upgrade may rename one, change its
arguments or drop it. Every use goes through here, and
``tests/unit/test_upstream.py`` checks each one in :data:`PRIVATE_MEMBERS`
against the installed kubespawner and JupyterHub, so such an upgrade fails
that test instead of a user's start. ``setup.cfg`` pins both to the ranges CI
tests. What is used, and why:

KubeSpawner (kubespawner 7):

- ``_start()``: what ``start()`` runs as its ``_start_future``; overridden
  (:class:`KubeSpawnerOverrides`) so a start is the workspace's start, and
  called as kubespawner's own Pod start by the container backend
  (:func:`start_pod`).
- ``_start_reflector(kind, reflector_class, replace, **kwargs)`` and
  ``_get_reflector_key(kind)``: the shared reflectors; overridden to start
  the interning subclasses and to replace a reflector whose watch gave up.
- ``_start_watching_pods(replace)``, ``_start_watching_events(replace)``:
  start (or join) the namespace's shared Pod and Event watches, which
  polls, stops, progress and the GPU view read (:func:`watch_pods`,
  :func:`watch_events`).
- ``_expand_user_properties(template)``, ``_expand_all(src)``,
  ``_build_common_labels(extra_labels)``: the spawner's name templates and
  labels, as kubespawner expands them (:func:`expand`,
  :func:`common_labels`).
- ``_expand_env(env)``: overridden to allow literal braces in
  ``environment`` values.
- ``_options_from_form(formdata)``: kubespawner's form parsing, which
  ``options_from_form`` checks (:func:`form_options`).
- ``_sorted_dict_values(src)``, ``_get_initialized_profile_list(profiles)``,
  ``_validate_user_options(profiles)``, ``_load_profile(slug, profiles)``:
  kubespawner's profile_list, initialized, checked and applied as kubespawner
  does (:mod:`.useroptions`).
- ``_last_event`` (set in ``__init__``): the uid of the Event a start's
  progress begins after (:func:`last_event`).
- ``_start_future`` (set in ``start``): whether the start has finished
  (:func:`start_finished`).

Spawner (JupyterHub 5.5 and 6):

- ``_log_name``: how JupyterHub names the server in its own log lines
  (``user:server``), used in ours so both read alike (:func:`log_name`).
- ``_spawn_future`` (a class attribute JupyterHub's handlers set): the
  whole spawn (the start, then the wait for the server's answer), which a
  stop during it cancels; JupyterHub then forgets it, so the outcome is
  recorded when it ends (:func:`when_spawn_ends`).

ResourceReflector (kubespawner 7), the one exception to "only here": every
reflector of ours runs the watch loop of
:mod:`workspacespawner.k8s.watchloop`, which sits in the Kubernetes layer
below this module, so the override lives there; the members are checked here
all the same.

- ``_watch_and_update()`` and ``_list_and_update(resource_version)``:
  overridden by ``RecoveringReflector`` (a loop that never gives up, and a
  list that logs no traceback per failed try); kubespawner's ``start()``
  calls both.
- ``_stopping`` (set in ``__init__`` and ``stop()``): whether ``stop()``
  was called, which ends the loop.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from jupyterhub.spawner import Spawner
from kubespawner import KubeSpawner
from kubespawner.reflector import ResourceReflector

from workspacespawner.core import names
from workspacespawner.k8s import watches


@dataclass(frozen=True)
class PrivateMember:
    """A private member of ``owner`` the package uses: a method with ``signature`` (its parameter names, in order), a
    property (``signature`` "property"), an attribute its class's source assigns (``signature`` "attribute"), or an
    attribute the class declares for others to set (``signature`` "class attribute")."""

    owner: type
    name: str
    signature: str

    def problem(self) -> str | None:
        """What an upgrade changed about this member, or None when it is as used here."""
        where = f"{self.owner.__module__}.{self.owner.__qualname__}.{self.name}"
        if self.signature == "attribute":
            assigned = f"self.{self.name} =" in inspect.getsource(self.owner)
            return None if assigned else f"{where} is no longer assigned by {self.owner.__qualname__}"
        missing = object()
        found = inspect.getattr_static(self.owner, self.name, missing)
        if self.signature == "class attribute":
            return None if found is not missing else f"{where} is gone"
        if found is missing or found is None:
            return f"{where} is gone"
        if self.signature == "property":
            return None if isinstance(found, property) else f"{where} is no longer a property"
        params = ", ".join(inspect.signature(found).parameters)
        return None if params == self.signature else f"{where} takes ({params}), not ({self.signature})"


#: Every private member used, for ``tests/unit/test_upstream.py`` (see the module docstring for why each is needed).
PRIVATE_MEMBERS = (
    PrivateMember(KubeSpawner, "_start", "self"),
    PrivateMember(KubeSpawner, "_start_reflector", "self, kind, reflector_class, replace, kwargs"),
    PrivateMember(KubeSpawner, "_get_reflector_key", "self, kind"),
    PrivateMember(KubeSpawner, "_start_watching_pods", "self, replace"),
    PrivateMember(KubeSpawner, "_start_watching_events", "self, replace"),
    PrivateMember(KubeSpawner, "_expand_user_properties", "self, template, slug_scheme"),
    PrivateMember(KubeSpawner, "_expand_all", "self, src"),
    PrivateMember(KubeSpawner, "_build_common_labels", "self, extra_labels"),
    PrivateMember(KubeSpawner, "_expand_env", "self, env"),
    PrivateMember(KubeSpawner, "_options_from_form", "self, formdata"),
    PrivateMember(KubeSpawner, "_sorted_dict_values", "self, src"),
    PrivateMember(KubeSpawner, "_get_initialized_profile_list", "self, profile_list"),
    PrivateMember(KubeSpawner, "_validate_user_options", "self, profile_list"),
    PrivateMember(KubeSpawner, "_load_profile", "self, slug, profile_list"),
    PrivateMember(KubeSpawner, "_last_event", "attribute"),
    PrivateMember(KubeSpawner, "_start_future", "attribute"),
    PrivateMember(Spawner, "_log_name", "property"),
    PrivateMember(Spawner, "_spawn_future", "class attribute"),
    PrivateMember(ResourceReflector, "_watch_and_update", "self"),
    PrivateMember(ResourceReflector, "_list_and_update", "self, resource_version"),
    PrivateMember(ResourceReflector, "_stopping", "attribute"),
)


class KubeSpawnerOverrides:
    """kubespawner's private methods WorkspaceSpawner overrides, each handing over to a method of its own.

    A mixin listed before ``KubeSpawner`` (so ``super()`` is kubespawner's), and no Configurable: it adds no config
    section.
    """

    async def _start(self):
        """kubespawner's ``start()`` runs this as its ``_start_future``: the workspace's start (``workspace_start``)."""
        return await self.workspace_start()

    async def _start_reflector(self, kind, reflector_class, replace=False, **kwargs):
        """kubespawner's shared reflector of ``kind``, replaced when its watch gave up (kubespawner would hand out the dead one).

        Its Pod and Event reflectors start as their interning subclasses
        (:data:`~workspacespawner.k8s.watches.INTERNING_REFLECTORS`): the same watch, a cache that keeps each repeated
        string once.
        """
        reflector_class = watches.INTERNING_REFLECTORS.get(reflector_class, reflector_class)
        previous = self.__class__.reflectors.get(self._get_reflector_key(kind))
        if previous is not None and not watches.alive(previous):
            self.log.warning("The %s watch of %s gave up; starting a new one", kind, self.namespace)
            replace = True
        return await super()._start_reflector(kind, reflector_class, replace=replace, **kwargs)

    def _expand_env(self, env):
        """kubespawner's expansion of ``environment`` values, with literal braces allowed (a JSON value, ``${HOME}``)."""
        expanded = super()._expand_env({k: v for k, v in env.items() if not isinstance(v, str)})
        for key, value in env.items():
            if isinstance(value, str):
                expanded[key] = names.expand_with_literal_braces(value, self._expand_user_properties)
        return expanded


def when_spawn_ends(spawner, callback) -> None:
    """Call ``callback(cancelled)`` once JupyterHub's spawn of ``spawner`` ends (its ``_spawn_future``: the start,
    then the wait for the server's answer); ``cancelled``: a stop cut it short. Nothing outside a spawn."""
    future = spawner._spawn_future
    if future is not None:
        future.add_done_callback(lambda done: callback(done.cancelled()))


def log_name(spawner) -> str:
    """How JupyterHub names ``spawner``'s server in its log (``user:server``)."""
    return spawner._log_name


def expand(spawner, template: str) -> str:
    """``template`` with kubespawner's ``{username}``, ``{servername}``, ``{user_server}``... filled in."""
    return spawner._expand_user_properties(template)


def common_labels(spawner, extra_labels: dict) -> dict:
    """kubespawner's labels of every object it makes, plus ``extra_labels`` (templates expanded)."""
    return spawner._build_common_labels(spawner._expand_all(extra_labels))


async def start_pod(spawner) -> str:
    """kubespawner's own Pod start (its ``_start``); returns the server URL."""
    return await KubeSpawner._start(spawner)


async def watch_pods(spawner, *, replace: bool = False):
    """Start (or join) the namespace's shared Pod watch (``replace``: a new one); returns its reflector."""
    return await spawner._start_watching_pods(replace=replace)


async def watch_events(spawner):
    """Start (or join) the namespace's shared Event watch; returns its reflector."""
    return await spawner._start_watching_events()


def last_event(spawner) -> str | None:
    """The uid of the last Event before this start (its progress shows only later ones); None before any."""
    return spawner._last_event


def start_finished(spawner) -> bool:
    """Whether the start kubespawner runs (its ``_start_future``) has finished."""
    return spawner._start_future is not None and spawner._start_future.done()


def form_options(spawner, formdata: dict) -> dict:
    """kubespawner's user_options of a submitted spawn form."""
    return spawner._options_from_form(formdata)


def sorted_profile_list(spawner):
    """The spawner's ``profile_list`` with kubespawner's ordering of dict-valued options; a callable as it is."""
    return spawner._sorted_dict_values(spawner.profile_list)


def initialized_profiles(spawner, profiles: list[dict]) -> list[dict]:
    """``profiles`` as kubespawner initializes them (slugs, a default marked)."""
    return spawner._get_initialized_profile_list(profiles)


def validate_user_options(spawner, profiles: list[dict]) -> None:
    """kubespawner's check of ``spawner.user_options`` against ``profiles``; raises ValueError."""
    spawner._validate_user_options(profiles)


def load_profile(spawner, slug: str, profiles: list[dict]) -> None:
    """kubespawner's application of profile ``slug`` (its overrides onto the spawner)."""
    spawner._load_profile(slug, profiles)

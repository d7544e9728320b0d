"""What the spawn page shows, as data: the user's balance (the header) and one card per profile.

Pure: built from the profiles the user may start, the user's quota usage and
limits, their disks and the GPUs free now; no I/O. The form template
(``templates/form.html``) draws it once, and the page's live endpoint
(:mod:`workspacespawner.hubhandlers`) sends the same data as JSON every few seconds, so the page
and the endpoint never disagree.

A card's numbers come from the profile's ``kubespawner_override`` (as the
start applies it), with the spawner's own settings where it sets nothing:
``workspace_kind``, ``ide``, ``cpu_limit`` (cores), ``mem_limit``,
``vm_gpu_device_name``, the GPU resource of ``extra_resource_limits``
(``nvidia.com/gpu``, a MIG slice, a time-sliced share) and the
``nvidia.com/gpu.product`` node selector; a VM profile's golden image
(``vm_golden_image``) with its version. Its cost is in weighted
card-hours per hour (``c.GPUEconomy.card_hour_weights``): one number when
the profile names its GPU type or every type costs the same, else a range
over the types of its resource the cluster has (the types the weights list
when the cluster's are not known).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime

from workspacespawner.config.goldenimages import image_name, version_label
from workspacespawner.config.gpueconomy import GPUEconomy
from workspacespawner.config.profiles import gpu_limit
from workspacespawner.core.gpuresources import DEVICE, GPU_PRODUCT_LABEL, MIG, GPUResource, parse_gpu_resource
from workspacespawner.core.quantities import parse_quantity
from workspacespawner.gpu.capacity import GPUPool, pool_for, shortage
from workspacespawner.quota.policy import Limits, Usage, gpu_units, number, when

#: Bytes in a GiB (disk sizes are shown in GiB).
GIB = 1024**3

#: How the page names an IDE and a workspace kind (the card's group heading).
IDE_NAMES = {"jupyterlab": "JupyterLab", "code-server": "code-server"}
KIND_NAMES = {"container": "Container", "vm": "Virtual machine"}


@dataclass(frozen=True)
class Balance:
    """The header of the spawn page: what the user has used and has left.

    ``card_hours_used``/``card_hours_limit``/``card_hours_left``: this
    month's weighted card-hours (GPU units × weight × hours); ``resets``: when they reset, as
    ``2027-01-01 00:00 (Europe/Berlin)``; ``resets_at``: the same instant in
    ISO 8601. ``running``/``running_limit``: workspaces starting or running
    now and how many may at once (None when the hub lets the user have one
    server only: a limit no one can reach is not shown). ``disk_used_gib``/``disk_limit_gib``: the
    user's disks together (requested sizes, GiB) and the quota (None: no
    limit). Every field is None when quotas are off or the ledger cannot be
    read (the page then shows no header).
    """

    card_hours_used: float | None = None
    card_hours_limit: float | None = None
    card_hours_left: float | None = None
    resets: str | None = None
    resets_at: str | None = None
    running: int | None = None
    running_limit: int | None = None
    disk_used_gib: float | None = None
    disk_limit_gib: float | None = None

    @property
    def known(self) -> bool:
        return self.card_hours_limit is not None

    @property
    def used_percent(self) -> int:
        """Card-hours used as a whole percentage of the limit, 0–100 (100 when the limit is 0)."""
        if not self.card_hours_limit:
            return 100 if self.known else 0
        return max(0, min(100, round(100 * (self.card_hours_used or 0) / self.card_hours_limit)))

    def to_json(self) -> dict:
        return {**asdict(self), "used_percent": self.used_percent}


def balance(usage: Usage | None, limits: Limits | None, disk_used_bytes: int, *,
            servers_allowed: int | None = None) -> Balance:
    """The :class:`Balance` of a user from their ledger ``usage`` and ``limits`` (None, None: quotas off or unreadable).

    ``servers_allowed``: how many servers the hub lets the user have
    (:func:`~.gather.servers_allowed`; None: no limit of the hub's); the
    workspace limit shown is the lower of it and the quota's, and none when
    it is 1.
    """
    if usage is None or limits is None:
        return Balance()
    limit = limits.card_hours_per_month
    reachable = min(limits.max_concurrent, servers_allowed or limits.max_concurrent)
    return Balance(
        card_hours_used=round(usage.card_hours, 2),
        card_hours_limit=limit,
        card_hours_left=round(max(0.0, limit - usage.card_hours), 2),
        resets=when(usage.period_end),
        resets_at=usage.period_end.isoformat(),
        running=usage.running,
        running_limit=None if servers_allowed == 1 else reachable,
        disk_used_gib=round(disk_used_bytes / GIB, 1),
        disk_limit_gib=round(float(parse_quantity(limits.max_disk)) / GIB, 1) if limits.max_disk else None,
    )


@dataclass(frozen=True)
class Card:
    """One profile as the spawn page shows it.

    ``cpu``: cores (None: no limit set); ``memory``: as configured
    (``"32G"``); ``gpus``: units of ``gpu_resource`` (``nvidia.com/gpu``, a
    MIG slice, a time-sliced share, a VM device); ``gpu_type``: the GPU
    product the profile selects (``""``: any type); ``gpu_kind``: the units
    in words (``1 MIG slice 1g.10gb``, ``2 Tesla-V100-SXM2-16GB GPUs``);
    ``card_hours_per_hour``: weighted card-hours an hour of it costs at
    most on the GPU types it may get, ``card_hours_from``: at least (equal
    unless it names no GPU type and types cost differently);
    ``cost``: that in a sentence; ``gpus_free``/``gpus_total``: units of its
    resource and type on usable nodes now, ``free_unit`` their name
    (``MIG slices 1g.10gb``; None for CPU profiles, or when unknown);
    ``blocked``: why it cannot start now, in a sentence (None: it can);
    ``selectable``: False only when the start is sure to be refused (the
    user's own limits); a card short of GPUs stays selectable, since the
    cluster autoscaler may add a node. ``nodes_note``: which node pool it runs on, on a site with team pools
    (:func:`~.placementnotes.nodes_sentence`). ``pool_note``: for a team pool's
    profile, the pool's free GPUs and who holds them
    (:func:`~workspacespawner.gpu.poolholders.describe`);
    ``prefers_note``: which GPU types it tries first
    (:func:`~workspacespawner.gpu.placement.prefers_sentence`); ``queue_note``: the GPU queue a start of it waits in
    when its GPUs are taken, and how many wait there now (:func:`~workspacespawner.queue.line.queue_note`); None:
    nothing to say.
    ``system_image``: for a VM profile, the golden image (DataSource name) a new root disk is cloned from, and
    ``system_image_version`` its version (:func:`~workspacespawner.config.goldenimages.version_label`); ``disk_image``
    and ``disk_image_version``: the image the user's existing root disk was cloned from, when it is another one
    (``""``: no root disk yet, or the same image; a container profile says none of these).
    """

    slug: str
    ide: str
    kind: str
    cpu: float | None
    memory: str | None
    gpus: int
    gpu_type: str
    card_hours_per_hour: float
    gpu_type_shown: str = ""
    gpus_free: int | None = None
    gpus_total: int | None = None
    blocked: str | None = None
    selectable: bool = True
    nodes_note: str | None = None
    pool_note: str | None = None
    prefers_note: str | None = None
    queue_note: str | None = None
    system_image: str = ""
    system_image_version: str = ""
    disk_image: str = ""
    disk_image_version: str = ""
    gpu_resource: str = "nvidia.com/gpu"
    gpu_kind: str = ""
    card_hours_from: float = 0.0
    cost: str = "No GPU: costs no card-hours"
    free_unit: str = "GPUs"

    @property
    def group(self) -> str:
        """The heading the card is listed under: ``"JupyterLab · Container"``."""
        return f"{IDE_NAMES.get(self.ide, self.ide)} · {KIND_NAMES.get(self.kind, self.kind)}"

    def to_json(self) -> dict:
        return {**asdict(self), "group": self.group}


def system_images(kind: str, override: dict, defaults: dict, root_disk_image: str | None) -> dict[str, str]:
    """The :class:`Card`'s ``system_image*`` and ``disk_image*`` fields of a profile of ``kind`` whose
    ``kubespawner_override`` is ``override`` (``vm_golden_image`` and ``vm_golden_image_namespace``, else
    ``defaults``'); ``root_disk_image``: ``namespace/name`` the user's root disk was cloned from (None: no disk)."""
    name = str(override.get("vm_golden_image", defaults.get("vm_golden_image")) or "")
    if kind != "vm" or not name:
        return {}
    namespace = override.get("vm_golden_image_namespace", defaults.get("vm_golden_image_namespace")) or ""
    found = {"system_image": name, "system_image_version": version_label(name)}
    if root_disk_image and root_disk_image != f"{namespace}/{name}":
        disk = image_name(root_disk_image)
        found.update(disk_image=disk, disk_image_version=version_label(disk))
    return found


def _profile_facts(profile: dict, defaults: dict, declared=()) -> dict:
    override = profile.get("kubespawner_override") or {}
    cpu = override.get("cpu_limit", defaults.get("cpu_limit"))
    memory = override.get("mem_limit", defaults.get("mem_limit"))
    kind = override.get("workspace_kind", defaults.get("workspace_kind", "container"))
    resource, gpus = gpu_limit(override.get("extra_resource_limits"), declared)
    if gpus and kind == "vm":
        resource = override.get("vm_gpu_device_name", defaults.get("vm_gpu_device_name")) or resource
    return {
        "kind": kind,
        "ide": override.get("ide", defaults.get("ide", "jupyterlab")),
        "cpu": float(cpu) if cpu else None,
        "memory": str(memory) if memory else None,
        "gpus": gpus,
        "gpu_type": (override.get("node_selector") or {}).get(GPU_PRODUCT_LABEL) or "",
        "gpu_resource": resource,
    }


def weight_range(economy: GPUEconomy, resource: str, product: str,
                 pools: dict[tuple[str, str], GPUPool] | None) -> tuple[float, float]:
    """``(least, most)`` card-hours one unit of ``resource`` costs per hour on the GPU types a start may get.

    ``product`` named: that type's weight, twice. Else the types of
    ``resource`` the cluster has (``pools``, with units allocatable), and
    when it has none or they are unknown, every type the weights list and
    the price of the unlisted ones. A node without the product label
    counts at :meth:`~workspacespawner.config.gpueconomy.GPUEconomy.highest_weight`,
    the provisional price a run placed there keeps.
    """
    if product:
        one = economy.weight(resource, product)
        return one, one
    present = sorted({p for (name, p), pool in (pools or {}).items() if name == resource and pool.total > 0})
    if present:
        prices = [economy.weight(resource, p) if p else economy.highest_weight(resource) for p in present]
    else:
        prices = [w for _p, w in economy.products_by_cost(resource)] + [economy.weight(resource, None)]
    return min(prices), max(prices)


def cost_sentence(gpus: int, least: float, most: float) -> str:
    """The card's cost line: ``Costs 0.5 card-hours per hour``, or ``Costs from 0.25 to 1 card-hours per hour,
    depending on the GPU it gets`` (per-unit weights ``least``/``most`` times ``gpus``)."""
    if gpus <= 0:
        return "No GPU: costs no card-hours"
    low, high = gpus * least, gpus * most
    if number(low) == number(high):
        return f"Costs {number(high)} card-hour{'' if high == 1 else 's'} per hour"
    return f"Costs from {number(low)} to {number(high)} card-hours per hour, depending on the GPU it gets"


def _quota_block(gpus: int, usage: Usage | None, limits: Limits | None) -> str | None:
    """Why the user's own limits refuse a start of a profile asking for ``gpus`` now (None: they allow it)."""
    if usage is None or limits is None:
        return None
    if usage.running >= limits.max_concurrent:
        return (f"You have {usage.running} of your {limits.max_concurrent} workspaces running or starting; "
                "stop one to start another.")
    if gpus and usage.card_hours >= limits.card_hours_per_month:
        return (f"You have used all {number(limits.card_hours_per_month)} card-hours of this month; "
                f"they reset on {when(usage.period_end)}.")
    return None


def free_unit(resource: str, product: str) -> str:
    """What the card's free count counts: the GPU type (``NVIDIA A100 80GB``, its name for people) for whole GPUs and
    shares of one named type, else the units in words (``GPUs``, ``shared GPUs``, ``MIG slices 1g.10gb``, a VM device's name)."""
    known = parse_gpu_resource(resource) or GPUResource(resource, DEVICE)
    if known.kind == DEVICE:
        return resource
    if product and known.kind != MIG:
        return product
    return known.describe(2).split(" ", 1)[1]


def card(profile: dict, defaults: dict, pools: dict[tuple[str, str], GPUPool] | None, usage: Usage | None,
         limits: Limits | None, economy: GPUEconomy | None = None, root_disk_image: str | None = None) -> Card:
    """The :class:`Card` of ``profile`` (a profile_list entry); ``defaults``: the spawner's settings a profile may override.

    ``pools``: GPUs free now by ``(resource, product)`` (None: unknown; the
    card then says nothing of free GPUs). ``economy``: the card-hour
    weights (default: none set). The user's own limits come first: a card
    they refuse is not selectable. ``root_disk_image``: ``namespace/name`` of
    the golden image the user's VM root disk was cloned from (None: no root
    disk yet; :func:`system_images`).
    """
    economy = economy if economy is not None else GPUEconomy()
    facts = _profile_facts(profile, defaults, economy.declared())
    gpus, resource, product = facts["gpus"], facts["gpu_resource"], facts["gpu_type"]
    free = total = None
    blocked = _quota_block(gpus, usage, limits)
    selectable = blocked is None
    if gpus and pools is not None:
        pool = pool_for(pools, product or None, resource)
        free, total = pool.free, pool.total
        blocked = blocked or shortage(pool, gpus, economy.display_name)
    least, most = weight_range(economy, resource, product, pools) if gpus else (0.0, 0.0)
    shown = economy.display_name(product)
    return Card(slug=profile.get("slug", ""), card_hours_per_hour=gpus * most, gpus_free=free, gpus_total=total,
                blocked=blocked, selectable=selectable, gpu_kind=gpu_units(gpus, resource, shown) if gpus else "",
                card_hours_from=gpus * least, cost=cost_sentence(gpus, least, most),
                free_unit=free_unit(resource, shown), **facts, gpu_type_shown=shown,
                **system_images(facts["kind"], profile.get("kubespawner_override") or {}, defaults, root_disk_image))


def page_data(cards: list[Card], shown: Balance, now: datetime) -> dict:
    """The live endpoint's JSON body: ``{"as_of": ISO 8601, "balance": {...}, "cards": {slug: {...}}}``."""
    return {
        "as_of": now.isoformat(),
        "balance": shown.to_json() if shown.known else None,
        "cards": {c.slug: c.to_json() for c in cards},
    }

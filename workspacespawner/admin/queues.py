"""``workspacespawner queues``: the Kueue objects of the hub's GPU queues (``c.GPUQueues.queues``), for an operator.

Reads the hub's own configuration (``-f``, :mod:`.common`), checks
``c.GPUQueues.queues`` as the hub does and prints the ResourceFlavors,
ClusterQueues, LocalQueues and WorkloadPriorityClasses
(:mod:`workspacespawner.queue.kueueobjects`) as YAML documents for
``kubectl apply -f -``: the hub reads them but never writes them (it needs
no cluster-wide rights). The LocalQueues go to the workspaces' namespace
(``--namespace``, else ``c.KubeSpawner.namespace``).
"""

from __future__ import annotations

import argparse

import yaml
from traitlets import TraitError

from workspacespawner.admin.common import add_common_arguments, fail, load_config, namespace_of
from workspacespawner.queue.config import GPUQueues
from workspacespawner.queue.kueueobjects import render


def rendered(config, namespace: str) -> str:
    """The YAML documents of ``config``'s GPU queues for ``namespace``; TraitError for a bad ``c.GPUQueues.queues``."""
    objects = render(GPUQueues(config=config).all(), namespace)
    return "".join(f"---\n{yaml.safe_dump(obj, sort_keys=False)}" for obj in objects)


def main(argv=None) -> int:
    """``workspacespawner queues [-f jupyterhub_config.py] [--namespace NS]``."""
    parser = argparse.ArgumentParser(
        prog="workspacespawner queues",
        description="Print the Kueue objects of the hub's GPU queues (c.GPUQueues.queues) for kubectl apply -f -.",
    )
    add_common_arguments(parser, actor=False)
    args = parser.parse_args(argv)
    try:
        config = load_config(args)
        text = rendered(config, namespace_of(config, args.namespace))
    except (OSError, TraitError) as e:
        return fail(str(e))
    if not text:
        return fail("the hub's configuration has no GPU queues (c.GPUQueues.queues is empty)")
    print(text, end="")
    return 0

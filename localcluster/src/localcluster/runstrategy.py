"""KubeVirt's run strategy of a VirtualMachine, shared by virt-api (vmactions) and virt-controller."""

from __future__ import annotations

#: VMI phases after which a VMI never runs again (kubevirt.io/v1 VirtualMachineInstancePhase).
FINAL_PHASES = ("Succeeded", "Failed")


def run_strategy(vm: dict) -> str:
    """The VM's effective run strategy (``spec.running`` true is Always, false or unset Halted)."""
    spec = vm.get("spec") or {}
    if spec.get("runStrategy"):
        return spec["runStrategy"]
    return "Always" if spec.get("running") else "Halted"

"""A VM start reads the spawner's start settings when it starts, so a profile's ``kubespawner_override`` reaches it.

``start_timeout`` and ``fail_fast_unschedulable`` are kubespawner's traits; a profile may override them (a VM
profile on a slow golden image, the demo's real guest under TCG). The VM backend is made with the spawner, before
any profile is applied, so it takes them as ``()`` that gives them at each start.
"""

from __future__ import annotations

from types import SimpleNamespace

from workspacespawner.backends.vm.backend import VMBackend, VMNaming


def test_the_vm_start_takes_the_start_settings_of_the_moment():
    spawner = SimpleNamespace(start_timeout=60, fail_fast_unschedulable=True)
    vm = VMBackend(naming=VMNaming("default", "ann", "ann", "ws-ann"), settings_for=None, root_disk_size="40Gi",
                   core_api=None, custom_api=None, tasks=None,
                   start_timeout=lambda: max(spawner.start_timeout - 5, 1),
                   fail_fast_unschedulable=lambda: spawner.fail_fast_unschedulable)
    vm.ref(home_pvc="home-ann", fresh=True)
    assert (vm._workspace().start_timeout, vm._workspace().fail_fast_unschedulable) == (55, True)
    spawner.start_timeout, spawner.fail_fast_unschedulable = 600, False  # the profile's override, applied later
    assert (vm._workspace().start_timeout, vm._workspace().fail_fast_unschedulable) == (595, False)


def test_a_fixed_value_still_works():
    vm = VMBackend(naming=VMNaming("default", "ann", "ann", "ws-ann"), settings_for=None, root_disk_size="40Gi",
                   core_api=None, custom_api=None, tasks=None, start_timeout=12, fail_fast_unschedulable=False)
    vm.ref(home_pvc="home-ann", fresh=True)
    assert (vm._workspace().start_timeout, vm._workspace().fail_fast_unschedulable) == (12, False)

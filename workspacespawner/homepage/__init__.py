"""The hub's home page with a "Your workspaces" panel: each server's phase, profile, GPUs held and card-hours this
month, the quota warning that applies, the user's disks against their quota, and the Retained disks the user can get
back (issue #17).

- :mod:`.model`: the panel as data (pure);
- :mod:`.gather`: that data for one user (JupyterHub's servers, one ledger read, the disks from the PVC watch);
- ``templates/home.html``: JupyterHub's own home page with the panel below it, filled from
  ``GET /hub/workspaces-data/<user>`` (:mod:`workspacespawner.hubhandlers`);
- ``templates/not_running.html``: JupyterHub's "Server not running" page, which after a start a stop cut short says
  "Start cancelled" and offers Start again (the spawner's lifecycle keeps that in its state);
- ``templates/spawn_pending.html``: JupyterHub's progress page, whose tab title shows a GPU queue's place in line and
  "Your turn", with a browser notification the student can ask for (issue #41).

Install the template before JupyterHub's own (``c.JupyterHub.template_paths`` is searched in order)::

    from workspacespawner.homepage import TEMPLATES
    c.JupyterHub.template_paths.insert(0, TEMPLATES)
"""

from pathlib import Path

#: The folder holding home.html, not_running.html and spawn_pending.html (each extends JupyterHub's own, ``templates/<name>``).
TEMPLATES = str(Path(__file__).resolve().parent / "templates")

"""The spawn page a student sees: card-hours left, workspaces and disk in a header, profiles as cards with the GPUs
free now, kept live by a small JSON endpoint of the hub's (issue #17).

- :mod:`.model`: the page as data (pure);
- :mod:`.gather`: that data for one user, from the hub's caches and one ledger read;
- :mod:`.form`: the HTML of the spawn form (``Spawner.options_form``);
- :mod:`workspacespawner.hubhandlers`: ``GET /hub/spawn-page-data/<user>/<server>``, the same data as JSON.
"""

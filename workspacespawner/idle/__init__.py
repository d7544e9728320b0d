"""Idle GPUs given back: a GPU server that shows no activity for ``c.GPUIdle.gpu_idle_timeout`` is warned on the hub's
home page and, after ``gpu_idle_grace``, stopped with its disks kept.

- :mod:`.settings`: ``c.GPUIdle`` (:class:`~.settings.GPUIdle`);
- :mod:`.decision`: the pure decision per server and the messages;
- :mod:`.activity`: what a pass reads (the hub's REST API, the watch caches, Prometheus);
- :mod:`.gpupass`: the periodic pass in the hub process;
- :mod:`.notices`: the messages the home page shows;
- :mod:`.serverext`: the jupyter-server extension in the workspace image that reports code-server's heartbeat.
"""

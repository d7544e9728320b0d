"""What our modules log reaches the hub's log (:func:`workspacespawner.hubtasks.send_logs_to_hub`).

Run in a fresh interpreter: the JupyterHub app is a process-wide singleton
and the logger tree is process-wide state.
"""

import subprocess
import sys
import textwrap

HUB = textwrap.dedent("""
    import io, logging
    from jupyterhub.app import JupyterHub
    from workspacespawner import hubtasks

    app = JupyterHub.instance()
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("[%(levelname)s %(name)s] %(message)s"))
    app.log.handlers = [handler]
    app.log.propagate = False
    app.log.setLevel(logging.INFO)
    logging.getLogger("workspacespawner.quota").info("before")
    hubtasks.send_logs_to_hub()
    logging.getLogger("workspacespawner.quota").info("Closed run 7")
    logging.getLogger("workspacespawner").debug("not at the hub's level")
    print(out.getvalue(), end="")
""")


def run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_an_info_line_of_ours_reaches_the_hub_log_at_its_level():
    assert run(HUB) == "[INFO workspacespawner.quota] Closed run 7\n"


def test_outside_a_hub_our_logger_is_left_alone():
    code = ("import logging\nfrom workspacespawner import hubtasks\nhubtasks.send_logs_to_hub()\n"
            "print(logging.getLogger('workspacespawner').parent is logging.root)")
    assert run(code) == "True\n"

"""The build recipes in tools/ reuse a finished build: a warm CI run builds nothing (about 10 ms each).

tools/kueue/build.sh on a cache holding a finished build (its binary, its manifests and its marker with the
recipe's stamp) says it reuses the folder and prints it, without Go on the PATH; a marker of another recipe, or a
build without its manifests, is built again (here: it fails, as there is no Go to build with).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "tools"


def kueue_build(cache: Path, *, stamp: str | None = None, manifests: bool = True) -> Path:
    """A finished tools/kueue build in ``cache`` as build.sh leaves one (``stamp``: its marker's, default the
    recipe's own)."""
    version = next(line.split("=", 1)[1] for line in (TOOLS / "kueue" / "versions.env").read_text().splitlines()
                   if line.startswith("KUEUE_VERSION="))
    out = cache / "kueue" / version
    (out / "bin").mkdir(parents=True)
    (out / "bin" / "kueue").write_text("#!/bin/sh\n")
    (out / "bin" / "kueue").chmod(0o755)
    if manifests:
        (out / "config" / "default").mkdir(parents=True)
    recipe = (TOOLS / "kueue" / "build.sh").read_bytes() + (TOOLS / "kueue" / "versions.env").read_bytes()
    (out / ".built").write_text(f"kueue={version}\nstamp={stamp or hashlib.sha256(recipe).hexdigest()}\n")
    return out


def run_build(cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "WORKSPACESPAWNER_CACHE": str(cache), "PATH": "/usr/bin:/bin"}  # no Go to build with
    return subprocess.run(["bash", str(TOOLS / "kueue" / "build.sh")], env=env, capture_output=True, text=True,
                          timeout=60)


def test_a_finished_kueue_build_is_reused(tmp_path):
    out = kueue_build(tmp_path)
    done = run_build(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == str(out)
    assert "reusing" in done.stderr


def test_a_kueue_build_of_another_recipe_or_without_its_manifests_is_built_again(tmp_path):
    kueue_build(tmp_path / "other", stamp="0" * 64)
    kueue_build(tmp_path / "bare", manifests=False)
    for cache in (tmp_path / "other", tmp_path / "bare"):
        done = run_build(cache)
        assert done.returncode != 0 and "reusing" not in done.stderr, done.stderr

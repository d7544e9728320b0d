"""The README's configuration reference, generated from WorkspaceSpawner's own traits.

``python -m workspacespawner.configdoc`` prints the Markdown section; a test
checks that the README holds exactly this text, so the reference stays true.
"""

from __future__ import annotations

import inspect

BEGIN = "<!-- BEGIN configuration reference (python -m workspacespawner.configdoc) -->"
END = "<!-- END configuration reference -->"


def reference() -> str:
    """Markdown: one entry per configurable trait WorkspaceSpawner adds to KubeSpawner."""
    from kubespawner import KubeSpawner

    from workspacespawner.spawner import WorkspaceSpawner

    inherited = set(KubeSpawner.class_trait_names(config=True))
    lines = [BEGIN, ""]
    for name, trait in sorted(WorkspaceSpawner.class_traits(config=True).items()):
        if name in inherited:
            continue
        help_text = inspect.cleandoc(trait.help or "").strip()
        default = trait.default()
        lines.append(f"- `c.WorkspaceSpawner.{name}` = `{default!r}` ({type(trait).__name__})")
        lines.extend(f"  {line}".rstrip() for line in help_text.splitlines())
    lines += ["", END]
    return "\n".join(lines)


def main(argv=None) -> int:
    print(reference())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

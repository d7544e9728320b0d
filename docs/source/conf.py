"""Sphinx configuration of the workspacespawner documentation (``docs/build.sh`` builds it)."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

project = "workspacespawner"
author = "The workspacespawner authors"
copyright = "2026, The workspacespawner authors"

extensions = [
    "myst_parser",
    "sphinxarg.ext",
    "wsconfig",  # autodoc-traits, with our sections and the z2jh values paths
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# The reference: traits in source order, no class signature, the help text as it is.
autodoc_member_order = "bysource"
autodoc_class_signature = "separated"
autodoc_typehints = "none"
autodoc_inherit_docstrings = False

html_theme = "pydata_sphinx_theme"
html_title = "workspacespawner"
html_static_path = []
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
}
html_sidebars = {"index": []}

# -n checks every cross-reference. The reference documents settings (traits) only, so a help text's reference to a
# function, method, class, module or constant of the code is a pointer for developers, not a page: not checked.
nitpicky = True
nitpick_ignore_regex = [(r"py:(func|meth|class|data|mod|exc)", r".*")]

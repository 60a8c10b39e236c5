"""Sphinx configuration of nqm's documentation site. Build it (offline, warnings as errors) with

    python -m sphinx -W --keep-going -b html docs docs/_build/html

``tests/test_docs.py`` runs the same build. Pages generated at build time (the results gallery, the
notebooks, the API stubs) are written by ``docs/_ext/generated.py`` and autosummary, and are not
committed."""

import importlib
import inspect
import os
import pathlib
import sys

DOCS = pathlib.Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path[:0] = [str(ROOT), str(DOCS / "_ext")]  # this checkout's nqm, and the local extension
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import nqm  # noqa: E402

project = "nqm"
author = "nqm authors"
copyright = "2026, nqm authors"
release = version = nqm.__version__

extensions = [
    "myst_nb",  # Markdown pages (myst-parser) and notebooks
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinxarg.ext",
    "generated",  # docs/_ext/generated.py: the results gallery and the notebooks
]

exclude_patterns = ["_build", "**.ipynb_checkpoints"]
templates_path = ["_templates"]

# Markdown
myst_heading_anchors = 3
myst_enable_extensions = ["dollarmath"]
nb_execution_mode = "off"  # notebooks are shown with their committed outputs, never re-run

# API reference
autosummary_generate = True
# The constants each module exports in __all__: autodoc documents module data only when it carries a
# doc-comment in that module's source, so the module template lists these, with their values.
autosummary_context = {"constants": {}}
for _name in ("nqm", "nqm.engine", "nqm.expected", "nqm.search.answers", "nqm.thresholds.derived",
              "nqm.thresholds.polynomials"):
    _module = importlib.import_module(_name)
    autosummary_context["constants"][_name] = {
        n: repr(getattr(_module, n)) for n in _module.__all__
        if not callable(getattr(_module, n)) and not inspect.ismodule(getattr(_module, n))}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # a class's Attributes: section as fields; its members are documented once

# Options (--flag) and quotes stay as written: no smart dashes or quotes.
smartquotes = False

html_theme = "furo"
html_title = f"nqm {release}"

"""Sphinx configuration of the sklearn-meanfield documentation.

``make html`` runs the sphinx-gallery examples and renders their figures;
``make html-noplot`` builds everything else without running them (what CI
does).  Both are strict: ``-W`` turns every warning into an error.
"""

import os
import re
import shutil
from pathlib import Path

import sklearn_meanfield

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

project = "sklearn-meanfield"
author = "sklearn-meanfield developers"
copyright = "2026, sklearn-meanfield developers"  # noqa: A001
release = sklearn_meanfield.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    # MathJax 3 bundled (copied into _static/mathjax): math renders with no
    # network, where the default CDN script left raw \\( ... \\) on the page.
    "sphinx-mathjax-offline",
    "sphinx.ext.doctest",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

templates_path = ["_templates"]
exclude_patterns = [
    "_build",
    "_gallery",
    "gallery_header.rst",
    "Thumbs.db",
    ".DS_Store",
    "sg_execution_times.rst",
]
# As in scikit-learn's documentation: `name` in a docstring is literal text.
default_role = "literal"
html_theme = "pydata_sphinx_theme"
html_title = f"sklearn-meanfield {release}"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
}

autosummary_generate = True
# An API page's table of contents lists "fit()", not the class name again
# before every method (the long entries ran off the side at 1280 px).
toc_object_entries_show_parents = "hide"
autodoc_default_options = {"members": True}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
# Cross-references in "Parameters" type fields ("array-like of shape ...")
# are free text; do not turn every word into a link.
numpydoc_xref_param_type = False

intersphinx_mapping = {
    "python": ("https://docs.python.org/3", None),
    "numpy": ("https://numpy.org/doc/stable/", None),
    "scipy": ("https://docs.scipy.org/doc/scipy/", None),
    "sklearn": ("https://scikit-learn.org/stable/", None),
    "joblib": ("https://joblib.readthedocs.io/en/stable/", None),
    "dask": ("https://docs.dask.org/en/stable/", None),
    "distributed": ("https://distributed.dask.org/en/stable/", None),
}
# The build must work offline (CI has no network): intersphinx inventories are
# only fetched when SKLEARN_MEANFIELD_DOC_ONLINE=1; otherwise external
# references render as plain text.
if os.environ.get("SKLEARN_MEANFIELD_DOC_ONLINE") != "1":
    intersphinx_mapping = {}


# sphinx-gallery reads the scripts of ``examples/`` from a staging copy in
# ``doc/_gallery`` that also holds the gallery's header, so that the examples
# folder itself needs no Sphinx-specific files.
def _stage_examples():
    staged = HERE / "_gallery"
    staged.mkdir(exist_ok=True)
    shutil.copyfile(HERE / "gallery_header.rst", staged / "GALLERY_HEADER.rst")
    wanted = {path.name for path in (ROOT / "examples").glob("plot_*.py")}
    for stale in staged.glob("*.py"):
        if stale.name not in wanted:
            stale.unlink()
    for name in wanted:
        source, target = ROOT / "examples" / name, staged / name
        if not target.exists() or target.read_bytes() != source.read_bytes():
            shutil.copyfile(source, target)
    return staged


def _skip_member(app, what, name, obj, skip, options):
    # The metadata-routing methods scikit-learn adds to every estimator
    # (set_fit_request, ...) are documented by scikit-learn itself.
    if name == "get_metadata_routing" or (
        name.startswith("set_") and name.endswith("_request")
    ):
        return True
    return None


_TRAILING_UNDERSCORE = re.compile(r"(?<![`\w*])([A-Za-z]\w*_)(?=[,) +])")
_NAME_LINE = re.compile(r"^(\s*[\w, ]+ : )(.*)$")


def _literal_attribute_names(app, what, name, obj, options, lines):
    # A word ending in "_" followed by a space or punctuation is a hyperlink
    # reference in reST; docstrings written for the terminal use attribute
    # names such as "shape (n_features_in_,)" without backticks, so make them
    # literal (not in parameter names, doctest lines or existing literals).
    for i, line in enumerate(lines):
        if "_" not in line or line.lstrip().startswith((">>>", "...")):
            continue
        match = _NAME_LINE.match(line)
        head, body = match.groups() if match else ("", line)
        lines[i] = head + _TRAILING_UNDERSCORE.sub(r"``\1``", body)


def setup(app):
    app.connect("autodoc-skip-member", _skip_member)
    app.connect("autodoc-process-docstring", _literal_attribute_names)


sphinx_gallery_conf = {
    "examples_dirs": str(_stage_examples().relative_to(HERE)),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "reference_url": {"sklearn_meanfield": None},
    "doc_module": ("sklearn_meanfield",),
    "backreferences_dir": "generated/backreferences",
    "show_memory": False,
    "abort_on_example_error": True,
}

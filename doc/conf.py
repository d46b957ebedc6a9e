"""Sphinx configuration of the sklearn-meanfield documentation.

``make html`` runs the sphinx-gallery examples and renders their figures;
``make html-noplot`` builds everything else without running them (what CI
does).  Both are strict: ``-W`` turns every warning into an error.
"""

import os
import re
import shutil
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive, directives

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
# The API pages have no section navigation on the left: the class names it
# lists are longer than any sidebar that leaves the text column readable, and
# the breadcrumbs and the API reference page lead between them.  Pages
# without sub-pages have nothing to list there either.
html_sidebars = {
    page: []
    for page in (
        "generated/*",
        "choosing",
        "install",
        "parallel",
        "progress",
        "glossary",
        "developers",
    )
}
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


RESULTS = ROOT / "benchmarks" / "RESULTS.md"


def _results_output(script):
    """The verbatim output of ``script`` in ``benchmarks/RESULTS.md``.

    The report has one section per script, headed ``## Estimator (script)``,
    whose first ``text`` code fence holds the script's output.
    """
    text = RESULTS.read_text(encoding="utf-8")
    heading = re.search(rf"^## .*\({re.escape(script)}\)\s*$", text, flags=re.MULTILINE)
    if heading is None:
        raise ValueError(f"no section for {script!r} in {RESULTS.name}")
    fence = re.search(r"^```text\n(.*?)^```", text[heading.end() :], re.M | re.S)
    if fence is None:
        raise ValueError(f"no output block under the {script!r} section")
    return fence.group(1).splitlines()


def _first(lines, marker, start, option):
    for i in range(start, len(lines)):
        if marker in lines[i]:
            return i
    raise ValueError(f"{option} {marker!r} not found")


class BenchmarkTable(Directive):
    """Part of a benchmark script's output, quoted from ``RESULTS.md``.

    ::

        .. benchmark-table:: bench_tap_gpc
           :start-at: TAP with likelihood='logistic'
           :end-before: Fitted kernels

    The quoted lines run from the first line containing ``start-at`` (or
    after the first containing ``start-after``) to the line before the next
    containing ``end-before`` (or through ``end-at``), within the script's
    own section, so that the documentation shows the numbers of the last
    ``python -m benchmarks`` and never a copy of them.  A marker that is
    not found is an error, which fails the strict (``-W``) build.

    ``:format: table`` renders a whitespace-aligned table (columns separated by
    two or more spaces, the first line the header, rules of dashes skipped,
    markdown's too) as an HTML table, which wraps in a narrow column where a
    wide literal block would scroll; a row with another number of columns is an
    error.  ``:columns: a, b, ...`` names the columns instead, for tables whose
    header does not line up with the cells: the quoted header line is dropped
    and every other line is split at whitespace and ``|``. ``:drop-columns:``
    lists the positions (from 1, as split) of columns to leave out, so that a
    wide table fits the text column.
    """

    required_arguments = 1
    option_spec = {
        "start-at": directives.unchanged_required,
        "start-after": directives.unchanged_required,
        "end-before": directives.unchanged_required,
        "end-at": directives.unchanged_required,
        "format": lambda value: directives.choice(value, ("text", "table")),
        "columns": directives.unchanged_required,
        "drop-columns": directives.positive_int_list,
    }

    def run(self):
        env = self.state.document.settings.env
        env.note_dependency(str(RESULTS))
        script = self.arguments[0]
        try:
            lines = _results_output(script)
            start = 0
            if "start-at" in self.options:
                start = _first(lines, self.options["start-at"], 0, "start-at")
            elif "start-after" in self.options:
                marker = self.options["start-after"]
                start = _first(lines, marker, 0, "start-after") + 1
            stop = len(lines)
            if "end-before" in self.options:
                stop = _first(
                    lines, self.options["end-before"], start + 1, "end-before"
                )
            elif "end-at" in self.options:
                stop = _first(lines, self.options["end-at"], start, "end-at") + 1
        except (OSError, ValueError) as error:
            raise self.error(f"benchmark-table {script}: {error}") from None
        quoted = [line.rstrip() for line in lines[start:stop]]
        while quoted and not quoted[-1]:
            quoted.pop()
        if not quoted:
            raise self.error(f"benchmark-table {script}: the selection is empty")
        if self.options.get("format") == "table" or "columns" in self.options:
            return [self._table(script, quoted)]
        text = "\n".join(quoted)
        block = nodes.literal_block(text, text, classes=["benchmark-table"])
        block["language"] = "text"
        return [block]

    def _table(self, script, lines):
        # Rules of dashes (plain or markdown's "| --- | --- |") are no rows.
        lines = [line for line in lines if line.strip() and set(line) - set("-|: ")]
        if "columns" in self.options:
            header = [label.strip() for label in self.options["columns"].split(",")]
            rows = [header] + [
                re.split(r"[\s|]+", line.strip(" |")) for line in lines[1:]
            ]
        else:
            rows = [re.split(r"\s{2,}", line.strip()) for line in lines]
        drop = {i - 1 for i in self.options.get("drop-columns", ())}
        if drop:
            rows = [
                [cell for i, cell in enumerate(row) if i not in drop] for row in rows
            ]
        n_cols = len(rows[0])
        for row in rows:
            if len(row) != n_cols:
                raise self.error(
                    f"benchmark-table {script}: {len(row)} columns in {row}, "
                    f"{n_cols} in the header"
                )

        def row_node(cells):
            row = nodes.row()
            for cell in cells:
                row += nodes.entry("", nodes.paragraph(text=cell))
            return row

        group = nodes.tgroup(cols=n_cols)
        group += [nodes.colspec(colwidth=1) for _ in range(n_cols)]
        group += nodes.thead("", row_node(rows[0]))
        group += nodes.tbody("", *(row_node(cells) for cells in rows[1:]))
        return nodes.table("", group, classes=["benchmark-table"])


def setup(app):
    app.connect("autodoc-skip-member", _skip_member)
    app.connect("autodoc-process-docstring", _literal_attribute_names)
    app.add_directive("benchmark-table", BenchmarkTable)


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

"""numpydoc docstrings, with runnable Examples, for every public name.

Checked: every estimator exported by ``sklearn_meanfield`` (and its public
methods), and every class and function in ``__all__`` of the shared modules
the documentation's API reference lists.  The Examples sections run as
doctests in the default test suite (``--doctest-modules --pyargs``); here we
check that they exist and contain code.  The test is strict on purpose: a
missing section is a failure to fix in the docstring, not an expected failure.
"""

import importlib
import inspect

import pytest
from numpydoc.docscrape import ClassDoc, FunctionDoc
from numpydoc.validate import validate

import sklearn_meanfield

SHARED_MODULES = (
    "sklearn_meanfield._gaussian",
    "sklearn_meanfield._parallel",
    "sklearn_meanfield._progress",
    "sklearn_meanfield._loo",
    "sklearn_meanfield._demo",
    "sklearn_meanfield.diagnostics",
)

# numpydoc validation codes that must not occur.
# GL08 no docstring; SS01 no summary; SS03 summary without a final period;
# PR01 parameter not documented; PR02 unknown parameter documented;
# RT01 no Returns section; EX01 no Examples section.
CLASS_CODES = {"GL08", "SS01", "SS03", "PR01", "PR02", "EX01"}
FUNCTION_CODES = CLASS_CODES | {"RT01"}
METHOD_CODES = {"GL08", "SS01", "PR01", "PR02", "RT01"}


def _estimators():
    return [
        f"sklearn_meanfield.{name}"
        for name in sklearn_meanfield.__all__
        if inspect.isclass(getattr(sklearn_meanfield, name))
    ]


def _shared():
    names = []
    for module_name in SHARED_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                names.append(f"{module_name}.{name}")
    return names


def _methods():
    names = []
    for path in _estimators():
        cls = getattr(sklearn_meanfield, path.rsplit(".", 1)[1])
        for name, member in vars(cls).items():
            # Public methods the class defines (scikit-learn documents the
            # methods it adds, such as the set_*_request family).
            if name.startswith("_") or not inspect.isfunction(member):
                continue
            names.append(f"{path}.{name}")
    return names


def _errors(path, codes):
    return [
        f"{code}: {message}"
        for code, message in validate(path)["errors"]
        if code in codes
    ]


def _examples_have_code(doc):
    return any(line.lstrip().startswith(">>>") for line in doc["Examples"])


@pytest.mark.parametrize("path", _estimators())
def test_estimator_docstring(path):
    assert not _errors(path, CLASS_CODES)
    doc = ClassDoc(getattr(sklearn_meanfield, path.rsplit(".", 1)[1]))
    for section in ("Parameters", "Attributes", "References"):
        assert doc[section], f"{path}: no {section} section"
    assert _examples_have_code(doc), f"{path}: Examples without code"


@pytest.mark.parametrize("path", _methods())
def test_estimator_method_docstring(path):
    assert not _errors(path, METHOD_CODES)


@pytest.mark.parametrize("path", _shared())
def test_shared_docstring(path):
    module_name, name = path.rsplit(".", 1)
    obj = getattr(importlib.import_module(module_name), name)
    codes = CLASS_CODES if inspect.isclass(obj) else FUNCTION_CODES
    assert not _errors(path, codes)
    doc = ClassDoc(obj) if inspect.isclass(obj) else FunctionDoc(obj)
    assert _examples_have_code(doc), f"{path}: Examples without code"


def test_the_checks_can_fail():
    # The validation sees a missing Examples section and undocumented
    # parameters: the tests above are not vacuous.
    codes = {code for code, _ in validate(f"{__name__}._undocumented")["errors"]}
    assert {"EX01", "PR01", "RT01"} <= codes


def _undocumented(x):
    """Return x."""
    return x

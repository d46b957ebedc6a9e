import io
import re
import warnings

from sklearn.exceptions import ConvergenceWarning

import sklearn_meanfield
from sklearn_meanfield import _demo


def test_demo_covers_every_exported_estimator():
    covered = {case.estimator for case in _demo._cases()}
    exported = {name for name in sklearn_meanfield.__all__ if name != "__version__"}
    assert exported <= covered


def test_demo_quick_prints_a_row_per_estimator():
    out = io.StringIO()
    rows = _demo.run(quick=True, out=out)
    text = out.getvalue()
    exported = [n for n in sklearn_meanfield.__all__ if n != "__version__"]
    if not exported:
        assert "no estimator yet" in text
        assert rows == []
        return
    assert [r["estimator"] for r in rows] == [
        c.estimator for c in _demo._cases() if c.estimator in exported
    ]
    for row in rows:
        assert row["estimator"] in text and row["peer"] in text
        assert row["seconds"] > 0 and row["peer_seconds"] > 0


def test_demo_summarises_convergence_warnings_instead_of_printing_each():
    # The quick HMC chains (30 draws) cannot pass R-hat: every fold warns.
    # The demo collects those warnings into one line with the case's note;
    # none escapes (the filter would raise).
    out = io.StringIO()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        _demo.run(quick=True, out=out, estimators=["HMCNetworkRegressor"])
    text = out.getvalue()
    found = re.search(r"HMCNetworkRegressor: (\d+) ConvergenceWarnings, e\.g\. ", text)
    assert found and int(found.group(1)) >= 4  # the fit and the 3 folds
    assert "the defaults reach split R-hat" in text

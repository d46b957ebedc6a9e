import io

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

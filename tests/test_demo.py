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
    assert "the defaults with max_samples='auto' reach split R-hat" in text


def test_quick_table_names_the_shortened_settings_and_full_table_does_not():
    # A reader of the quick table must see that it is a smoke run: a
    # "quick-mode settings" column with each case's shortened settings, and
    # the closing line.  The full table has neither.
    quick_rows = [
        dict(
            dataset="diabetes",
            metric="mse",
            estimator="HMCNetworkRegressor",
            cv=3720.0,
            loo=3172.0,
            seconds=0.5,
            peer="BayesianRidge",
            peer_cv=3497.0,
            peer_seconds=0.01,
            quick_note="2 chains x 30+30 draws",
        )
    ]
    out = io.StringIO()
    _demo._print_table(quick_rows, 3, out, quick=True)
    lines = out.getvalue().splitlines()
    header = next(line for line in lines if line.startswith("data set"))
    row = next(line for line in lines if line.startswith("diabetes"))
    assert header.rstrip().endswith("quick-mode settings")
    assert row.rstrip().endswith("2 chains x 30+30 draws")
    assert "not the comparison" in out.getvalue()
    out = io.StringIO()
    _demo._print_table([dict(quick_rows[0], quick_note="")], 5, out)
    assert "quick-mode settings" not in out.getvalue()
    assert "not the comparison" not in out.getvalue()


def test_quick_mode_notes_every_case_whose_settings_differ_from_full():
    # The cases whose builders change more than the data and folds in quick
    # mode (HMC chains, RBM epochs, the GP's starting kernel) carry a note;
    # the note says what differs.
    cases = {case.estimator: case for case in _demo._cases()}
    for name, case in cases.items():
        changed = repr(case.make(True)) != repr(case.make(False)) or repr(
            case.make_peer(True)
        ) != repr(case.make_peer(False))
        assert bool(case.quick_note) == changed, name


def test_quick_gp_peer_is_not_stuck_at_the_length_scale_bound():
    # From length scale 1, Laplace's optimiser can run to the bound (1e5) on
    # the quick folds and predict the majority class (CV about 0.76); from the
    # demo's start both GPs score like the perceptron (0.97-0.98).
    rows = _demo.run(
        quick=True, out=io.StringIO(), estimators=["TAPGaussianProcessClassifier"]
    )
    assert rows[0]["peer_cv"] > 0.95 and rows[0]["cv"] > 0.95


def test_quick_mlp_peer_does_not_overfit_the_small_folds():
    # An unregularised network with more hidden units than the 100-point
    # quick folds support overfits them to several times BayesianRidge's CV
    # MSE; the demo's peer (four hidden units, L-BFGS) stays within a factor
    # 2.  L-BFGS from one random start lands in a kernel-dependent optimum,
    # so the bound separates the two regimes rather than pinning a score.
    from sklearn.linear_model import BayesianRidge

    case = next(c for c in _demo._cases() if c.estimator == "EnsembleLearningRegressor")
    X, y = case.load(True)
    peer = _demo._cv_score(case.make_peer(True), X, y, "mse", 3)
    ridge = _demo._cv_score(BayesianRidge(), X, y, "mse", 3)
    assert peer < 2 * ridge

"""Progress of long fits: every estimator reports through the shared reporter.

With ``verbose=1`` each exported estimator prints progress lines, and every
line it prints comes from :class:`sklearn_meanfield._progress.ProgressReporter`
(the reporter's calls are recorded and must account for every printed line:
no ad-hoc prints); with ``verbose=0`` nothing is printed.  The TAP estimators
report every mean-field sweep at ``verbose=2``.
"""

import io
import re
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from test_common import FAST_PARAMS, public_estimator_classes
from test_common import small_data as _data

from sklearn_meanfield import (
    BetheRBM,
    TAPGaussianProcessClassifier,
    TAPPerceptronClassifier,
)
from sklearn_meanfield._progress import ProgressReporter

LINE = re.compile(r"^\[.+?\] .+ \(\d+\.\ds\)$")

# What each estimator's verbose=1 output must mention (the list: HMC
# iteration, acceptance and R-hat; restarts' bound; RBM epochs with the
# log-likelihood; the GP optimiser's evidence; the perceptron's sweeps).
EXPECTED = {
    "HMCNetworkRegressor": ("iteration", "acceptance", "R-hat"),
    "EnsembleLearningRegressor": ("bound",),
    "BetheRBM": ("epoch", "log-likelihood"),
    "TAPGaussianProcessClassifier": ("log evidence",),
    "TAPPerceptronClassifier": ("sweeps",),
}


def _instance(cls, verbose):
    params = dict(FAST_PARAMS.get(cls.__name__, {}))
    if cls is TAPGaussianProcessClassifier:
        params["optimizer"] = "fmin_l_bfgs_b"  # the optimiser reports at verbose=1
    est = cls(**params)
    extra = {"verbose": verbose}
    if "n_jobs" in est.get_params():
        extra["n_jobs"] = 1  # everything in this process, where capsys sees it
    return est.set_params(**extra)


@pytest.fixture
def reporter_calls(monkeypatch):
    """Record every call of the shared reporter that prints a line."""
    calls = []
    original = ProgressReporter.__call__

    def recording(self, level, message, *args):
        if self.verbose >= level:
            calls.append((self.prefix, level, message % args if args else message))
        return original(self, level, message, *args)

    monkeypatch.setattr(ProgressReporter, "__call__", recording)
    return calls


def _fit(estimator):
    X, y = _data(estimator)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return clone(estimator).fit(X, y)


CLASSES = public_estimator_classes()


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_verbose_fit_reports_through_the_shared_reporter(cls, capsys, reporter_calls):
    _fit(_instance(cls, verbose=1))
    lines = [line for line in capsys.readouterr().out.splitlines() if line]
    assert lines, f"{cls.__name__} printed nothing at verbose=1"
    # Every printed line is one reporter call, in order, in the reporter's format.
    assert len(lines) == len(reporter_calls)
    for line, (prefix, level, text) in zip(lines, reporter_calls):
        assert LINE.match(line), line
        assert line.startswith(f"[{prefix}] {text} (")
        assert level == 1
    for word in EXPECTED[cls.__name__]:
        assert any(word in line for line in lines), (word, lines)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_silent_at_verbose_zero(cls, capsys, reporter_calls):
    _fit(_instance(cls, verbose=0))
    captured = capsys.readouterr()
    assert captured.out == ""
    assert reporter_calls == []


def test_rbm_reports_one_line_per_epoch(capsys):
    model = _instance(BetheRBM, verbose=1).set_params(n_iter=4)
    _fit(model)
    epochs = [line for line in capsys.readouterr().out.splitlines() if "epoch" in line]
    assert [int(re.search(r"epoch (\d+)", line).group(1)) for line in epochs] == [
        1,
        2,
        3,
        4,
    ]


@pytest.mark.parametrize(
    "cls",
    [TAPPerceptronClassifier, TAPGaussianProcessClassifier],
    ids=lambda c: c.__name__,
)
def test_tap_sweeps_reported_at_verbose_two(cls, capsys, reporter_calls):
    model = _instance(cls, verbose=2)
    if cls is TAPGaussianProcessClassifier:
        model.set_params(optimizer=None)
    fitted = _fit(model)
    lines = capsys.readouterr().out.splitlines()
    sweeps = [line for line in lines if "sweep" in line and "residual" in line]
    # One line per sweep of the final solve at least (n_iter_ sweeps).
    assert len(sweeps) >= fitted.n_iter_ >= 1
    assert len(lines) == len(reporter_calls)
    assert any(level == 2 for _, level, _ in reporter_calls)


def test_reporter_levels_format_and_stream():
    stream = io.StringIO()
    reporter = ProgressReporter(verbose=1, prefix="X", stream=stream)
    assert reporter.enabled(1) and not reporter.enabled(2)
    reporter(1, "step %d of %d, value %.2f", 3, 10, np.pi)
    reporter(2, "hidden at verbose=1")
    reporter(1, "no arguments: %d stays")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    assert LINE.match(lines[0]) and lines[0].startswith(
        "[X] step 3 of 10, value 3.14 ("
    )
    assert lines[1].startswith("[X] no arguments: %d stays (")
    silent = io.StringIO()
    ProgressReporter(verbose=None, prefix="Y", stream=silent)(1, "nothing")
    assert silent.getvalue() == ""


class _Recorder:
    """A scikit-learn FitCallback that records the hooks it sees."""

    def __init__(self):
        self.events = []

    def setup(self, estimator, context):
        self.events.append(("setup", context.task_name))

    def on_fit_task_begin(self, estimator, context):
        self.events.append(("begin", context.task_name, context.task_id))

    def on_fit_task_end(self, estimator, context):
        self.events.append(("end", context.task_name, context.task_id))
        return False

    def teardown(self, estimator, context):
        self.events.append(("teardown", context.task_name))


def _toy_estimator_class():
    sklearn_callback = pytest.importorskip("sklearn.callback")
    from sklearn.base import BaseEstimator

    from sklearn_meanfield._progress import fit_progress

    class Toy(sklearn_callback.CallbackSupportMixin, BaseEstimator):
        def __init__(self, n_steps=3, verbose=0):
            self.n_steps = n_steps
            self.verbose = verbose

        def fit(self, X, y=None):
            with fit_progress(self, self.verbose, max_steps=self.n_steps) as report:
                for k in range(self.n_steps):
                    report.step(1, "step %d", k)
            self.fitted_ = True
            return self

    return Toy


def test_fit_progress_drives_sklearn_callbacks(capsys):
    Toy = _toy_estimator_class()
    recorder = _Recorder()
    Toy(n_steps=3, verbose=1).set_callbacks(recorder).fit(np.zeros((2, 1)))
    assert recorder.events == [
        ("setup", "fit"),
        ("begin", "fit", 0),
        ("begin", "step", 0),
        ("end", "step", 0),
        ("begin", "step", 1),
        ("end", "step", 1),
        ("begin", "step", 2),
        ("end", "step", 2),
        ("end", "fit", 0),
        ("teardown", "fit"),
    ]
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" (")[0] for line in lines] == [
        "[Toy] step 0",
        "[Toy] step 1",
        "[Toy] step 2",
    ]
    # Without callbacks the same fit only prints.
    Toy(n_steps=2, verbose=1).fit(np.zeros((2, 1)))
    assert len(capsys.readouterr().out.splitlines()) == 2


class _StopAfter(_Recorder):
    """Records like _Recorder and asks the fit to stop after n epochs."""

    def __init__(self, n_epochs):
        super().__init__()
        self.n_epochs = n_epochs

    def on_fit_task_end(self, estimator, context):
        super().on_fit_task_end(estimator, context)
        return context.task_name == "epoch" and context.task_id + 1 >= self.n_epochs


def test_bethe_rbm_epochs_drive_sklearn_callbacks():
    pytest.importorskip("sklearn.callback")
    X = (np.random.RandomState(0).uniform(size=(30, 6)) < 0.5).astype(float)
    recorder = _Recorder()
    BetheRBM(n_components=3, n_iter=3, random_state=0).set_callbacks(recorder).fit(X)
    assert recorder.events == [
        ("setup", "fit"),
        ("begin", "fit", 0),
        ("begin", "epoch", 0),
        ("end", "epoch", 0),
        ("begin", "epoch", 1),
        ("end", "epoch", 1),
        ("begin", "epoch", 2),
        ("end", "epoch", 2),
        ("end", "fit", 0),
        ("teardown", "fit"),
    ]
    # A callback that stops after two epochs gives exactly the two-epoch model.
    stopped = BetheRBM(n_components=3, n_iter=5, random_state=0)
    stopped.set_callbacks(_StopAfter(2)).fit(X)
    two_epochs = BetheRBM(n_components=3, n_iter=2, random_state=0).fit(X)
    np.testing.assert_array_equal(stopped.components_, two_epochs.components_)
    np.testing.assert_array_equal(
        stopped.intercept_hidden_, two_epochs.intercept_hidden_
    )

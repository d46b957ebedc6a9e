"""Progress of long fits: every estimator reports through the shared reporter.

With ``verbose=1`` each exported estimator prints progress lines, and every
line it prints comes from :class:`sklearn_meanfield._progress.ProgressReporter`
(the reporter's calls are recorded and must account for every printed line:
no ad-hoc prints); with ``verbose=0`` nothing is printed.  The TAP estimators
report every mean-field sweep at ``verbose=2``.

The estimators that speak scikit-learn's callback API (BetheRBM, the HMC and
ensemble regressors, the TAP perceptron) show callbacks a task tree whose
counts match the fitted model, give the same result with and without
callbacks, and stop early where they can.
"""

import copy
import io
import re
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import make_classification
from sklearn.exceptions import ConvergenceWarning
from test_common import FAST_PARAMS, public_estimator_classes
from test_common import small_data as _data

from sklearn_meanfield import (
    BetheRBM,
    EnsembleLearningRegressor,
    HMCNetworkRegressor,
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


# --- scikit-learn callbacks on the parallel estimators --------------------------
#
# Chains, restarts and one-vs-rest problems run in joblib workers, where their
# callback hooks run too.  The recorder below sends what it sees back to the
# main process through scikit-learn's transport (the way ProgressBar and
# ScoringMonitor do), so the task tree is complete whatever the backend.


def _task_path(context):
    """((task_name, task_id), ...) from the root task down to ``context``."""
    path = []
    while context is not None:
        path.append((context.task_name, context.task_id))
        context = context.parent
    return tuple(reversed(path))


class _StopAt:
    """Picklable stop rule: True at the end of a task with this name and path.

    ``parent_ids`` are the ids of the task's ancestors below the root (None
    matches any); the task's own id must be at least ``min_id``.
    """

    def __init__(self, task_name, parent_ids=(), min_id=0):
        self.task_name = task_name
        self.parent_ids = tuple(parent_ids)
        self.min_id = min_id

    def __call__(self, path):
        name, task_id = path[-1]
        if name != self.task_name or task_id < self.min_id:
            return False
        ids = [i for _, i in path[1:-1]]
        return all(want is None or want == i for want, i in zip(self.parent_ids, ids))


class _TreeRecorder:
    """FitCallback recording ``(hook, task path)`` from any process."""

    def __init__(self, stop=None):
        from sklearn.callback._transport import open_listener

        self.events = []
        self.stop = stop
        self._handle = open_listener(self.events.append, owner=self)

    def __getstate__(self):
        # Workers send their events; they never need the recorded ones.
        return {**self.__dict__, "events": []}

    def setup(self, estimator, context):
        pass

    def teardown(self, estimator, context):
        pass

    def _send(self, hook, context):
        from sklearn.callback._transport import send

        send(self._handle, (hook, _task_path(context)))

    def on_fit_task_begin(self, estimator, context):
        self._send("begin", context)

    def on_fit_task_end(self, estimator, context):
        self._send("end", context)
        return bool(self.stop is not None and self.stop(_task_path(context)))

    def tree(self):
        """Children of every task: {path: sorted list of (name, id)}.

        Also checks that every task began once, before it ended once.
        """
        begun, ended = [], []
        for hook, path in self.events:
            (begun if hook == "begin" else ended).append(path)
        assert len(begun) == len(set(begun)) and sorted(begun) == sorted(ended)
        for path in ended:  # parents end after their children (per process)
            assert path[:-1] == () or path[:-1] in set(begun)
        children = {path: [] for path in begun}
        for path in begun:
            if len(path) > 1:
                children[path[:-1]].append(path[-1])
        return {path: sorted(kids) for path, kids in children.items()}


def _callback_api():
    return pytest.importorskip("sklearn.callback")


ROOT = (("fit", 0),)


def _hmc(**params):
    base = dict(FAST_PARAMS["HMCNetworkRegressor"], n_chains=3)
    base.update(params)
    return HMCNetworkRegressor(**base)


def _hmc_blocks(model):
    # Independent of the implementation: a tenth of the iterations per block.
    total = model.n_warmup + model.n_samples
    size = max(total // 10, 1)
    return int(np.ceil(total / size))


def _regression_data():
    return _data(HMCNetworkRegressor())


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_hmc_chains_are_callback_subtasks(n_jobs):
    _callback_api()
    X, y = _regression_data()
    recorder = _TreeRecorder()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        plain = _hmc(n_jobs=1).fit(X, y)
        model = _hmc(n_jobs=n_jobs).set_callbacks(recorder).fit(X, y)
    tree = recorder.tree()
    n_chains = len(model.acceptance_rate_)
    assert tree[ROOT] == [("chain", c) for c in range(n_chains)]
    for c in range(n_chains):
        blocks = tree[ROOT + (("chain", c),)]
        assert blocks == [("iterations", k) for k in range(_hmc_blocks(model))]
    # The callbacks change nothing in the result, whatever n_jobs.
    np.testing.assert_array_equal(model.parameter_draws_, plain.parameter_draws_)
    np.testing.assert_array_equal(model.acceptance_rate_, plain.acceptance_rate_)
    np.testing.assert_array_equal(model.predict(X), plain.predict(X))


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_hmc_stop_keeps_fewer_draws_in_every_chain(n_jobs):
    _callback_api()
    X, y = _regression_data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        full = _hmc(n_jobs=1).fit(X, y)
        # Chain 1 asks to stop after its 7th block of 4 iterations: 28
        # iterations, 8 of them past the 20 of warm-up.
        stop = _StopAt("iterations", parent_ids=(1,), min_id=6)
        stopped = _hmc(n_jobs=n_jobs).set_callbacks(_TreeRecorder(stop)).fit(X, y)
        # A request during warm-up ends the fit at once: the last four
        # warm-up states are the draws, with a ConvergenceWarning.
        early = _StopAt("iterations", parent_ids=(0,), min_id=0)
        with pytest.warns(ConvergenceWarning, match="during warm-up"):
            warm = _hmc(n_jobs=n_jobs).set_callbacks(_TreeRecorder(early)).fit(X, y)
    assert warm.parameter_draws_.shape[0] == 3 * 4
    assert np.all(np.isfinite(warm.predict(X))) and np.isfinite(warm.rhat_)
    n_chains, n_params = 3, full.parameter_draws_.shape[1]
    by_chain = full.parameter_draws_.reshape(n_chains, full.n_draws_, n_params)
    for model, n_kept in [(stopped, 8)]:
        # Every chain keeps the first n_kept draws of the uninterrupted chain.
        expected = by_chain[:, :n_kept].reshape(n_chains * n_kept, n_params)
        np.testing.assert_array_equal(model.parameter_draws_, expected)
        assert model.noise_precision_draws_.shape[0] == n_chains * n_kept
        assert model.acceptance_rate_.shape == (n_chains,)
        assert np.all(np.isfinite(model.predict(X))) and np.isfinite(model.rhat_)


def _ensemble(**params):
    # tol=0: every restart runs its max_iter iterations.
    base = dict(FAST_PARAMS["EnsembleLearningRegressor"], n_restarts=2, tol=0.0)
    base.update(params)
    return EnsembleLearningRegressor(**base)


def _ensemble_fitted_equal(a, b):
    for name in ("mean_", "covariance_", "alpha_", "lambda_", "scores_"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.n_iter_ == b.n_iter_


@pytest.mark.parametrize(
    "covariance, n_jobs", [("full", 1), ("full", 2), ("lowrank", 1)]
)
def test_ensemble_restarts_are_callback_subtasks(covariance, n_jobs):
    _callback_api()
    X, y = _regression_data()
    recorder = _TreeRecorder()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        plain = _ensemble(covariance=covariance, max_iter=2).fit(X, y)
        model = _ensemble(covariance=covariance, max_iter=2, n_jobs=n_jobs)
        model.set_callbacks(recorder).fit(X, y)
    tree = recorder.tree()
    assert tree[ROOT] == [("restart", r) for r in range(model.n_restarts)]
    # With tol=0 no restart converges: each runs n_iter_ = max_iter iterations.
    assert model.n_iter_ == len(model.scores_) == 2
    for r in range(model.n_restarts):
        assert tree[ROOT + (("restart", r),)] == [
            ("iteration", k) for k in range(model.n_iter_)
        ]
    _ensemble_fitted_equal(model, plain)


@pytest.mark.parametrize("covariance", ["full", "lowrank"])
def test_ensemble_stop_ends_each_restart_after_that_iteration(covariance):
    _callback_api()
    X, y = _regression_data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        two = _ensemble(covariance=covariance, max_iter=2).fit(X, y)
    stop = _TreeRecorder(_StopAt("iteration", min_id=1))
    # Stopped by a callback: the best iterate, and a warning that says so.
    with pytest.warns(ConvergenceWarning, match="stopped by a callback"):
        stopped = _ensemble(covariance=covariance, max_iter=50)
        stopped.set_callbacks(stop).fit(X, y)
    # Stopped after its second iteration, every restart is the two-iteration fit.
    _ensemble_fitted_equal(stopped, two)
    tree = stop.tree()
    for r in range(stopped.n_restarts):
        assert len(tree[ROOT + (("restart", r),)]) == 2


def _perceptron_fitted_equal(a, b):
    for name in ("coef_", "intercept_", "loo_proba_"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.n_iter_ == b.n_iter_


def _sweep_lines(text):
    return [
        line for line in text.splitlines() if "sweep" in line and "residual" in line
    ]


@pytest.mark.parametrize("n_classes", [2, 3])
def test_perceptron_problems_and_sweeps_are_callback_subtasks(n_classes, capsys):
    _callback_api()
    X, y = make_classification(
        n_samples=60,
        n_features=4,
        n_informative=3,
        n_redundant=0,
        n_classes=n_classes,
        n_clusters_per_class=1,
        random_state=0,
    )
    # A fixed label noise: one solve per problem (a learned one adds the
    # sweeps of its search to the same solve task).
    params = dict(label_noise=0.05, random_state=0, n_jobs=1)
    plain = TAPPerceptronClassifier(**params).fit(X, y)
    capsys.readouterr()
    recorder = _TreeRecorder()
    model = TAPPerceptronClassifier(**params, verbose=2)
    model.set_callbacks(recorder).fit(X, y)
    printed = _sweep_lines(capsys.readouterr().out)
    tree = recorder.tree()
    n_problems = len(model.coef_)
    assert n_problems == (1 if n_classes == 2 else n_classes)
    assert tree[ROOT] == [("problem", k) for k in range(n_problems)]
    sweeps = []
    for k in range(n_problems):
        # These problems converge: one solve, no incremental restarts.
        problem = ROOT + (("problem", k),)
        assert tree[problem] == [("solve", 0)]
        solve = tree[problem + (("solve", 0),)]
        assert solve == [("sweep", i) for i in range(len(solve))]
        sweeps.append(len(solve))
    # One step per sweep: as many as printed at verbose=2, the longest n_iter_.
    assert sum(sweeps) == len(printed) and max(sweeps) == model.n_iter_
    _perceptron_fitted_equal(model, plain)


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_perceptron_restarts_are_callback_subtasks(n_jobs):
    _callback_api()
    X, y = _data(TAPPerceptronClassifier())
    # Three sweeps are too few: the solve does not converge and the
    # incremental restarts run (in parallel with n_jobs, two classes).
    params = dict(label_noise=0.0, max_iter=3, n_restarts=2, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        plain = TAPPerceptronClassifier(**params).fit(X, y)
        # Records the task tree (stops are tested in test_tap_perceptron.py).
        recorder = _TreeRecorder()
        model = TAPPerceptronClassifier(**params, n_jobs=n_jobs)
        model.set_callbacks(recorder).fit(X, y)
    tree = recorder.tree()
    problem = ROOT + (("problem", 0),)
    assert tree[problem] == [("incremental restarts", 1), ("solve", 0)]
    assert len(tree[problem + (("solve", 0),)]) == 3
    restarts = problem + (("incremental restarts", 1),)
    assert tree[restarts] == [("restart", r) for r in range(params["n_restarts"])]
    for r in range(params["n_restarts"]):
        # Stages of 8, 16, 32 and 60 examples, then the reordered solve,
        # each sweeping at least once.
        assert len(tree[restarts + (("restart", r),)]) >= 5
    _perceptron_fitted_equal(model, plain)


@pytest.mark.parametrize("n_jobs", [1, 2])
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_gpc_runs_evaluations_and_sweeps_are_callback_subtasks(n_jobs, capsys):
    _callback_api()
    X, y = make_classification(
        n_samples=45,
        n_features=4,
        n_informative=3,
        n_redundant=0,
        n_classes=3,
        n_clusters_per_class=1,
        random_state=0,
    )
    params = dict(n_restarts_optimizer=1, random_state=0)
    plain = TAPGaussianProcessClassifier(**params, n_jobs=1).fit(X, y)
    recorder = _TreeRecorder()  # stops are tested in test_tap_gpc.py
    model = TAPGaussianProcessClassifier(**params, n_jobs=n_jobs, verbose=2)
    model.set_callbacks(recorder).fit(X, y)
    printed = _sweep_lines(capsys.readouterr().out)
    tree = recorder.tree()
    assert tree[ROOT] == [("problem", k) for k in range(3)]
    final_sweeps = []
    for k in range(3):
        problem = ROOT + (("problem", k),)
        assert tree[problem] == [
            ("optimiser run", 0),
            ("optimiser run", 1),
            ("solve", 2),
        ]
        for run in range(2):
            evaluations = tree[problem + (("optimiser run", run),)]
            assert evaluations == [("evaluation", i) for i in range(len(evaluations))]
            assert len(evaluations) >= 2
        solve = tree[problem + (("solve", 2),)]
        assert solve == [("sweep", i) for i in range(len(solve))]
        final_sweeps.append(len(solve))
    assert max(final_sweeps) == model.n_iter_
    if n_jobs == 1:  # workers' prints do not reach capsys
        # verbose=2 prints every sweep of every solve, the optimiser's
        # evaluations too: at least the final solves' sweeps.
        assert len(printed) > sum(final_sweeps)
    np.testing.assert_array_equal(model.predict_proba(X), plain.predict_proba(X))
    np.testing.assert_array_equal(model.loo_proba_, plain.loo_proba_)


@pytest.mark.parametrize("in_pipeline", [False, True])
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_gpc_multinomial_is_one_problem_of_callback_subtasks(in_pipeline):
    _callback_api()
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = make_classification(
        n_samples=45, n_features=4, n_informative=3, n_redundant=0, n_classes=3,
        n_clusters_per_class=1, random_state=0,
    )  # fmt: skip
    params = dict(multi_class="multinomial", n_restarts_optimizer=1, random_state=0)
    plain = TAPGaussianProcessClassifier(**params).fit(X, y)
    model = TAPGaussianProcessClassifier(**params)
    if in_pipeline:
        # A meta-estimator's callbacks reach the step's fit as its own.
        recorder = _AutoPropagatedTreeRecorder()
        make_pipeline(StandardScaler(), model).set_callbacks(recorder).fit(X, y)
        root = ROOT + (("fit", 1),)
        plain = make_pipeline(StandardScaler(), plain).fit(X, y)[-1]
    else:
        recorder = _TreeRecorder()
        model.set_callbacks(recorder).fit(X, y)
        root = ROOT
    tree = recorder.tree()
    assert tree[root] == [("problem", 0)]
    problem = root + (("problem", 0),)
    assert tree[problem] == [("optimiser run", 0), ("optimiser run", 1), ("solve", 2)]
    for run in range(2):
        evaluations = tree[problem + (("optimiser run", run),)]
        assert evaluations == [("evaluation", i) for i in range(len(evaluations))]
    np.testing.assert_array_equal(model.loo_proba_, plain.loo_proba_)


# One small fit of each estimator that speaks callbacks, with the name of the
# subtasks of its fit and how many it must have.
def _parallel_cases():
    X, y = _regression_data()
    Xc, yc = _data(TAPPerceptronClassifier())
    return {
        "HMCNetworkRegressor": (_hmc(n_chains=2), X, y, "chain", 2),
        "EnsembleLearningRegressor": (_ensemble(max_iter=2), X, y, "restart", 2),
        "TAPPerceptronClassifier": (
            TAPPerceptronClassifier(random_state=0),
            Xc,
            yc,
            "problem",
            1,
        ),
        "TAPGaussianProcessClassifier": (
            TAPGaussianProcessClassifier(random_state=0),
            Xc,
            yc,
            "problem",
            1,
        ),
    }


PARALLEL = [
    "HMCNetworkRegressor",
    "EnsembleLearningRegressor",
    "TAPPerceptronClassifier",
    "TAPGaussianProcessClassifier",
]


@pytest.mark.parametrize("name", PARALLEL)
def test_progress_bar_runs_across_worker_processes(name, capsys):
    callback = _callback_api()
    pytest.importorskip("rich")  # ProgressBar draws with rich
    model, X, y, _, _ = _parallel_cases()[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        plain = clone(model).fit(X, y)
        shown = clone(model).set_params(n_jobs=2)
        shown.set_callbacks(callback.ProgressBar()).fit(X, y)
    out = capsys.readouterr().out
    assert f"{name} - fit" in out
    np.testing.assert_array_equal(shown.predict(X), plain.predict(X))


class _AutoPropagatedTreeRecorder(_TreeRecorder):
    """Propagated by meta-estimators to the estimators they fit."""

    max_propagation_depth = None


@pytest.mark.parametrize("name", PARALLEL)
def test_callbacks_propagate_from_a_pipeline(name):
    _callback_api()
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model, X, y, subtask, n_subtasks = _parallel_cases()[name]
    recorder = _AutoPropagatedTreeRecorder()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        pipeline = make_pipeline(StandardScaler(), clone(model).set_params(n_jobs=2))
        pipeline.set_callbacks(recorder).fit(X, y)
    tree = recorder.tree()
    # The pipeline's second step is the estimator's fit, merged into the
    # pipeline's tree with the estimator's own subtasks below it.
    assert tree[ROOT] == [("fit", 0), ("fit", 1)]
    assert tree[ROOT + (("fit", 1),)] == [(subtask, k) for k in range(n_subtasks)]


class _HookLog:
    """A stand-in callback context that records which hooks ran."""

    def __init__(self):
        self.calls = []

    def call_on_fit_task_begin(self, estimator, **data):
        self.calls.append("begin")

    def call_on_fit_task_end(self, estimator, **data):
        self.calls.append("end")
        return False


def test_callback_task_as_context_manager_ends_only_on_success():
    from sklearn_meanfield._progress import CallbackTask

    log = _HookLog()
    with CallbackTask(log) as task:
        assert log.calls == ["begin"]
        assert bool(task)
    assert log.calls == ["begin", "end"]

    failed = _HookLog()
    with pytest.raises(ZeroDivisionError), CallbackTask(failed):
        raise ZeroDivisionError("a failing fit")
    assert failed.calls == ["begin"]


def test_hmc_continued_chains_run_the_blocks_left_and_can_stop():
    # warm_start: the chains' subtasks count the blocks of iterations left
    # (blocks of the whole run: 6 of the 60 iterations), and a stop ends
    # the continuation like a fit, keeping a prefix of the whole run's draws.
    _callback_api()
    X, y = _regression_data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        whole = _hmc(n_samples=40).fit(X, y)
        model = _hmc(n_samples=20, warm_start=True).fit(X, y)
        recorder = _TreeRecorder()
        continued = copy.deepcopy(model)
        continued.set_params(n_samples=40).set_callbacks(recorder).fit(X, y)
        # Chain 2 asks to stop after its second block: 48 iterations.
        stop = _StopAt("iterations", parent_ids=(2,), min_id=1)
        model.set_params(n_samples=40, n_jobs=2)
        model.set_callbacks(_TreeRecorder(stop)).fit(X, y)
    tree = recorder.tree()
    for c in range(3):
        assert tree[ROOT + (("chain", c),)] == [("iterations", k) for k in range(4)]
    np.testing.assert_array_equal(continued.parameter_draws_, whole.parameter_draws_)
    by_chain = whole.chain_draws()["parameters"]
    np.testing.assert_array_equal(
        model.chain_draws()["parameters"], by_chain[:, : 48 - 20]
    )
    with pytest.raises(ValueError, match="a callback stopped them early"):
        model.set_params(n_samples=50).fit(X, y)

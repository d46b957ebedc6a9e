"""Reliability under abuse, run on every exported estimator.

Estimators are found through ``sklearn_meanfield.__all__`` (via
``tests/test_common.py``), so a new estimator joins every test here as soon as
it is exported.  The references are scikit-learn's own validation contract
(error type plus a phrase that names the problem), closed-form facts about the
outputs (probabilities in [0, 1] summing to one, finite predictions) and
refits of the same data (determinism, ``n_jobs`` invariance).
"""

import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone, is_classifier, is_regressor
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.utils.validation import check_is_fitted
from test_common import (
    ESTIMATORS,
    _ids,
    assert_sane_outputs,
    draw_for_draw,
    fit_estimator,
    prediction_outputs,
)

import sklearn_meanfield

# Reliability tests use deliberately short or degenerate fits: their
# ConvergenceWarnings are expected (tests about warnings use pytest.warns).
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

# The BetheRBM models binary units: its data must lie in [0, 1].
UNIT_INTERVAL = {"BetheRBM"}


def _is_supervised(estimator):
    return is_classifier(estimator) or is_regressor(estimator)


def _valid_data(estimator, n_samples=30, n_features=4, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.normal(size=(n_samples, n_features))
    if type(estimator).__name__ in UNIT_INTERVAL:
        X = (X > 0).astype(float)
        return X, None
    if is_classifier(estimator):
        y = np.where(
            X[:, 0] + 0.5 * X[:, 1] + 0.3 * rng.normal(size=n_samples) > 0, 1, 0
        )
        return X, y
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=n_samples)
    return X, y


# ---------------------------------------------------------------- bad input


def _bad_inputs(estimator):
    """(case id, X, y, error types, phrase the message must contain)."""
    X, y = _valid_data(estimator)
    supervised = _is_supervised(estimator)
    cases = []

    X_nan = X.copy()
    X_nan[3, 1] = np.nan
    cases.append(("nan_in_X", X_nan, y, ValueError, "NaN"))
    X_inf = X.copy()
    X_inf[2, 0] = np.inf
    cases.append(("inf_in_X", X_inf, y, ValueError, "infinity"))
    cases.append(("empty", X[:0], None if y is None else y[:0], ValueError, "0 sample"))
    cases.append(("3d", X[:, :, None], y, ValueError, "dim 3"))
    cases.append(("complex", X + 1j, y, ValueError, "Complex"))
    strings = np.array([["a", "b", "c", "d"]] * X.shape[0], dtype=object)
    cases.append(("strings", strings, y, ValueError, "convert"))
    if supervised:
        y_nan = np.asarray(y, dtype=float).copy()
        y_nan[0] = np.nan
        if is_classifier(estimator):
            # A NaN label is a label scikit-learn refuses to count as a class.
            cases.append(("nan_in_y", X, y_nan, ValueError, "NaN"))
        else:
            cases.append(("nan_in_y", X, y_nan, ValueError, "NaN"))
        cases.append(
            ("mismatched_lengths", X, y[:-3], ValueError, "inconsistent numbers")
        )
        cases.append(("one_sample", X[:1], y[:1], ValueError, "sample"))
    if type(estimator).__name__ in UNIT_INTERVAL:
        cases.append(("outside_unit_interval", X * 2.0, None, ValueError, "[0, 1]"))
        cases.append(("negative", X - 0.5, None, ValueError, "[0, 1]"))
    return cases


BAD_INPUT_CASES = [
    pytest.param(estimator, *case[1:], id=f"{_ids(estimator)}-{case[0]}")
    for estimator in ESTIMATORS
    for case in _bad_inputs(estimator)
]


@pytest.mark.parametrize("estimator, X, y, error, phrase", BAD_INPUT_CASES)
def test_bad_input_raises_a_clear_error(estimator, X, y, error, phrase):
    with pytest.raises(error) as excinfo:
        fit_estimator(clone(estimator), X, y)
    assert phrase.lower() in str(excinfo.value).lower(), str(excinfo.value)


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=_ids)
def test_sparse_input_is_supported_or_refused_by_tag(estimator):
    X, y = _valid_data(estimator)
    X_sparse = sp.csr_matrix(X)
    if estimator.__sklearn_tags__().input_tags.sparse:
        dense = fit_estimator(clone(estimator), X, y)
        sparse = fit_estimator(clone(estimator), X_sparse, y)
        for name, value in prediction_outputs(dense, X).items():
            np.testing.assert_allclose(
                prediction_outputs(sparse, X_sparse)[name], value
            )
    else:
        with pytest.raises(TypeError, match="[Ss]parse"):
            fit_estimator(clone(estimator), X_sparse, y)


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=_ids)
def test_bad_input_at_predict_time(estimator):
    X, y = _valid_data(estimator)
    fitted = fit_estimator(clone(estimator), X, y)
    method = "transform" if not _is_supervised(fitted) else "predict"
    with pytest.raises(ValueError, match="features"):
        getattr(fitted, method)(X[:, :-1])
    X_nan = X.copy()
    X_nan[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        getattr(fitted, method)(X_nan)


# ------------------------------------------------- degenerate but legal targets


@pytest.mark.parametrize(
    "estimator", [e for e in ESTIMATORS if is_classifier(e)], ids=_ids
)
def test_classifier_given_one_class_raises(estimator):
    X, _ = _valid_data(estimator)
    with pytest.raises(ValueError, match="class"):
        clone(estimator).fit(X, np.ones(X.shape[0]))


@pytest.mark.parametrize(
    "estimator", [e for e in ESTIMATORS if is_regressor(e)], ids=_ids
)
def test_regressor_given_constant_target_predicts_the_constant(estimator):
    X, _ = _valid_data(estimator)
    y = np.full(X.shape[0], 3.25)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("ignore", ConvergenceWarning)
        fitted = clone(estimator).fit(X, y)
        mean, std = fitted.predict(X, return_std=True)
    # A constant target is a well-defined model: the constant, up to the
    # optimiser's tolerance or the sampler's Monte Carlo error, both measured in
    # the unit scale the estimators standardise with when y has no spread.
    np.testing.assert_allclose(mean, 3.25, atol=0.02)
    np.testing.assert_allclose(fitted.loo_prediction_, 3.25, atol=0.02)
    assert fitted.loo_error_ < 0.02**2
    assert np.all(np.isfinite(std)) and np.all(std >= 0)


# ------------------------------------------------------- extreme but valid data


def _extreme_data(estimator, case):
    X, y = _valid_data(estimator, n_samples=40)
    if case == "tiny_scale":
        return X * 1e-8, y
    if case == "huge_scale":
        return X * 1e8, y
    if case == "duplicated_rows":
        X = np.vstack([X, X[:10]])
        return X, None if y is None else np.concatenate([y, y[:10]])
    if case == "float32":
        return X.astype(np.float32), y
    if case == "wide":
        rng = np.random.RandomState(1)
        X_wide = rng.normal(size=(20, 300))
        if type(estimator).__name__ in UNIT_INTERVAL:
            return (X_wide > 0).astype(float), None
        return X_wide, (y[:20] if y is not None else None)
    if case == "separable":
        if not is_classifier(estimator):
            return X, y
        y_sep = (X[:, 0] > 0).astype(int)
        X_sep = X.copy()
        X_sep[:, 0] += np.where(y_sep == 1, 5.0, -5.0)
        return X_sep, y_sep
    raise ValueError(case)


EXTREME_CASES = [
    "tiny_scale",
    "huge_scale",
    "duplicated_rows",
    "float32",
    "wide",
    "separable",
]


@pytest.mark.parametrize("case", EXTREME_CASES)
@pytest.mark.parametrize("estimator", ESTIMATORS, ids=_ids)
def test_extreme_data_gives_finite_outputs_without_warnings(estimator, case):
    if case == "separable" and not is_classifier(estimator):
        pytest.skip("separability is a classification notion")
    X, y = _extreme_data(estimator, case)
    if case == "huge_scale" and type(estimator).__name__ in UNIT_INTERVAL:
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            fit_estimator(clone(estimator), X, y)
        return
    with warnings.catch_warnings():
        # Overflow, invalid values or divisions by zero must not leak out.
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("ignore", ConvergenceWarning)
        fitted = fit_estimator(clone(estimator), X, y)
        assert_sane_outputs(fitted, X)


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=_ids)
def test_rescaling_inputs_does_not_change_a_scale_free_fit(estimator):
    # Estimators that standardise internally give the same model at any input
    # scale; the others must at least stay finite (the test above).
    X, y = _valid_data(estimator, n_samples=40)
    if type(estimator).__name__ not in {
        "HMCNetworkRegressor",
        "EnsembleLearningRegressor",
    }:
        pytest.skip("this estimator's prior is stated in the input's own scale")
    estimator = draw_for_draw(estimator)
    base = prediction_outputs(fit_estimator(clone(estimator), X, y), X)
    scaled = prediction_outputs(fit_estimator(clone(estimator), X * 1e6, y), X * 1e6)
    for name in base:
        np.testing.assert_allclose(scaled[name], base[name], rtol=1e-5, atol=1e-8)


# ------------------------------------------------------------- non-convergence

# Every non-convergence path, with settings (or a patched optimiser) that take
# it and the phrase its ConvergenceWarning must contain.  Keyed by a path name;
# each estimator needs at least one entry.  (BetheRBM's unstable-fixed-point
# path needs hand-set weights: tests/test_bethe_rbm.py covers it.)
NON_CONVERGENCE_PATHS = {
    "perceptron-tap-sweeps": (
        "TAPPerceptronClassifier",
        {"max_iter": 1},
        "did not converge",
    ),
    "gpc-tap-sweeps": (
        "TAPGaussianProcessClassifier",
        {"max_iter": 1, "optimizer": None},
        "did not converge",
    ),
    "gpc-optimiser-stopped": (
        "TAPGaussianProcessClassifier",
        {"optimizer": "fmin_l_bfgs_b"},
        "L-BFGS-B stopped",
    ),
    "hmc-rhat": (
        "HMCNetworkRegressor",
        {"n_samples": 6, "n_warmup": 4, "n_chains": 2},
        "R-hat",
    ),
    "hmc-pareto-k": (
        "HMCNetworkRegressor",
        {"n_samples": 6, "n_warmup": 4, "n_chains": 2},
        "k-hat",
    ),
    "hmc-divergences": (
        "HMCNetworkRegressor",
        {"n_warmup": 0, "n_leapfrog": 10, "n_chains": 2},
        "posterior. increase target_accept (it is 0.8).",
    ),
    "ensemble-phases": (
        "EnsembleLearningRegressor",
        {"max_iter": 1, "inner_max_iter": 2},
        "did not converge",
    ),
    "bethe-message-passing": (
        "BetheRBM",
        {"max_sweeps": 1, "n_iter": 1},
        "did not converge",
    ),
}
_ESTIMATORS_BY_NAME = {type(e).__name__: e for e in ESTIMATORS}


def _start_hmc_at_a_diverging_step_size(monkeypatch):
    """Start the chains at a step size 15 times the default: without
    warm-up to adapt it, most trajectories diverge."""
    import functools

    from sklearn_meanfield.hmc import regressor

    monkeypatch.setattr(
        regressor,
        "ChainSettings",
        functools.partial(regressor.ChainSettings, step_size=3.0),
    )


def _stop_lbfgs_after_one_iteration(monkeypatch):
    """Make the GP classifier's L-BFGS-B give up after one iteration."""
    import scipy.optimize

    from sklearn_meanfield.tap import gpc

    def hurried_minimize(*args, **kwargs):
        kwargs["options"] = {**kwargs.get("options", {}), "maxiter": 1}
        return scipy.optimize.minimize(*args, **kwargs)

    monkeypatch.setattr(gpc, "minimize", hurried_minimize)


@pytest.mark.parametrize("path", sorted(NON_CONVERGENCE_PATHS))
def test_non_convergence_warns_and_still_predicts(path, monkeypatch):
    name, params, phrase = NON_CONVERGENCE_PATHS[path]
    if path == "gpc-optimiser-stopped":
        _stop_lbfgs_after_one_iteration(monkeypatch)
    if path == "hmc-divergences":
        _start_hmc_at_a_diverging_step_size(monkeypatch)
    estimator = clone(_ESTIMATORS_BY_NAME[name]).set_params(**params)
    X, y = _valid_data(estimator, n_samples=40)
    with pytest.warns(ConvergenceWarning) as record:
        fit_estimator(estimator, X, y)
    messages = " ".join(str(w.message) for w in record)
    assert phrase.lower() in messages.lower(), messages
    # An unconverged TAP/EP solve has no cavity leave-one-out estimate: NaN,
    # and the warning says so (never a number its predictions contradict).
    loo_defined = path != "gpc-tap-sweeps"
    if not loo_defined:
        assert np.isnan(estimator.loo_error_) and "leave-one-out" in messages
    assert_sane_outputs(estimator, X, loo_defined=loo_defined)


def test_every_estimator_has_a_non_convergence_path():
    covered = {name for name, _, _ in NON_CONVERGENCE_PATHS.values()}
    assert set(_ESTIMATORS_BY_NAME) <= covered


# ------------------------------------------------------------------ interrupts


class _InterruptAfter:
    """Trace hook that raises KeyboardInterrupt at the n-th package call."""

    def __init__(self, n_calls):
        self.n_calls = n_calls
        self.count = 0

    def __call__(self, frame, event, arg):
        if event == "call" and frame.f_globals.get("__name__", "").startswith(
            "sklearn_meanfield"
        ):
            self.count += 1
            if self.count == self.n_calls:
                raise KeyboardInterrupt
        return None


def _count_package_calls(estimator, X, y):
    counter = _InterruptAfter(n_calls=-1)
    sys.settrace(counter)
    try:
        fit_estimator(estimator, X, y)
    finally:
        sys.settrace(None)
    return counter.count


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=_ids)
def test_interrupted_fit_leaves_estimator_unfitted(estimator):
    X, y = _valid_data(estimator)
    estimator = (
        clone(estimator).set_params(n_jobs=1)
        if "n_jobs" in (estimator.get_params())
        else clone(estimator)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        n_calls = _count_package_calls(clone(estimator), X, y)
        assert n_calls > 10
        # Interrupt early, in the middle and at the very last package call.
        for n in sorted({2, n_calls // 2, (9 * n_calls) // 10, n_calls}):
            interrupted = clone(estimator)
            sys.settrace(_InterruptAfter(n))
            try:
                with pytest.raises(KeyboardInterrupt):
                    fit_estimator(interrupted, X, y)
            finally:
                sys.settrace(None)
            with pytest.raises(NotFittedError):
                check_is_fitted(interrupted)
            # And the estimator is usable afterwards: a plain refit works.
            assert_sane_outputs(fit_estimator(interrupted, X, y), X)


# ------------------------------------------------------------------ memory


def test_gp_classifier_refuses_kernel_matrices_that_do_not_fit_in_memory():
    rng = np.random.RandomState(0)
    n_samples = 2_000_000  # the kernel matrix alone would need 32 TB
    X = rng.normal(size=(n_samples, 1))
    y = (X[:, 0] > 0).astype(int)
    # The exact mode (the default "auto" would fit this sparsely).
    estimator = sklearn_meanfield.TAPGaussianProcessClassifier(
        optimizer=None, n_inducing=None
    )
    with pytest.raises(MemoryError, match=r"TB|GB|GiB|TiB") as excinfo:
        estimator.fit(X, y)
    # The message says how much memory the fit would take.
    assert any(ch.isdigit() for ch in str(excinfo.value))


# ------------------------------------------------------------- many samples


def test_perceptron_on_a_hundred_thousand_samples():
    # Weight space keeps this at O(m N^2): no m x m matrix is formed.  The
    # reference for the free leave-one-out error is the error on fresh data.
    rng = np.random.RandomState(0)
    teacher = rng.normal(size=50)

    def noisy_teacher_data(n_samples):
        X = rng.normal(size=(n_samples, 50))
        y = (X @ teacher > 0).astype(int)
        flipped = rng.uniform(size=n_samples) < 0.05
        y[flipped] = 1 - y[flipped]
        return X, y

    X, y = noisy_teacher_data(100_000)
    X_test, y_test = noisy_teacher_data(20_000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        estimator = sklearn_meanfield.TAPPerceptronClassifier(
            label_noise=0.05, random_state=0
        ).fit(X, y)
        assert_sane_outputs(estimator, X_test[:1000])
        test_error = 1.0 - estimator.score(X_test, y_test)
    # The label noise alone costs 0.05; the estimation error at alpha = 2000
    # is O(1 / alpha), a few thousandths at most.  20,000 test points measure
    # an error near 0.05 with an sd of sqrt(0.05 * 0.95 / 20000) = 0.0015, so
    # 0.045 is three sd below the noise floor; the leave-one-out error on
    # 100,000 points (sd 0.0007) agrees with it within 0.006, over three sd
    # of their difference.
    assert 0.045 < test_error < 0.06
    assert abs(estimator.loo_error_ - test_error) < 0.006

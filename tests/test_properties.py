"""Property-based tests (hypothesis) over random data sets, for every estimator.

For data sets of random shapes, scales and label patterns, every exported
estimator must either fit and give finite outputs (probabilities in [0, 1]
summing to one) or raise the documented ``ValueError``; a fixed
``random_state`` must give identical results on a refit and for ``n_jobs=1``
and ``n_jobs=2``.  Estimators come from ``tests/test_common.py`` (walking
``sklearn_meanfield.__all__``), so a new estimator joins automatically.
"""

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from joblib import parallel_config
from sklearn.base import clone, is_classifier, is_regressor
from sklearn.exceptions import ConvergenceWarning
from test_common import (
    ESTIMATORS,
    _ids,
    assert_sane_outputs,
    draw_for_draw,
    fit_estimator,
    prediction_outputs,
    small_data,
)

UNIT_INTERVAL = {"BetheRBM"}
EXTREME_LOG10_SCALES = [-300, 300, -154, 154, -100, 100]
# The documented refusals of valid but extreme data, by message: regressors
# refuse a target spread outside [1e-150, 1e150] (its squared errors and
# precisions would overflow or underflow); the TAP perceptron refuses inputs
# so small that its N(0, 1) intercept would outweigh them by over 1e77.
DOCUMENTED_SCALE_REFUSALS = {
    "HMCNetworkRegressor": "y has a standard deviation of",
    "EnsembleLearningRegressor": "y has a standard deviation of",
    "TAPPerceptronClassifier": "inputs are too small",
}


def property_settings(max_examples):
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,  # the same examples on every run: CI must not flake
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


@st.composite
def data_sets(draw, estimator):
    n_samples = draw(st.integers(2, 40))
    n_features = draw(st.integers(1, 6))
    # Ordinary scales mostly, and the extremes a double holds.
    log10_scale = draw(
        st.one_of(st.integers(-6, 6), st.sampled_from(EXTREME_LOG10_SCALES))
    )
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.RandomState(seed)
    X = rng.normal(size=(n_samples, n_features)) * 10.0**log10_scale
    if type(estimator).__name__ in UNIT_INTERVAL:
        pattern = draw(st.sampled_from(["binary", "probabilities"]))
        unit = 1.0 / (1.0 + np.exp(-X / 10.0**log10_scale))
        return (unit > 0.5).astype(float) if pattern == "binary" else unit, None
    if is_classifier(estimator):
        # Two classes first: hypothesis favours the first choices, and one
        # class (the documented refusal) must not crowd out real fits.
        n_classes = draw(st.sampled_from([2, 3, 1]))
        pattern = draw(st.sampled_from(["random", "linear", "imbalanced"]))
        if pattern == "random":
            y = rng.randint(n_classes, size=n_samples)
        elif pattern == "linear":
            y = np.digitize(X[:, 0], np.quantile(X[:, 0], [1 / 3, 2 / 3]))
            y = np.minimum(y, n_classes - 1)
        else:
            y = np.zeros(n_samples, dtype=int)
            y[: max(1, n_samples // 10)] = n_classes - 1
        return X, y
    target_scale = 10.0 ** draw(
        st.one_of(st.integers(-4, 4), st.sampled_from(EXTREME_LOG10_SCALES))
    )
    y = (np.sin(X[:, 0] / 10.0**log10_scale) + rng.normal(size=n_samples)) * (
        target_scale
    )
    return X, y


def _fit_or_documented_error(estimator, X, y):
    """Fitted estimator, or None when the fit raised the documented error."""
    n_classes = len(np.unique(y)) if is_classifier(estimator) else None
    try:
        return fit_estimator(estimator, X, y)
    except ValueError as error:
        message = str(error)
        # The documented refusals: one class for a classifier, and data at
        # scales the estimator cannot represent (DOCUMENTED_SCALE_REFUSALS).
        if n_classes == 1:
            assert "class" in message, message
            return None
        phrase = DOCUMENTED_SCALE_REFUSALS.get(type(estimator).__name__)
        if phrase is not None and phrase in message:
            return None
        raise


def _run_property_check(estimator, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("ignore", ConvergenceWarning)
        fitted = _fit_or_documented_error(clone(estimator), X, y)
        if fitted is None:
            return
        outputs = assert_sane_outputs(fitted, X)

        # Deterministic for a fixed random_state, whatever n_jobs is.
        refit = fit_estimator(clone(estimator), X, y)
        for name, value in prediction_outputs(refit, X).items():
            np.testing.assert_array_equal(value, outputs[name], err_msg=name)
        if "n_jobs" in estimator.get_params():
            with parallel_config(backend="threading"):
                parallel = fit_estimator(clone(estimator).set_params(n_jobs=2), X, y)
            for name, value in prediction_outputs(parallel, X).items():
                np.testing.assert_allclose(
                    value, outputs[name], rtol=1e-10, atol=1e-12, err_msg=name
                )


def _check_random_data_sets(estimator, max_examples):
    if "random_state" in estimator.get_params():
        estimator = clone(estimator).set_params(random_state=0)

    @property_settings(max_examples)
    @given(data=data_sets(estimator))
    def check(data):
        X, y = data
        _run_property_check(estimator, X, y)

    check()


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=_ids)
def test_random_data_sets_fit_cleanly_or_raise_the_documented_error(estimator):
    # A handful of examples keeps the default suite quick; the slow test below
    # draws many more.
    _check_random_data_sets(estimator, max_examples=6)


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ESTIMATORS, ids=_ids)
def test_many_random_data_sets(estimator):
    _check_random_data_sets(estimator, max_examples=60)


def _scaled_data(estimator, x_scale, y_scale):
    X, y = small_data(estimator)
    X = X[:30, :3] * x_scale
    if y is None:  # BetheRBM: binary data, no scale
        return X / x_scale, None
    y = y[:30]
    return X, (y * y_scale if is_regressor(estimator) else y)


@pytest.mark.parametrize("log10_x", [-300, -154, 154, 300])
@pytest.mark.parametrize("estimator", ESTIMATORS, ids=_ids)
def test_inputs_at_the_extremes_of_the_double_range(estimator, log10_x):
    # A column spread above 1e154 has a square that overflows, one below
    # 1e-154 a square that underflows: the scale must still be right.
    # Finite outputs, deterministic, or the documented refusal.
    X, y = _scaled_data(estimator, 10.0**log10_x, 1.0)
    _run_property_check(estimator, X, y)


@pytest.mark.parametrize("log10_y", [-300, -140, 140, 300])
@pytest.mark.parametrize(
    "estimator", [e for e in ESTIMATORS if is_regressor(e)], ids=_ids
)
def test_targets_at_the_extremes_of_the_double_range(estimator, log10_y):
    X, y = _scaled_data(estimator, 1.0, 10.0**log10_y)
    if abs(log10_y) > 150:
        with pytest.raises(ValueError, match="y has a standard deviation of"):
            fit_estimator(clone(estimator), X, y)
        return
    _run_property_check(estimator, X, y)
    estimator = draw_for_draw(estimator)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fitted = fit_estimator(clone(estimator), X, y)
        unit = fit_estimator(clone(estimator), X, y / 10.0**log10_y)
    # A scale-free fit: the same model in other units.
    np.testing.assert_allclose(
        fitted.predict(X) / 10.0**log10_y, unit.predict(X), rtol=1e-6
    )

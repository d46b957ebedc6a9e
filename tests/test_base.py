"""The shared regressor shell (_base): scaling at any magnitude, weights, y checks.

References are exact rational arithmetic (``fractions``) for the moments, and
the estimators' own fits on transformed data for the shell's behaviour.
"""

import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.exceptions import ConvergenceWarning
from test_common import draw_for_draw

from sklearn_meanfield import EnsembleLearningRegressor, HMCNetworkRegressor
from sklearn_meanfield._base import (
    StandardizedRegressorMixin,
    Standardizer,
    weighted_mean_std,
)

FAST = {
    "HMCNetworkRegressor": HMCNetworkRegressor(
        hidden_layer_size=3,
        n_samples=20,
        n_warmup=20,
        n_leapfrog=10,
        n_chains=2,
        random_state=0,
    ),
    "EnsembleLearningRegressor": EnsembleLearningRegressor(
        hidden_layer_size=3, n_restarts=1, max_iter=3, random_state=0
    ),
}
REGRESSORS = list(FAST.values())


def _ids(estimator):
    return type(estimator).__name__


def exact_moments(column, weights=None):
    """Mean and biased sd of a column, in exact rational arithmetic."""
    values = [Fraction(float(v)) for v in column]
    w = (
        [Fraction(1)] * len(values)
        if weights is None
        else [Fraction(x) for x in weights]
    )
    total = sum(w)
    mean = sum(wi * v for wi, v in zip(w, values)) / total
    var = sum(wi * (v - mean) ** 2 for wi, v in zip(w, values)) / total
    # sqrt of a Fraction far outside the double range: scale by 2**k first.
    k = (var.numerator.bit_length() - var.denominator.bit_length()) // 2
    sd = math.sqrt(float(var / Fraction(4) ** k)) * 2.0**k
    return float(mean), sd


@pytest.mark.parametrize("magnitude", [1e-300, 1e-160, 1.0, 1e160, 1e300])
def test_moments_at_any_magnitude_match_exact_arithmetic(magnitude):
    # The square of 1e160 overflows and that of 1e-160 underflows: the
    # power-of-two rescaling must keep the sd finite and non-zero.
    rng = np.random.RandomState(0)
    data = rng.normal(size=(7, 2)) * magnitude
    data[:, 1] += 3 * magnitude
    mean, std = weighted_mean_std(data)
    for j in range(2):
        ref_mean, ref_sd = exact_moments(data[:, j])
        assert mean[j] == pytest.approx(ref_mean, rel=1e-14, abs=1e-14 * ref_sd)
        assert std[j] == pytest.approx(ref_sd, rel=1e-14)
    scaler = Standardizer(data)
    np.testing.assert_allclose(scaler.scale, std, rtol=0)
    Z = scaler.transform(data)
    np.testing.assert_allclose(Z.mean(axis=0), 0.0, atol=1e-14)
    np.testing.assert_allclose(Z.std(axis=0), 1.0, rtol=1e-14)
    np.testing.assert_allclose(scaler.inverse_mean(Z), data, rtol=1e-14)


def test_opposite_values_near_the_largest_double():
    # x - mean overflows for 1.5e308 - (-1.5e308): the transform divides first.
    data = np.array([[1.5e308], [-1.5e308], [0.0]])
    scaler = Standardizer(data)
    ref_mean, ref_sd = exact_moments(data[:, 0])
    assert scaler.scale[0] == pytest.approx(ref_sd, rel=1e-14)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        Z = scaler.transform(data)
        back = scaler.inverse_mean(Z)
    np.testing.assert_allclose(Z[:, 0], (data[:, 0] - ref_mean) / ref_sd, rtol=1e-14)
    np.testing.assert_allclose(back, data, rtol=1e-14)


def test_weighted_moments_are_those_of_repeated_rows():
    rng = np.random.RandomState(1)
    data = rng.normal(size=(6, 3)) * [1.0, 1e200, 1e-200]
    weights = np.array([0, 3, 1, 2, 0, 5])
    mean, std = weighted_mean_std(data, weights.astype(float))
    repeated = np.repeat(data, weights, axis=0)
    for j in range(3):
        ref_mean, ref_sd = exact_moments(repeated[:, j])
        assert std[j] == pytest.approx(ref_sd, rel=1e-14)
        assert mean[j] == pytest.approx(ref_mean, rel=1e-13, abs=1e-14 * ref_sd)
    # The scaler drops zero-weight rows entirely: their values do not matter.
    moved = data.copy()
    moved[weights == 0] = 1e300
    a, b = Standardizer(data, weights), Standardizer(moved, weights)
    np.testing.assert_array_equal(a.mean, b.mean)
    np.testing.assert_array_equal(a.scale, b.scale)


def test_constant_columns_scale_with_their_magnitude():
    data = np.array([[1e-6, 0.0, -3e200, 7.0], [1e-6, 0.0, -3e200, 7.0 + 1e-15]])
    scaler = Standardizer(data)
    assert scaler.constant.tolist() == [True, True, True, True]
    # The exact value is the mean; the magnitude (at most 1e150) is the scale.
    assert scaler.mean[0] == 1e-6 and scaler.mean[2] == -3e200
    np.testing.assert_array_equal(scaler.scale[:3], [1e-6, 1.0, 1e150])
    assert Standardizer(np.full((3, 1), -1e-200)).scale[0] == 1e-150
    # Targets: the largest relative spread that still counts as constant.
    targets = Standardizer(data, constant_scale=1e-12)
    np.testing.assert_allclose(targets.scale, [1e-18, 1e-12, 1e150, 7e-12])
    assert scaler.scale[3] == pytest.approx(7.0)
    np.testing.assert_array_equal(scaler.transform(data)[:, :3], 0.0)


def test_standardised_values_are_clipped_not_infinite():
    scaler = Standardizer(np.array([[0.0], [1e-300]]))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        Z = scaler.transform(np.array([[1e300], [-1e300]]))
    np.testing.assert_array_equal(Z[:, 0], [1e150, -1e150])


class _MeanRegressor(StandardizedRegressorMixin, RegressorMixin, BaseEstimator):
    """The shell with the simplest model: the weighted mean of y."""

    def fit(self, X, y, sample_weight=None):
        X, y, Xs, Ys, sw = self._validate_weighted_training_data(X, y, sample_weight)
        self.mean_ = self._y_scaler.mean
        return self

    def predict(self, X):
        return self._like_y(np.tile(self.mean_, (len(X), 1)))


def test_shell_validates_sample_weight_like_scikit_learn():
    X, y = np.arange(8.0)[:, None], np.arange(8.0)
    model = _MeanRegressor()
    np.testing.assert_allclose(
        model.fit(X, y, sample_weight=np.arange(8.0)).predict(X[:1]),
        [np.average(y, weights=np.arange(8.0))],
    )
    with pytest.raises(ValueError, match="(?i)negative"):
        model.fit(X, y, sample_weight=-np.ones(8))
    with pytest.raises(ValueError, match="sample_weight"):
        model.fit(X, y, sample_weight=np.ones(5))
    with pytest.raises(ValueError, match="zero"):
        model.fit(X, y, sample_weight=np.zeros(8))
    with pytest.raises(ValueError, match="NaN"):
        model.fit(X, y, sample_weight=np.full(8, np.nan))


def test_shell_keeps_one_output_one_dimensional():
    X, y = np.arange(8.0)[:, None], np.arange(8.0)
    model = _MeanRegressor()
    assert model.fit(X, y[:, None]).predict(X).shape == (8,)
    assert model.fit(X, np.column_stack([y, y])).predict(X).shape == (8, 2)


@pytest.mark.parametrize("estimator", REGRESSORS, ids=_ids)
def test_numeric_strings_are_numbers_and_other_strings_are_refused(estimator):
    rng = np.random.RandomState(2)
    X = rng.normal(size=(20, 2))
    y = np.round(X[:, 0] + 0.1 * rng.normal(size=20), 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        as_numbers = clone(estimator).fit(X, y)
        as_strings = clone(estimator).fit(X, y.astype(str))
    np.testing.assert_array_equal(as_strings.predict(X), as_numbers.predict(X))
    words = y.astype(str).astype(object)
    words[3] = "three"
    # Refused at validation, with a message naming the value, not deep in
    # the fit.
    with pytest.raises(ValueError, match="y must be numeric.*three"):
        clone(estimator).fit(X, words)


@pytest.mark.parametrize("estimator", REGRESSORS, ids=_ids)
def test_target_spread_whose_square_overflows_is_refused_with_its_column(estimator):
    rng = np.random.RandomState(3)
    X = rng.normal(size=(20, 2))
    Y = rng.normal(size=(20, 2))
    Y[0, 1] = 1e200  # its spread squared overflows
    with pytest.raises(ValueError, match="column 1 of y .* 2.18e\\+199, above"):
        clone(estimator).fit(X, Y)
    # A spread whose square underflows: the noise precision in y's units
    # would divide by zero.
    tiny = rng.normal(size=20) * 1e-200
    sd = f"{exact_moments(tiny)[1]:.3g}"
    with pytest.raises(ValueError, match=f"column 0 of y .* {sd}, below"):
        clone(estimator).fit(X, tiny)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("estimator", REGRESSORS, ids=_ids)
def test_input_column_with_a_huge_spread_is_used_not_dropped(estimator):
    # The column's sd must not overflow to inf (standardised values 0, the
    # input ignored).  Scaling an input changes nothing in a fit that
    # standardises, whatever the scale.
    rng = np.random.RandomState(4)
    X = rng.uniform(-2, 2, size=(30, 1))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=30)
    estimator = draw_for_draw(estimator)  # the two fits compared draw for draw
    base = clone(estimator).fit(X, y)
    huge = clone(estimator).fit(X * 1e200, y)
    np.testing.assert_allclose(huge.predict(X * 1e200), base.predict(X), rtol=1e-6)
    assert np.std(huge.predict(X * 1e200)) > 0.3


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("value", [1e-6, -2.5e100, 0.0])
@pytest.mark.parametrize("estimator", REGRESSORS, ids=_ids)
def test_constant_target_is_predicted_with_a_spread_that_scales(estimator, value):
    # A constant target has no scale to standardise by: the predictions must
    # be the constant, with a spread on its scale, not the unit scale.
    rng = np.random.RandomState(5)
    X = rng.normal(size=(30, 2))
    y = np.full(30, value)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        model = clone(estimator).fit(X, y)
        mean, std = model.predict(X, return_std=True)
    unit = abs(value) if value else 1.0
    if isinstance(estimator, HMCNetworkRegressor):
        # The posterior is symmetric about a constant: the mean is exact.
        np.testing.assert_array_equal(mean, value)
        np.testing.assert_array_equal(model.loo_prediction_, value)
        assert model.loo_error_ == 0.0
    else:
        np.testing.assert_allclose(mean, value, rtol=0, atol=0.01 * unit)
        np.testing.assert_allclose(model.loo_prediction_, value, atol=0.01 * unit)
    # The spread is a fraction of the magnitude (the noise the data allow),
    # where BayesianRidge, on y = 1e-6, reports sd 5e-4 = 500 times it.
    assert np.all(std > 0) and np.all(std < 0.5 * unit)

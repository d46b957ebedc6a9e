"""The GP classifier's defaults hold on data nobody tuned them to.

The default kernel starts on the data's own scale (the median distance
between the inputs), a search that ends at a kernel blind to the inputs is
repeated from there, an amplitude bound that holds the evidence back is
lifted, and a model that predicts no better than the majority class says so.
"""

import warnings

import numpy as np
import pytest
from scipy.spatial.distance import pdist
from sklearn.datasets import load_digits, load_iris, load_wine, make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF
from sklearn.gaussian_process.kernels import ConstantKernel as C
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from sklearn_meanfield import TAPGaussianProcessClassifier
from sklearn_meanfield.tap._kernels import (
    BINDING_AMPLITUDE_SLOPE,
    DEFAULT_AMPLITUDE_BOUNDS,
    LIFTED_AMPLITUDE_BOUNDS,
    data_length_scale,
    ignores_inputs,
    with_length_scale,
)

IGNORE_BOUNDS = "ignore:The optimal value found:sklearn.exceptions.ConvergenceWarning"
IGNORE_MAJORITY = (
    "ignore:The fitted model predicts:sklearn.exceptions.ConvergenceWarning"
)


def _default_kernel_with_amplitude_bounds(X, bounds):
    """The default kernel, written out, with the amplitude within ``bounds``:
    a kernel of one's own, which no search goes beyond."""
    ell = data_length_scale(X)
    return C(1.0, bounds) * RBF(ell, (ell / 1e3, ell * 1e3))


def _high_dimensional(n=300, d=100, informative=10):
    X, y = make_classification(
        n_samples=n,
        n_features=d,
        n_informative=informative,
        n_redundant=0,
        random_state=0,
    )
    return StandardScaler().fit_transform(X), y


def test_data_length_scale_is_the_median_distance_at_any_scale():
    X = np.random.RandomState(0).normal(size=(120, 7))
    expected = np.median(pdist(X))
    assert data_length_scale(X) == pytest.approx(expected, rel=1e-12)
    # Scaled data: scaled distances, without overflow or underflow.
    for factor in (1e-300, 1e300):
        assert data_length_scale(factor * X) == pytest.approx(
            factor * expected, rel=1e-12
        )
    # Every row the same: no distance to speak of.
    assert data_length_scale(np.ones((5, 3))) == 1.0


def test_length_scales_are_set_from_the_data_within_their_bounds():
    X = np.random.RandomState(1).normal(size=(60, 4))
    ell = data_length_scale(X)
    kernel = C(2.0) * RBF([1.0, 1.0, 1.0, 1.0], (1e-3, 1e5))
    rescaled = with_length_scale(kernel, X)
    np.testing.assert_allclose(rescaled.k2.length_scale, np.full(4, ell))
    assert rescaled.k1.constant_value == 2.0
    clipped = with_length_scale(C(1.0) * RBF(1.0, (1e-3, ell / 2)), X)
    assert clipped.k2.length_scale == pytest.approx(ell / 2)
    # No free length scale: nothing to set.
    assert with_length_scale(C(1.0) * RBF(1.0, "fixed"), X) is None


def test_default_kernel_starts_at_the_median_distance_and_ignores_the_scale():
    X, y = _high_dimensional(80, 30)
    model = TAPGaussianProcessClassifier(optimizer=None).fit(X, y)
    assert model.kernel_.k2.length_scale == pytest.approx(data_length_scale(X))
    # The default kernel scales with the data: any unit gives the same model.
    for factor in (1e-300, 1e-3, 1e3, 1e300):
        scaled = TAPGaussianProcessClassifier(optimizer=None).fit(factor * X, y)
        np.testing.assert_allclose(
            scaled.predict_proba(factor * X), model.predict_proba(X), rtol=1e-9
        )
        assert scaled.loo_error_ == model.loo_error_


# A kernel of one's own keeps scikit-learn's bound warnings.
@pytest.mark.filterwarnings(IGNORE_BOUNDS)
@pytest.mark.parametrize("kernel", [None, C(1.0) * RBF(1.0)])
def test_a_search_blind_to_the_inputs_is_repeated_from_the_data_scale(kernel):
    # 100 standardised features: distances of about 14, so from length scale
    # 1 every off-diagonal kernel value is exp(-100) and the evidence is
    # n log(1/2), whatever the labels (each point on its own, probit of a
    # zero-mean field), with no gradient in the length scale.
    X, y = _high_dimensional()
    blind = C(1.0) * RBF(1.0)
    assert ignores_inputs(blind, X)
    model = TAPGaussianProcessClassifier(kernel=kernel, random_state=0).fit(X, y)
    white_noise = model.log_marginal_likelihood(blind.theta)
    assert white_noise == pytest.approx(len(y) * np.log(0.5), rel=1e-9)
    assert not ignores_inputs(model.kernel_, X)
    # A better model than white noise exists, and the fit found it: the
    # evidence of 10 informative features of 300 points is tens of nats up.
    assert model.log_marginal_likelihood_value_ > white_noise + 5.0
    assert model.loo_error_ < 0.4  # white noise: 0.5 or worse


def test_a_model_no_better_than_the_majority_class_warns():
    # Inputs that carry nothing: every row the same, so every model is
    # constant and predicts the majority class, leave-one-out or not.
    X = np.zeros((30, 2))
    y = np.r_[np.zeros(20), np.ones(10)]
    with pytest.warns(ConvergenceWarning, match="no better than the majority class"):
        model = TAPGaussianProcessClassifier(random_state=0).fit(X, y)
    assert model.loo_error_ == pytest.approx(1 / 3)


def test_a_model_that_learned_something_does_not_warn_of_the_majority():
    X, y = _high_dimensional(120, 5, informative=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        model = TAPGaussianProcessClassifier(random_state=0).fit(X, y)
    assert model.loo_error_ < 0.3


@pytest.mark.slow
def test_standardised_digits_are_classified_not_collapsed():
    # The full digits' 0-against-rest problem, standardised: 64 features on
    # distances of about 10.
    X, y = load_digits(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    X_train, X_test, y_train, y_test = train_test_split(
        X, y == 0, random_state=0, stratify=y
    )
    model = TAPGaussianProcessClassifier(random_state=0).fit(X_train, y_train)
    assert not ignores_inputs(model.kernel_, X_train)
    assert model.loo_error_ < 0.02  # the majority class: 0.099
    assert model.score(X_test, y_test) > 0.98


@pytest.mark.filterwarnings(IGNORE_BOUNDS)
@pytest.mark.filterwarnings(IGNORE_MAJORITY)
@pytest.mark.parametrize("factor", [1e-300, 1e300])
def test_inputs_beyond_a_kernels_reach_are_named(factor):
    # RBF's length scale within (1e-5, 1e5) cannot come near distances of
    # 1e300 or 1e-300: the warning names the data's scale and the bounds.
    X, y = _high_dimensional(60, 2, informative=2)
    with pytest.warns(ConvergenceWarning, match="median distance between the inputs"):
        TAPGaussianProcessClassifier(C(1.0) * RBF(1.0), random_state=0).fit(
            factor * X, y
        )
    # The default kernel goes where the data are: no such warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        model = TAPGaussianProcessClassifier(random_state=0).fit(factor * X, y)
    assert model.score(factor * X, y) > 0.8


@pytest.mark.parametrize("returned", [[np.nan, 0.0], [0.0, np.inf], [0.0]])
def test_an_optimizer_returning_no_valid_point_is_refused(returned):
    X, y = _high_dimensional(40, 2, informative=2)

    def optimizer(objective, initial_theta, bounds):
        return np.array(returned), 0.0

    with pytest.raises(ValueError, match="optimizer returned the hyperparameters"):
        TAPGaussianProcessClassifier(optimizer=optimizer).fit(X, y)


@pytest.mark.parametrize("theta", [1.0, [[0.0, 0.0]], [np.nan, 0.0]])
def test_log_marginal_likelihood_refuses_a_theta_that_is_no_point(theta):
    X, y = _high_dimensional(40, 2, informative=2)
    model = TAPGaussianProcessClassifier(optimizer=None).fit(X, y)
    with pytest.raises(ValueError, match="theta must be a one-dimensional"):
        model.log_marginal_likelihood(theta)


def test_a_stalled_warm_start_is_solved_again_from_cold():
    # Fractional weights: the line search's first step leaves the sites of
    # the start far behind, and EP warm-started from them stalls where a cold
    # start converges; the evaluation is solved again, not rejected.
    from sklearn_meanfield._progress import CallbackTask
    from sklearn_meanfield.tap import _binary_gpc

    X, y = make_classification(n_samples=60, n_features=4, random_state=0)
    weights = np.linspace(0.2, 3.0, 60)
    t = 2.0 * y - 1.0
    kernel = C(1.0) * RBF(3.0)
    options = TAPGaussianProcessClassifier()._options()
    far = np.log([14.24**2, 0.09737])
    search = _binary_gpc._Search(
        X, t, kernel, options, weights, CallbackTask(), kernel.theta
    )
    search(kernel.theta)
    cold = search.evaluate(far, [], True)
    assert cold.solution.converged
    value, gradient = search(far)
    # The evidence of the cold start, to the search's tolerance (the error
    # of an EP evidence is of the order of the residual's square).
    assert -value == pytest.approx(cold.value, rel=1e-4)


@pytest.mark.filterwarnings(IGNORE_BOUNDS)
def test_an_amplitude_bound_that_holds_the_evidence_back_is_lifted():
    # Raw wine, class 1 against the rest: features on scales from 0.1 to
    # 1000 (proline), which the isotropic kernel sees mostly through the
    # widest; at the amplitude's default bound the evidence still climbs
    # steeply, and beyond it the length scale settles longer.
    X, y = load_wine(return_X_y=True)
    y = y == 1
    model = TAPGaussianProcessClassifier(random_state=0).fit(X, y)
    capped, lifted = (
        TAPGaussianProcessClassifier(
            _default_kernel_with_amplitude_bounds(X, bounds), random_state=0
        ).fit(X, y)
        for bounds in (DEFAULT_AMPLITUDE_BOUNDS, LIFTED_AMPLITUDE_BOUNDS)
    )
    # The capped fit ends at the bound with the evidence climbing there.
    amplitude = capped.kernel_.k1.constant_value
    assert amplitude == pytest.approx(DEFAULT_AMPLITUDE_BOUNDS[1])
    _, gradient = capped.log_marginal_likelihood(
        capped.kernel_.theta, eval_gradient=True
    )
    assert gradient[0] > BINDING_AMPLITUDE_SLOPE
    # The default fit went on to the optimum a search within the lifted
    # bounds finds, to the optimiser's tolerance on the evidence, and its
    # kernel carries the bounds it was fitted within.
    assert model.kernel_.k1.constant_value > DEFAULT_AMPLITUDE_BOUNDS[1]
    assert model.kernel_.k1.constant_value_bounds == LIFTED_AMPLITUDE_BOUNDS
    assert model.log_marginal_likelihood_value_ == pytest.approx(
        lifted.log_marginal_likelihood_value_, abs=1e-3
    )
    assert model.log_marginal_likelihood_value_ > (
        capped.log_marginal_likelihood_value_ + 5.0
    )


def test_a_saturated_amplitude_stays_at_its_bound():
    # Setosa against the rest is separable: the amplitude ends at its bound,
    # where the saturated likelihood leaves the evidence nearly flat, and the
    # fit is the one of the same kernel written out, bounds included.
    X, y = load_iris(return_X_y=True)
    y = y == 0
    model = TAPGaussianProcessClassifier(random_state=0).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        own = TAPGaussianProcessClassifier(
            _default_kernel_with_amplitude_bounds(X, DEFAULT_AMPLITUDE_BOUNDS),
            random_state=0,
        ).fit(X, y)
    _, gradient = model.log_marginal_likelihood(model.kernel_.theta, eval_gradient=True)
    assert 0.0 < gradient[0] < BINDING_AMPLITUDE_SLOPE
    assert model.kernel_.k1.constant_value == pytest.approx(DEFAULT_AMPLITUDE_BOUNDS[1])
    assert model.kernel_.k1.constant_value_bounds == DEFAULT_AMPLITUDE_BOUNDS
    np.testing.assert_array_equal(model.kernel_.theta, own.kernel_.theta)
    assert model.log_marginal_likelihood_value_ == own.log_marginal_likelihood_value_

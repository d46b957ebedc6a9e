"""Peer tests: GaussianProcessClassifier's tests, ported to the TAP classifier.

scikit-learn's ``gaussian_process/tests/test_gpc.py`` checks what a GP
classifier owes its users: predictions consistent with probabilities, an
optimiser that raises the evidence and stops at a stationary point, the
evidence at any ``theta`` (cloned or not), restarts, custom optimisers,
multi-class problems run in parallel, warnings for hyperparameters on their
bounds, the refusal of a ``CompoundKernel``, the latent function's moments,
structured (non-vector) inputs.  Each test is rewritten here for
:class:`~sklearn_meanfield.TAPGaussianProcessClassifier` with
``likelihood="logistic"`` (the peer's likelihood: the same model, another
approximation of its posterior), on the same data.

Where the peer marks its evidence-gradient test as a known failure (its
Laplace gradient is inexact), the TAP gradient is held to the test: it is
exact at an EP fixed point.
"""

import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import (
    RBF,
    CompoundKernel,
    GenericKernelMixin,
    Hyperparameter,
    Kernel,
    StationaryKernelMixin,
    WhiteKernel,
)
from sklearn.gaussian_process.kernels import ConstantKernel as C

from sklearn_meanfield import TAPGaussianProcessClassifier


def _gpc(**params):
    return TAPGaussianProcessClassifier(likelihood="logistic", **params)


X = np.atleast_2d(np.linspace(0, 10, 30)).T
X2 = np.atleast_2d([2.0, 4.0, 5.5, 6.5, 7.5]).T
fX = np.sin(X).ravel()
y = np.array(fX > 0, dtype=int)
y_mc = np.empty(y.shape, dtype=int)  # three classes
y_mc[fX < -0.35] = 0
y_mc[(fX >= -0.35) & (fX < 0.35)] = 1
y_mc[fX > 0.35] = 2

fixed_kernel = RBF(length_scale=1.0, length_scale_bounds="fixed")
kernels = [
    RBF(length_scale=0.1),
    fixed_kernel,
    RBF(length_scale=1.0, length_scale_bounds=(1e-3, 1e3)),
    C(1.0, (1e-2, 1e2)) * RBF(length_scale=1.0, length_scale_bounds=(1e-3, 1e3)),
]
non_fixed_kernels = [kernel for kernel in kernels if kernel != fixed_kernel]
SEEDS = [0, 1]


def _fit(model, X_fit, y_fit):
    # Several of these kernels run to a bound on 30 separable points.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return model.fit(X_fit, y_fit)


class _CharacterCountKernel(GenericKernelMixin, StationaryKernelMixin, Kernel):
    """A kernel on strings: the dot product of their character counts plus a
    baseline (positive semi-definite as a sum of two such kernels)."""

    def __init__(self, baseline=0.5, baseline_bounds="fixed"):
        self.baseline = baseline
        self.baseline_bounds = baseline_bounds

    @property
    def hyperparameter_baseline(self):
        return Hyperparameter("baseline", "numeric", self.baseline_bounds)

    def _counts(self, X):
        alphabet = sorted({c for s in X for c in s} | set(self._alphabet))
        return np.array([[s.count(c) for c in alphabet] for s in X], dtype=float)

    def __call__(self, X, Y=None, eval_gradient=False):
        Y = X if Y is None else Y
        self._alphabet = sorted({c for s in list(X) + list(Y) for c in s})
        K = self._counts(X) @ self._counts(Y).T + self.baseline
        if eval_gradient:
            return K, np.empty((len(X), len(X), 0))
        return K

    def diag(self, X):
        self._alphabet = []
        return np.einsum("ij,ij->i", self._counts(X), self._counts(X)) + self.baseline

    def clone_with_theta(self, theta):
        cloned = clone(self)
        cloned.theta = theta
        return cloned


@pytest.mark.parametrize("kernel", kernels)
def test_predict_consistent(kernel):
    # For two classes predict says classes_[1] exactly where its probability
    # is above one half.
    gpc = _fit(_gpc(kernel=kernel), X, y)
    np.testing.assert_array_equal(gpc.predict(X), gpc.predict_proba(X)[:, 1] >= 0.5)


def test_predict_consistent_structured():
    X_strings = ["A", "AB", "B"]
    y_strings = np.array([True, False, True])
    gpc = _fit(_gpc(kernel=_CharacterCountKernel()), X_strings, y_strings)
    np.testing.assert_array_equal(
        gpc.predict(X_strings), gpc.predict_proba(X_strings)[:, 1] >= 0.5
    )


@pytest.mark.parametrize("kernel", non_fixed_kernels)
def test_lml_improving(kernel):
    gpc = _fit(_gpc(kernel=kernel), X, y)
    assert gpc.log_marginal_likelihood(gpc.kernel_.theta) > (
        gpc.log_marginal_likelihood(kernel.theta)
    )


@pytest.mark.parametrize("kernel", kernels)
def test_lml_precomputed(kernel):
    gpc = _fit(_gpc(kernel=kernel), X, y)
    np.testing.assert_almost_equal(
        gpc.log_marginal_likelihood(gpc.kernel_.theta), gpc.log_marginal_likelihood(), 7
    )


@pytest.mark.parametrize("kernel", kernels)
def test_lml_without_cloning_kernel(kernel):
    gpc = _fit(_gpc(kernel=kernel), X, y)
    input_theta = np.ones(gpc.kernel_.theta.shape, dtype=np.float64)
    gpc.log_marginal_likelihood(input_theta, clone_kernel=False)
    np.testing.assert_almost_equal(gpc.kernel_.theta, input_theta, 7)


@pytest.mark.parametrize("kernel", non_fixed_kernels)
def test_converged_to_local_maximum(kernel):
    gpc = _fit(_gpc(kernel=kernel), X, y)
    _, lml_gradient = gpc.log_marginal_likelihood(gpc.kernel_.theta, True)
    assert np.all(
        (np.abs(lml_gradient) < 1e-4)
        | (gpc.kernel_.theta == gpc.kernel_.bounds[:, 0])
        | (gpc.kernel_.theta == gpc.kernel_.bounds[:, 1])
    )


@pytest.mark.parametrize("kernel", non_fixed_kernels)
@pytest.mark.parametrize("length_scale", np.logspace(-3, 3, 13))
def test_lml_gradient(kernel, length_scale):
    # The analytic gradient against central differences, over six decades of
    # length scales.  The EP evidence is stationary in the sites, so its
    # gradient is exact at the fixed point: the mean-field equations are
    # solved tightly, and the difference step suits their accuracy.
    kernel = clone(kernel)
    name = next(name for name in kernel.get_params() if name.endswith("length_scale"))
    kernel.set_params(**{name: length_scale})
    gpc = _gpc(kernel=kernel, optimizer=None, tol=1e-12, max_iter=2000).fit(X, y)
    _, lml_gradient = gpc.log_marginal_likelihood(kernel.theta, eval_gradient=True)
    h = 1e-5
    numeric = [
        (
            gpc.log_marginal_likelihood(kernel.theta + h * e)
            - gpc.log_marginal_likelihood(kernel.theta - h * e)
        )
        / (2 * h)
        for e in np.eye(len(kernel.theta))
    ]
    np.testing.assert_allclose(lml_gradient, numeric, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_starts(seed):
    # More restarts never lower the evidence of the chosen theta (the
    # restarts of n + 1 runs include those of n).
    n_samples, n_features = 25, 2
    rng = np.random.RandomState(seed)
    X_random = rng.randn(n_samples, n_features) * 2 - 1
    y_random = (np.sin(X_random).sum(axis=1) + np.sin(3 * X_random).sum(axis=1)) > 0
    kernel = C(1.0, (1e-2, 1e2)) * RBF(
        length_scale=[1e-3] * n_features, length_scale_bounds=[(1e-4, 1e2)] * n_features
    )
    last_lml = -np.inf
    for n_restarts_optimizer in range(5):
        gp = _fit(
            _gpc(
                kernel=kernel,
                n_restarts_optimizer=n_restarts_optimizer,
                random_state=seed,
            ),
            X_random,
            y_random,
        )
        lml = gp.log_marginal_likelihood(gp.kernel_.theta)
        assert lml > last_lml - np.finfo(np.float32).eps
        last_lml = lml


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kernel", non_fixed_kernels)
def test_custom_optimizer(kernel, seed):
    # An optimiser that tries ten random points, on three classes.
    def optimizer(obj_func, initial_theta, bounds):
        rng = np.random.RandomState(seed)
        theta_opt = initial_theta
        func_min = obj_func(initial_theta, eval_gradient=False)
        for _ in range(10):
            theta = np.atleast_1d(
                rng.uniform(np.maximum(-2, bounds[:, 0]), np.minimum(1, bounds[:, 1]))
            )
            f = obj_func(theta, eval_gradient=False)
            if f < func_min:
                theta_opt, func_min = theta, f
        return theta_opt, func_min

    gpc = _fit(_gpc(kernel=kernel, optimizer=optimizer), X, y_mc)
    assert gpc.log_marginal_likelihood(gpc.kernel_.theta) >= (
        gpc.log_marginal_likelihood(kernel.theta)
    )


@pytest.mark.parametrize("kernel", kernels)
def test_multi_class(kernel):
    gpc = _fit(_gpc(kernel=kernel), X, y_mc)
    y_prob = gpc.predict_proba(X2)
    np.testing.assert_almost_equal(y_prob.sum(1), 1)
    np.testing.assert_array_equal(np.argmax(y_prob, 1), gpc.predict(X2))


@pytest.mark.parametrize("kernel", kernels)
def test_multi_class_n_jobs(kernel):
    gpc = _fit(_gpc(kernel=kernel), X, y_mc)
    gpc_2 = _fit(_gpc(kernel=kernel, n_jobs=2), X, y_mc)
    np.testing.assert_almost_equal(gpc.predict_proba(X2), gpc_2.predict_proba(X2))


def _bound_message(name, side, bound):
    verb = "Decreasing" if side == "lower" else "Increasing"
    return (
        f"The optimal value found for dimension {name[1]} of parameter {name[0]} "
        f"is close to the specified {side} bound {bound}. {verb} the bound and "
        "calling fit again may find a better value."
    )


def _bound_warnings(kernel, X_fit):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        _gpc(kernel=kernel).fit(X_fit, y)
    assert [r.category for r in record] == [ConvergenceWarning] * len(record)
    # Only the bounds' warnings: a kernel held away from what the data ask
    # for may also leave a model no better than the majority class, which
    # warns too.
    return [r.message.args[0] for r in record if "bound" in r.message.args[0]]


def test_warning_bounds():
    gpc = _gpc(kernel=RBF(length_scale_bounds=[1e-5, 1e-3]))
    with pytest.warns(
        ConvergenceWarning, match=_bound_message(("length_scale", 0), "upper", 0.001)
    ):
        gpc.fit(X, y)


@pytest.mark.xfail(
    strict=True,
    reason="Evidence approximations: on these data the evidence of the length "
    "scale is flat beyond the lower bound 1e3 (both the Laplace and the TAP "
    "evidence rise by 3e-5 from 1e3 to 1e5). Laplace's optimiser stops at the "
    "bound, which warns; the exact TAP gradient there (+6e-5 per log unit) moves "
    "L-BFGS-B inside, to 2.4e3, where its gradient tolerance stops it, so "
    "only the noise level's bound warns.",
)
def test_warning_bounds_sum_kernel_flat_length_scale():
    kernel_sum = WhiteKernel(noise_level_bounds=[1e-5, 1e-3]) + RBF(
        length_scale_bounds=[1e3, 1e5]
    )
    assert _bound_warnings(kernel_sum, X) == [
        _bound_message(("k1__noise_level", 0), "upper", 0.001),
        _bound_message(("k2__length_scale", 0), "lower", 1000.0),
    ]


def test_warning_bounds_sum_kernel():
    # The same sum, with a length scale held below what the data ask for:
    # one warning per hyperparameter on its bound, in the kernel's order.
    kernel_sum = WhiteKernel(noise_level_bounds=[1e-5, 1e-3]) + RBF(
        length_scale_bounds=[1e-2, 1e-1]
    )
    assert _bound_warnings(kernel_sum, X) == [
        _bound_message(("k1__noise_level", 0), "upper", 0.001),
        _bound_message(("k2__length_scale", 0), "upper", 0.1),
    ]


def test_warning_bounds_per_dimension():
    kernel_dims = RBF(length_scale=[1.0, 2.0], length_scale_bounds=[1e1, 1e2])
    assert _bound_warnings(kernel_dims, np.tile(X, 2)) == [
        _bound_message(("length_scale", 0), "upper", 100.0),
        _bound_message(("length_scale", 1), "upper", 100.0),
    ]


def test_gpc_fit_error():
    with pytest.raises(ValueError, match="kernel cannot be a CompoundKernel"):
        _gpc(kernel=CompoundKernel(0)).fit(X, y)


@pytest.mark.parametrize("kernel", kernels)
def test_gpc_latent_mean_and_variance_shape(kernel):
    gpc = _fit(_gpc(kernel=kernel), X, y)
    latent_mean, latent_variance = gpc.latent_mean_and_variance(X)
    assert latent_mean.shape == (X.shape[0],)
    assert latent_variance.shape == (X.shape[0],)


def test_gpc_latent_mean_and_variance_complain_on_more_than_2_classes():
    gpc = _fit(_gpc(kernel=RBF()), X, y_mc)
    with pytest.raises(
        ValueError,
        match="Returning the mean and variance of the latent function f "
        "is only supported for binary classification",
    ):
        gpc.latent_mean_and_variance(X)


def test_latent_mean_and_variance_works_on_structured_kernels():
    X_strings = ["A", "AB", "B"]
    y_strings = np.array([True, False, True])
    gpc = _fit(_gpc(kernel=_CharacterCountKernel()), X_strings, y_strings)
    mean, var = gpc.latent_mean_and_variance(X_strings)
    assert mean.shape == var.shape == (3,)
    # The negative label pulls its string's field below the others' (a count
    # kernel cannot make it negative: "AB" counts as "A" plus "B"), and the
    # labels shrink the prior variance.
    assert mean[1] < min(mean[0], mean[2]) and mean[0] == pytest.approx(mean[2])
    assert np.all(var < _CharacterCountKernel().diag(X_strings))

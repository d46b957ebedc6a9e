"""The multinomial probit GP classifier on the FITC prior (sparse mode).

References are computed independently: the posterior by inverting the dense
``nC x nC`` precision of the explicit FITC covariance ``Q + diag(K - Q)``,
nested EP by the exact mode's code on that matrix, the evidence's gradient
by finite differences, leave-one-out by refits with the kernel and the
inducing inputs held, and a model whose inducing inputs are its training
inputs by the exact model.
"""

import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, Matern
from sklearn.gaussian_process.kernels import ConstantKernel as C
from sklearn.utils.estimator_checks import parametrize_with_checks
from test_tap_multinomial import _classes, _dense_posterior, _params
from test_tap_sparse_gpc import (
    _central_differences,
    _check_the_learned_fit_is_the_fixed_one,
)

from sklearn_meanfield import TAPGaussianProcessClassifier
from sklearn_meanfield.tap import _multinomial as mn
from sklearn_meanfield.tap._multinomial_gpc import sparse_multinomial_peak_bytes
from sklearn_meanfield.tap._sparse import FITCPosterior
from sklearn_meanfield.tap._sparse_multinomial import (
    SparseCoupledPrior,
    effective_sites,
    sparse_multinomial_gradient,
)


def _fitc(kernel, X, Z, block_size=None):
    """The sparse prior in blocks and its explicit ``n x n`` covariance."""
    fitc = FITCPosterior.from_kernel(kernel, X, Z, jitter=0.0, block_size=block_size)
    return fitc, fitc.U @ fitc.U.T + np.diag(fitc.d)


def _sites(rng, labels, n_classes):
    sites = mn.InnerSites(
        rng.exponential(size=(len(labels), n_classes - 1)),
        rng.normal(size=(len(labels), n_classes - 1)),
    )
    sites.beta[0, 0] = 0.0  # a factor not yet updated
    return mn.outer_sites(sites, labels, n_classes)


def test_effective_sites_integrate_the_fitc_diagonal_out():
    # The site on a_i = f_i - e_i, e_i ~ N(0, d I): its precision
    # (Pi^-1 + d)^-1 = Pi (I + d Pi)^-1 and precision-mean (I + d Pi)^-1 nu,
    # by dense algebra; d = 0 leaves the site as it is.
    rng = np.random.RandomState(0)
    labels = rng.randint(4, size=6)
    pi, nu_f, _ = _sites(rng, labels, 4)
    d = np.r_[0.0, rng.exponential(size=5)]
    g, h, log_det = effective_sites(pi, nu_f, d)
    for i in range(6):
        Pi = mn.site_precisions(pi[i : i + 1])[0]
        shrink = np.eye(4) + d[i] * Pi
        G = mn.site_precisions(g[i : i + 1])[0]
        np.testing.assert_allclose(G, Pi @ np.linalg.inv(shrink), atol=1e-12)
        np.testing.assert_allclose(h[i], np.linalg.solve(shrink, nu_f[i]), atol=1e-12)
        assert log_det[i] == pytest.approx(np.linalg.slogdet(shrink)[1], abs=1e-12)
    np.testing.assert_allclose(g[0], pi[0], rtol=1e-15)


@pytest.mark.parametrize("n_classes, block_size", [(3, None), (4, 5)])
def test_sparse_posterior_equals_the_dense_inverse_of_the_fitc_prior(
    n_classes, block_size
):
    rng = np.random.RandomState(n_classes)
    X, Z = rng.normal(size=(17, 2)), rng.normal(size=(5, 2))
    fitc, K = _fitc(C(2.0) * RBF(1.0), X, Z, block_size)
    labels = rng.randint(n_classes, size=17)
    pi, nu_f, _ = _sites(rng, labels, n_classes)
    posterior = SparseCoupledPrior(fitc).solve(pi, nu_f)
    mean, cov, log_det = _dense_posterior(K, pi, nu_f)
    np.testing.assert_allclose(posterior.mean, mean, atol=1e-10)
    np.testing.assert_allclose(posterior.cov, cov, atol=1e-10)
    assert posterior.log_det == pytest.approx(log_det, abs=1e-9)


def test_prediction_is_the_cavity_of_a_training_point():
    # The FITC prior links a new latent value to the data through the
    # inducing values and its own independent e: predicting at a training
    # input from the posterior without that row's site is the row's cavity
    # (the site removed from its marginal).
    rng = np.random.RandomState(1)
    kernel = C(1.5) * RBF(0.8)
    X, Z = rng.normal(size=(15, 2)), rng.normal(size=(4, 2))
    fitc, _ = _fitc(kernel, X, Z)
    labels = rng.randint(3, size=15)
    pi, nu_f, _ = _sites(rng, labels, 3)
    full = SparseCoupledPrior(fitc).solve(pi, nu_f)
    cavity_mean, cavity_cov = mn.cavities(full.mean, full.cov, pi, nu_f)
    for i in (0, 7):
        without = pi.copy(), nu_f.copy()
        without[0][i], without[1][i] = 0.0, 0.0
        # A zero row has no site (and S = 0): a negligible precision stands in.
        without[0][i, 0] = 1e-300
        rest = SparseCoupledPrior(fitc).solve(*without)
        mean, cov = rest.predict(kernel(Z, X[i : i + 1]), kernel.diag(X[i : i + 1]))
        np.testing.assert_allclose(mean[0], cavity_mean[i], atol=1e-10)
        np.testing.assert_allclose(cov[0], cavity_cov[i], atol=1e-10)


def test_nested_ep_on_the_sparse_prior_is_nested_ep_on_the_fitc_matrix():
    rng = np.random.RandomState(2)
    X, labels = _classes(30, 3, 2)
    Z = X[rng.choice(30, 6, replace=False)] + 0.1
    fitc, K = _fitc(C(3.0) * RBF(1.2), X, Z, block_size=8)
    weights = rng.randint(1, 4, size=30).astype(float)
    sparse = mn.multinomial_ep(
        SparseCoupledPrior(fitc), labels, 3, weights=weights, tol=1e-11, max_iter=2000
    )
    dense = mn.multinomial_ep(K, labels, 3, weights=weights, tol=1e-11, max_iter=2000)
    assert sparse.converged and dense.converged
    np.testing.assert_allclose(sparse.tau, dense.tau, atol=1e-8)
    np.testing.assert_allclose(sparse.nu, dense.nu, atol=1e-8)
    assert sparse.log_evidence == pytest.approx(dense.log_evidence, abs=1e-8)
    np.testing.assert_allclose(sparse.loo_proba(), dense.loo_proba(), atol=1e-8)


def _nested_ep_on_fitc(kernel, X, Z, labels, weights):
    """Nested EP, converged to 1e-12, on the FITC prior of ``kernel`` at
    ``Z`` in blocks of 7 rows."""
    fitc = FITCPosterior.from_kernel(kernel, X, Z, jitter=0.0, block_size=7)
    return mn.multinomial_ep(
        SparseCoupledPrior(fitc), labels, 3, weights=weights, tol=1e-12,
        max_iter=2000,
    )  # fmt: skip


def _gradient_problem():
    """25 rows of 3 classes, 5 inducing inputs off the rows, and weights on
    both sides of one (copies of a site above one, the tempered likelihood
    below one)."""
    X, labels = _classes(25, 3, 3)
    weights = np.random.RandomState(0).uniform(0.3, 2.5, size=25)
    return X, labels, X[::5] + 0.2, weights


@pytest.mark.parametrize(
    "kernel",
    [
        C(2.0) * RBF(0.9),
        C(1.5) * RBF([0.8, 1.3, 1.1, 0.9]),
        C(1.2) * Matern(1.0, nu=1.5),
    ],
    ids=["rbf", "ard", "matern"],
)
def test_evidence_gradient_matches_finite_differences(kernel):
    # At a fixed point the evidence is stationary in the sites: its gradient
    # in theta is the Gaussian part's, through K_mm, K_nm and the FITC
    # diagonal.  Central differences of step h err by O(h^2) and by EP's
    # tolerance over h.
    X, labels, Z, weights = _gradient_problem()

    def log_evidence(theta):
        at = kernel.clone_with_theta(theta)
        return _nested_ep_on_fitc(at, X, Z, labels, weights).log_evidence

    solution = _nested_ep_on_fitc(kernel, X, Z, labels, weights)
    gradient, _ = sparse_multinomial_gradient(solution, kernel, Z)
    numeric = _central_differences(log_evidence, kernel.theta)
    np.testing.assert_allclose(gradient, numeric, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "kernel",
    [
        C(1.5) * RBF(1.2),
        C(1.5) * RBF([1.2, 0.8, 1.5, 1.0]),
        C(1.5) * Matern(1.2, nu=1.5),
    ],
    ids=["rbf", "ard", "matern"],
)
def test_evidence_gradient_in_the_inducing_inputs_matches_finite_differences(kernel):
    # The inducing inputs enter K_mm and K_nm only; the same adjoints give
    # their gradient.  Central differences as for theta.
    X, labels, Z, weights = _gradient_problem()

    def log_evidence(z):
        at = z.reshape(Z.shape)
        return _nested_ep_on_fitc(kernel, X, at, labels, weights).log_evidence

    solution = _nested_ep_on_fitc(kernel, X, Z, labels, weights)
    theta, Z_gradient = sparse_multinomial_gradient(solution, kernel, Z, inducing=True)
    theta_only, none = sparse_multinomial_gradient(solution, kernel, Z)
    np.testing.assert_allclose(theta, theta_only, rtol=1e-12)
    assert none is None
    numeric = _central_differences(log_evidence, Z.ravel()).reshape(Z.shape)
    np.testing.assert_allclose(Z_gradient, numeric, rtol=1e-5, atol=1e-6)


def test_inducing_inputs_at_the_training_inputs_give_the_exact_model():
    # Z = X: Q = K and the FITC diagonal vanishes, up to K_mm's nugget
    # (1e-8 of the mean variance), so the model is the exact one to about
    # that nugget times the posterior's sensitivity.
    X, y = _classes(40, 3, 5)
    exact = TAPGaussianProcessClassifier(**_params(n_inducing=None)).fit(X, y)
    sparse = TAPGaussianProcessClassifier(**_params(inducing_points=X)).fit(X, y)
    np.testing.assert_array_equal(sparse.inducing_points_, X)
    assert exact.inducing_points_ is None
    np.testing.assert_allclose(
        sparse.predict_proba(X), exact.predict_proba(X), atol=1e-6
    )
    np.testing.assert_allclose(sparse.loo_proba_, exact.loo_proba_, atol=1e-6)
    assert sparse.log_marginal_likelihood_value_ == pytest.approx(
        exact.log_marginal_likelihood_value_, abs=1e-5
    )


def test_learned_kernel_and_log_marginal_likelihood_with_its_gradient():
    # The optimiser's kernel maximises the sparse evidence: its gradient
    # there is zero to the optimiser's tolerance (no hyperparameter at a
    # bound), and log_marginal_likelihood's gradient at another theta is
    # the finite difference of its values.
    X, y = _classes(60, 3, 6)
    model = TAPGaussianProcessClassifier(
        C(1.0, (1e-2, 1e2)) * RBF(1.0, (1e-2, 1e2)),
        multi_class="multinomial",
        n_inducing=10,
        random_state=0,
    ).fit(X, y)
    assert model.inducing_points_.shape == (10, 4)
    value, gradient = model.log_marginal_likelihood(
        model.kernel_.theta, eval_gradient=True
    )
    assert value == pytest.approx(model.log_marginal_likelihood_value_, abs=1e-4)
    assert np.max(np.abs(gradient)) < 1e-2 * (1 + abs(value)) / len(y)
    theta, h = model.kernel_.theta + [0.3, -0.2], 1e-5
    _, gradient = model.log_marginal_likelihood(theta, eval_gradient=True)
    numeric = [
        (
            model.log_marginal_likelihood(theta + h * e)
            - model.log_marginal_likelihood(theta - h * e)
        )
        / (2 * h)
        for e in np.eye(2)
    ]
    np.testing.assert_allclose(gradient, numeric, rtol=1e-4, atol=1e-5)
    proba = model.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(model.loo_proba_.sum(axis=1), 1.0, rtol=1e-12)


def test_leave_one_out_matches_refits_with_the_inducing_inputs_held():
    # The cavity is the model without the row, its other sites held; a refit
    # (same kernel and inducing inputs) lets them move a little, as in the
    # exact mode.
    X, y = _classes(30, 3, 2)
    Z = X[::3]
    model = TAPGaussianProcessClassifier(**_params(inducing_points=Z)).fit(X, y)
    brute = np.empty((len(y), 3))
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        refit = TAPGaussianProcessClassifier(**_params(inducing_points=Z))
        brute[i] = refit.fit(X[keep], y[keep]).predict_proba(X[i : i + 1])[0]
    gap = np.abs(model.loo_proba_ - brute).max(axis=1)
    assert np.all(gap < 0.03) and gap.mean() < 0.01
    brute_error = np.mean(np.argmax(brute, axis=1) != y)
    assert abs(model.loo_error_ - brute_error) <= 1 / len(y) + 1e-12


def test_a_weight_is_a_repeated_site_on_one_fitc_field():
    # A weight w raises a row's site to the power w on its one FITC field
    # (power EP, as the exact mode and the binary sparse mode do); repeated
    # rows get independent diagonal corrections each.  The two agree, and
    # equal the exact weighted model, where the corrections vanish: the
    # inducing inputs at the training inputs.
    X, y = _classes(24, 3, 4)
    w = np.random.RandomState(1).randint(1, 4, len(y))
    X_new = np.random.RandomState(2).normal(size=(10, 4))

    def fit(Z, repeat):
        model = TAPGaussianProcessClassifier(**_params(inducing_points=Z))
        if repeat:
            return model.fit(np.repeat(X, w, axis=0), np.repeat(y, w))
        return model.fit(X, y, sample_weight=w)

    weighted, repeated = fit(X, False), fit(X, True)
    exact = TAPGaussianProcessClassifier(**_params(n_inducing=None))
    exact.fit(X, y, sample_weight=w)
    for other in (repeated, exact):
        np.testing.assert_allclose(
            weighted.predict_proba(X_new), other.predict_proba(X_new), atol=1e-6
        )
        assert weighted.log_marginal_likelihood_value_ == pytest.approx(
            other.log_marginal_likelihood_value_, abs=1e-5
        )
    # With d_i > 0 the models differ: by more than rounding, by less than a
    # different model of the data would.
    Z = X[::4] + 0.05
    gap = np.abs(fit(Z, False).predict_proba(X_new) - fit(Z, True).predict_proba(X_new))
    assert 0.005 < gap.max() < 0.1


def test_restarts_give_the_same_model_for_any_n_jobs():
    X, y = _classes(40, 3, 8)
    params = dict(
        multi_class="multinomial",
        n_inducing=8,
        n_restarts_optimizer=1,
        random_state=0,
    )
    one = TAPGaussianProcessClassifier(**params, n_jobs=1).fit(X, y)
    two = TAPGaussianProcessClassifier(**params, n_jobs=2).fit(X, y)
    np.testing.assert_array_equal(one.inducing_points_, two.inducing_points_)
    np.testing.assert_array_equal(one.kernel_.theta, two.kernel_.theta)
    np.testing.assert_array_equal(one.predict_proba(X), two.predict_proba(X))


@pytest.mark.parametrize("multi_class", ["multinomial", "one_vs_rest"])
def test_a_kernel_without_free_hyperparameters_learns_only_the_inputs(multi_class):
    # Nothing to learn in the kernel: the search is of the inducing inputs
    # alone, from a poor start as above.
    from sklearn.metrics import log_loss

    X, y = _regions(600, 30)
    X_test, y_test = _regions(3000, 40)
    start = np.random.default_rng(0).uniform(-2.0, -1.5, size=(10, 2))
    kernel = C(4.0, "fixed") * RBF(0.7, "fixed")
    losses = {}
    for learn in (False, True):
        model = TAPGaussianProcessClassifier(
            kernel,
            multi_class=multi_class,
            inducing_points=start,
            optimize_inducing_points=learn,
            random_state=0,
        ).fit(X, y)
        losses[learn] = log_loss(y_test, model.predict_proba(X_test))
    learned = np.asarray(model.inducing_points_)
    assert np.max(np.abs(learned - start)) > 0.5
    assert losses[True] < losses[False]
    thetas = [k.theta for k in getattr(model.kernel_, "kernels", [model.kernel_])]
    for theta in thetas:
        np.testing.assert_array_equal(theta, kernel.theta)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("learn", [False, True])
def test_sparse_multinomial_fit_on_a_dask_cluster_equals_the_local_fit(
    monkeypatch, learn
):
    # Under joblib's dask backend the row blocks live on the workers (every
    # sweep and gradient maps over them, the inducing-input search's too),
    # the restarts take turns here: the local model, to rounding.  Blocks of
    # 16 rows (m = 6) give 4 of them.
    pytest.importorskip("distributed")
    from dask_helpers import local_dask_client
    from distributed import get_task_stream
    from joblib import parallel_config

    from sklearn_meanfield.tap import _sparse

    monkeypatch.setattr(_sparse, "_BLOCK_BYTES", 8 * 6 * 16)
    X, y = _classes(60, 3, 9)
    params = dict(
        kernel=C(1.0, (1e-2, 1e2)) * RBF(1.0, (1e-1, 1e1)),
        multi_class="multinomial",
        n_inducing=6,
        n_restarts_optimizer=1,
        random_state=0,
        optimize_inducing_points=learn,
    )
    local = TAPGaussianProcessClassifier(**params, n_jobs=1).fit(X, y)
    with (
        local_dask_client(n_workers=2, threads_per_worker=1) as client,
        parallel_config(backend="dask"),
        get_task_stream(client) as stream,
    ):
        remote = TAPGaussianProcessClassifier(**params).fit(X, y)
    np.testing.assert_allclose(remote.kernel_.theta, local.kernel_.theta, rtol=1e-8)
    np.testing.assert_allclose(
        remote.predict_proba(X), local.predict_proba(X), rtol=1e-8, atol=1e-12
    )
    np.testing.assert_allclose(remote.loo_proba_, local.loo_proba_, atol=1e-8)
    np.testing.assert_allclose(
        remote.inducing_points_, local.inducing_points_, rtol=1e-8, atol=1e-10
    )
    names = {task["key"].split("-")[0] for task in stream.data}
    assert {
        "_whiten_task",
        "_coupled_statistics_task",
        "_coupled_marginals_task",
        "_coupled_gradient_task",
    } <= names


def _regions(n, seed, noise=0.03):
    """Three classes on the square [-2, 2]^2: below the curve
    ``sin(2 x0) + x1^2 = 1``, and above it with x1 positive or negative; a
    share ``noise`` of the labels moved to another class."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, size=(n, 2))
    above = np.sin(2 * X[:, 0]) + X[:, 1] ** 2 > 1.0
    y = np.where(above, np.where(X[:, 1] > 0, 1, 2), 0)
    flip = rng.uniform(size=n) < noise
    y[flip] = (y[flip] + rng.integers(1, 3, size=np.sum(flip))) % 3
    return X, y


def test_learned_inducing_inputs_fall_back_to_the_fixed_fit_exactly():
    # With no point but the start to compare, the fit is the fit with the
    # inputs kept at their start, bit for bit; the joint search starts at
    # the kernel's optimum and the k-means inputs.
    X, y = _regions(150, 0)
    params = dict(multi_class="multinomial", n_inducing=6, random_state=0)
    _check_the_learned_fit_is_the_fixed_one(X, y, params)


@pytest.mark.parametrize("seed", [0, 1])
def test_learning_inducing_inputs_from_a_poor_start_lowers_the_test_loss(seed):
    # Ten inducing inputs started in one corner of the square cannot follow
    # the regions' boundaries; learned, they move out.  The learned model is
    # the one its kernel and inputs give when fixed.
    from sklearn.metrics import log_loss

    X, y = _regions(600, 30 + seed)
    X_test, y_test = _regions(3000, 40 + seed)
    start = np.random.default_rng(seed).uniform(-2.0, -1.5, size=(10, 2))
    losses, models = {}, {}
    for learn in (False, True):
        model = TAPGaussianProcessClassifier(
            multi_class="multinomial",
            inducing_points=start,
            optimize_inducing_points=learn,
            random_state=seed,
        ).fit(X, y)
        losses[learn] = log_loss(y_test, model.predict_proba(X_test))
        models[learn] = model
    learned = models[True]
    assert np.max(np.abs(learned.inducing_points_ - start)) > 0.5
    assert losses[True] < losses[False]
    given = TAPGaussianProcessClassifier(
        learned.kernel_,
        multi_class="multinomial",
        inducing_points=learned.inducing_points_,
        optimizer=None,
    ).fit(X, y)
    np.testing.assert_allclose(
        given.predict_proba(X_test), learned.predict_proba(X_test), atol=1e-12
    )
    np.testing.assert_allclose(given.loo_proba_, learned.loo_proba_, atol=1e-12)


def test_memory_is_checked_before_any_work(monkeypatch):
    # The fit's peak counts the C m x C m precision, its factor and inverse:
    # refused (with the sizes) when it cannot fit.
    from sklearn_meanfield import _memory

    monkeypatch.setattr(_memory, "available_memory_bytes", lambda: 2**20)
    X, y = _classes(30, 3, 0)
    model = TAPGaussianProcessClassifier(multi_class="multinomial", n_inducing=5)
    with pytest.raises(MemoryError, match="sparse multinomial"):
        model.fit(X, y)
    assert sparse_multinomial_peak_bytes(1000, 100, 10) > 8 * 4 * 1000**2


@parametrize_with_checks(
    [
        TAPGaussianProcessClassifier(
            multi_class="multinomial", n_inducing=5, optimizer=None
        )
    ],
    expected_failed_checks=lambda estimator: {
        "check_sample_weight_equivalence_on_dense_data": (
            "FITC model difference: repeated rows get independent FITC "
            "diagonal corrections, a weighted row one field (equal when the "
            "inducing inputs hold the rows: "
            "test_a_weight_is_a_repeated_site_on_one_fitc_field); k-means "
            "centres of repeated and weighted rows differ as well"
        ),
    },
)
def test_scikit_learn_checks(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(clone(estimator))

"""The multinomial probit GP classifier: nested EP and its estimator.

References are computed independently: the posterior by inverting the dense
``nC x nC`` precision, two classes by the binary probit EP they reduce to,
the tilted moments by Monte Carlo with a Gauss-Hermite likelihood, the
evidence's gradient by finite differences, leave-one-out by refits.
"""

import warnings

import numpy as np
import pytest
from numpy.polynomial.hermite_e import hermegauss
from scipy.integrate import quad
from scipy.special import ndtr
from scipy.stats import norm
from sklearn.base import clone
from sklearn.datasets import (
    load_iris,
    load_wine,
    make_classification,
    make_gaussian_quantiles,
)
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF
from sklearn.gaussian_process.kernels import ConstantKernel as C
from sklearn.utils.estimator_checks import parametrize_with_checks

from sklearn_meanfield import TAPGaussianProcessClassifier
from sklearn_meanfield.tap import _multinomial as mn
from sklearn_meanfield.tap._ep import expectation_propagation
from sklearn_meanfield.tap._likelihoods import make_likelihood
from sklearn_meanfield.tap._posterior import KernelPosterior


def _classes(n=30, n_classes=3, seed=0):
    return make_classification(
        n_samples=n,
        n_features=4,
        n_informative=3,
        n_redundant=0,
        n_classes=n_classes,
        n_clusters_per_class=1,
        class_sep=1.0,
        random_state=seed,
    )


def _dense_posterior(K, pi, nu_f):
    """Mean, marginal blocks and ``log|I + K Pi|`` from the dense precision."""
    n, n_classes = pi.shape
    Pi = mn.site_precisions(pi)
    big = np.zeros((n * n_classes, n * n_classes))
    nu = np.zeros(n * n_classes)
    for i in range(n):
        idx = [c * n + i for c in range(n_classes)]
        big[np.ix_(idx, idx)] += Pi[i]
        nu[idx] += nu_f[i]
    K_big = np.kron(np.eye(n_classes), K)
    system = np.eye(n * n_classes) + K_big @ big
    Sigma = np.linalg.solve(system, K_big)
    mean = (Sigma @ nu).reshape(n_classes, n).T
    blocks = np.array(
        [
            [
                [Sigma[c * n + i, d * n + i] for d in range(n_classes)]
                for c in range(n_classes)
            ]
            for i in range(n)
        ]
    )
    return mean, blocks, np.linalg.slogdet(system)[1]


@pytest.mark.parametrize("n_classes", [3, 5])
def test_structured_posterior_equals_the_dense_inverse(n_classes):
    rng = np.random.RandomState(n_classes)
    X = rng.normal(size=(12, 2))
    K = (C(2.0) * RBF(1.0))(X)
    labels = rng.randint(n_classes, size=12)
    sites = mn.InnerSites(
        rng.exponential(size=(12, n_classes - 1)), rng.normal(size=(12, n_classes - 1))
    )
    sites.beta[0, 0] = 0.0  # a factor not yet updated
    pi, nu_f, _ = mn.outer_sites(sites, labels, n_classes)
    posterior = mn.CoupledPosterior(K, pi)
    a, mean, cov = posterior.marginals(K, nu_f)
    dense_mean, dense_cov, log_det = _dense_posterior(K, pi, nu_f)
    np.testing.assert_allclose(mean, dense_mean, atol=1e-10)
    np.testing.assert_allclose(cov, dense_cov, atol=1e-10)
    assert posterior.log_det == pytest.approx(log_det, abs=1e-9)
    np.testing.assert_allclose(K @ a, mean, atol=1e-10)


def test_outer_site_is_the_inner_factors_with_u_integrated_out():
    # Direct quadrature over u of the inner factors' product, as a function
    # of f, against exp(log_scale - f' Pi f / 2 + nu_f' f).
    rng = np.random.RandomState(0)
    n_classes = 4
    sites = mn.InnerSites(rng.exponential(size=(1, 3)), rng.normal(size=(1, 3)))
    label = np.array([2])
    pi, nu_f, log_scale = mn.outer_sites(sites, label, n_classes)
    Pi = mn.site_precisions(pi)[0]
    u, w = hermegauss(80)
    w = w / w.sum()
    others = mn.other_classes(label, n_classes)[0]
    for f in rng.normal(size=(5, n_classes)):
        s = u[:, None] + f[2] - f[others][None, :]
        direct = np.sum(
            w * np.exp(np.sum(-0.5 * sites.beta[0] * s**2 + sites.nu[0] * s, axis=1))
        )
        closed = log_scale[0] - 0.5 * f @ Pi @ f + nu_f[0] @ f
        assert np.log(direct) == pytest.approx(closed, abs=1e-10)
    np.testing.assert_allclose(Pi @ np.ones(n_classes), 0.0, atol=1e-14)


def _tilted_monte_carlo(mean, cov, label, n_draws, seed):
    """Normaliser, mean and covariance of N(f | mean, cov) p(label | f)."""
    rng = np.random.RandomState(seed)
    u, w = hermegauss(60)
    w = w / w.sum()
    f = rng.multivariate_normal(mean, cov, size=n_draws)
    others = [j for j in range(len(mean)) if j != label]
    diff = f[:, [label]] - f[:, others]
    likelihood = (ndtr(u[None, :, None] + diff[:, None, :]).prod(axis=-1) * w).sum(1)
    Z = likelihood.mean()
    weights = likelihood / likelihood.sum()
    m = weights @ f
    centred = f - m
    return Z, m, (weights[:, None] * centred).T @ centred


def test_two_classes_give_the_exact_tilted_distribution():
    # One probit factor: inner EP is exact.  p(y | f) = Phi(d / sqrt 2) for
    # the difference d = f_y - f_other, so p(y) = Phi(E d / sqrt(2 + var d)).
    rng = np.random.RandomState(3)
    mean = rng.normal(size=(4, 2))
    A = rng.normal(size=(4, 2, 2))
    cov = A @ A.transpose(0, 2, 1) + 0.1 * np.eye(2)
    labels = np.array([0, 1, 1, 0])
    _, _, log_z = mn.inner_ep(mean, cov, labels, mn.InnerSites.zeros(4, 2), 5)
    other = 1 - labels
    rows = np.arange(4)
    d = mean[rows, labels] - mean[rows, other]
    var = cov[rows, labels, labels] + cov[rows, other, other] - 2 * cov[rows, 0, 1]
    np.testing.assert_allclose(np.exp(log_z), ndtr(d / np.sqrt(2 + var)), rtol=1e-12)
    proba = mn.predictive_proba(mean, cov)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-14)


@pytest.mark.parametrize("n_classes", [3, 4])
def test_tilted_moments_match_monte_carlo(n_classes):
    # Nested EP approximates a (C - 1)-dimensional orthant probability; its
    # error on these cavities is below 1% of the normaliser and 2% of a
    # standard deviation in the mean (Riihimaki et al. find it the closest
    # of the deterministic methods to MCMC).  Monte Carlo's standard errors
    # with 200,000 draws are a fifth of these tolerances.
    rng = np.random.RandomState(n_classes)
    mean = rng.normal(size=n_classes)
    A = rng.normal(size=(n_classes, n_classes))
    cov = A @ A.T / n_classes + 0.2 * np.eye(n_classes)
    label = 1
    sites, _, log_z = mn.inner_ep(
        mean[None],
        cov[None],
        np.array([label]),
        mn.InnerSites.zeros(1, n_classes),
        100,
        tol=1e-12,
    )
    mu, Sigma, _ = mn._inner_posterior(mean[None], cov[None], np.array([label]), sites)
    Z, m, V = _tilted_monte_carlo(mean, cov, label, 200_000, 0)
    sd = np.sqrt(np.diag(V))
    assert np.exp(log_z[0]) == pytest.approx(Z, rel=0.02)
    assert np.max(np.abs(mu[0, :n_classes] - m) / sd) < 0.02
    assert (
        np.max(np.abs(Sigma[0, :n_classes, :n_classes] - V) / np.outer(sd, sd)) < 0.05
    )


@pytest.mark.parametrize("n_classes", [3, 5])
def test_class_probabilities_match_monte_carlo(n_classes):
    # The normalisers of the C labels sum to one up to nested EP's error
    # (below 2%); normalised, each probability is within 0.01 of the exact
    # P(argmax(f + noise) = c), estimated from 10^6 draws (standard error
    # below 5e-4).
    rng = np.random.RandomState(n_classes)
    mean = 1.5 * rng.normal(size=(3, n_classes))
    A = rng.normal(size=(3, n_classes, n_classes))
    cov = A @ A.transpose(0, 2, 1) / n_classes + 0.1 * np.eye(n_classes)
    log_z = mn.class_log_normalisers(mean, cov)
    np.testing.assert_allclose(np.exp(log_z).sum(axis=1), 1.0, atol=0.02)
    proba = mn.predictive_proba(mean, cov)
    for i in range(3):
        g = rng.multivariate_normal(mean[i], cov[i] + np.eye(n_classes), size=10**6)
        exact = np.bincount(g.argmax(axis=1), minlength=n_classes) / len(g)
        np.testing.assert_allclose(proba[i], exact, atol=0.01)


def test_two_classes_reduce_to_the_binary_probit():
    # p(y = 1 | f) = Phi((f_1 - f_0) / sqrt 2) and (f_1 - f_0) / sqrt 2 has
    # the prior N(0, K): the same model, the same EP fixed point.
    X, y = _classes(25, 2, 1)
    K = (C(3.0) * RBF(1.5))(X)
    solution = mn.multinomial_ep(K, y, 2, tol=1e-12, max_iter=2000)
    binary = expectation_propagation(
        KernelPosterior(K),
        2.0 * y - 1,
        make_likelihood("probit", 0.0),
        tol=1e-12,
        max_iter=2000,
    )
    assert solution.converged and binary.converged
    assert solution.log_evidence == pytest.approx(binary.log_evidence, abs=1e-8)
    latent = (solution.mean[:, 1] - solution.mean[:, 0]) / np.sqrt(2)
    np.testing.assert_allclose(latent, binary.mean, atol=1e-8)
    loo = solution.loo_proba()[:, 1]
    expected = ndtr(binary.cavity_mean / np.sqrt(1 + binary.cavity_var))
    np.testing.assert_allclose(loo, expected, atol=1e-8)


@pytest.mark.parametrize(
    "mean, var, power",
    [(0.3, 0.8, 0.5), (-2.5, 4.0, 0.3), (4.0, 0.2, 0.9), (-1.0, 25.0, 0.05)],
)
def test_a_tempered_factor_matches_the_moments_of_its_tilted_density(mean, var, power):
    # The Gaussian factor of Phi(s)**e under N(s | mean, var): the cavity
    # times the factor has the tilted density's mean and variance, and the
    # normaliser is its integral (adaptive quadrature over the real line).
    def tilted(k):
        return quad(
            lambda s: s**k * norm.pdf(s, mean, np.sqrt(var)) * ndtr(s) ** power,
            -np.inf,
            np.inf,
            epsabs=0.0,
            epsrel=1e-12,
            limit=200,
        )[0]

    z0, z1, z2 = tilted(0), tilted(1), tilted(2)
    beta, nu, log_z = mn._factor_update(
        np.array([mean]), np.array([var]), np.array([power])
    )
    precision = 1.0 / var + beta[0]
    assert beta[0] >= 0.0
    assert log_z[0] == pytest.approx(np.log(z0), rel=1e-9, abs=1e-10)
    assert (mean / var + nu[0]) / precision == pytest.approx(z1 / z0, abs=1e-8)
    assert 1.0 / precision == pytest.approx(z2 / z0 - (z1 / z0) ** 2, rel=1e-7)
    # At power one the factor is the probit's closed form.
    closed = mn._probit_update(np.array([mean]), np.array([var]))
    at_one = mn._factor_update(np.array([mean]), np.array([var]), np.array([1.0]))
    np.testing.assert_array_equal(np.concatenate(at_one), np.concatenate(closed))


@pytest.mark.parametrize("weighted", [False, True])
def test_evidence_gradient_matches_finite_differences(weighted):
    # At a fixed point the evidence is stationary in the factors, with
    # weights too: copies of a site above one, the tempered likelihood below
    # one.  Central differences of step h err by O(h^2) and by EP's
    # tolerance over h.
    X, y = _classes(30, 3, 2)
    kernel = C(2.0) * RBF(1.2)
    w = None
    if weighted:
        w = np.random.RandomState(0).uniform(0.2, 3.0, len(y))
        assert np.any(w < 1.0) and np.any(w > 1.0)

    def evidence(theta, gradient=False):
        k = kernel.clone_with_theta(theta)
        K, dK = k(X, eval_gradient=True)
        solution = mn.multinomial_ep(K, y, 3, weights=w, tol=1e-12, max_iter=2000)
        assert solution.converged
        if gradient:
            return solution.log_evidence, mn.multinomial_evidence_gradient(solution, dK)
        return solution.log_evidence

    theta = kernel.theta
    _, gradient = evidence(theta, gradient=True)
    h = 1e-5
    numeric = [
        (evidence(theta + h * e) - evidence(theta - h * e)) / (2 * h)
        for e in np.eye(len(theta))
    ]
    np.testing.assert_allclose(gradient, numeric, rtol=1e-5, atol=1e-6)


def _params(**extra):
    params = dict(
        kernel=C(2.0) * RBF(1.5),
        optimizer=None,
        multi_class="multinomial",
        tol=1e-9,
        max_iter=1000,
    )
    return {**params, **extra}


@pytest.mark.parametrize("weighted", [None, "integer", "fractional"])
def test_leave_one_out_matches_brute_force_refits(weighted):
    # The cavity is the posterior without the point with the other sites
    # held; a refit lets them move a little (a log-concave likelihood), as
    # for the binary problems.  A fractional weight below one leaves out one
    # tempered site.
    X, y = _classes(30, 3, 2)
    w = np.ones(len(y))
    if weighted == "integer":
        w = np.random.RandomState(7).randint(0, 4, len(y)).astype(float)
        assert np.any(w == 0)
    elif weighted == "fractional":
        w = np.random.RandomState(7).uniform(0.1, 1.0, len(y))
    model = TAPGaussianProcessClassifier(**_params()).fit(X, y, sample_weight=w)
    brute = np.empty((len(y), 3))
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        refit = TAPGaussianProcessClassifier(**_params())
        refit.fit(X[keep], y[keep], sample_weight=w[keep])
        brute[i] = refit.predict_proba(X[i : i + 1])[0]
    gap = np.abs(model.loo_proba_ - brute).max(axis=1)
    # Leaving out a row of weight w removes w copies of its site: the other
    # sites' response, which the cavity ignores, grows in proportion.
    kept = w > 0
    assert np.all(gap[kept] < 0.03 * w[kept])
    assert gap[kept].mean() < 0.01 * w[kept].mean()
    np.testing.assert_allclose(model.loo_proba_.sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(gap[~kept], 0.0, atol=1e-7)
    brute_error = np.sum(w * (np.argmax(brute, axis=1) != y)) / np.sum(w)
    assert abs(model.loo_error_ - brute_error) <= w.max() / w.sum() + 1e-12


def test_integer_weights_equal_repeated_rows():
    X, y = _classes(24, 3, 4)
    w = np.random.RandomState(1).randint(1, 4, len(y))
    weighted = TAPGaussianProcessClassifier(**_params()).fit(X, y, sample_weight=w)
    repeated = TAPGaussianProcessClassifier(**_params()).fit(
        np.repeat(X, w, axis=0), np.repeat(y, w)
    )
    assert weighted.log_marginal_likelihood_value_ == pytest.approx(
        repeated.log_marginal_likelihood_value_, abs=1e-7
    )
    np.testing.assert_allclose(
        weighted.predict_proba(X), repeated.predict_proba(X), atol=1e-7
    )


def test_weights_below_one_give_a_proper_fit_between_dropping_and_repeating():
    # A weight below one tempers the row's probit factors and its cavity
    # removes the whole site (one copy of the untempered site would leave
    # an improper cavity: at amplitude 1000 on iris every weight 0.3 did).
    # The fixed point moves continuously with the weights, by O(change): a
    # weight just below one is the unweighted row, a weight near zero is
    # the row dropped.
    X, y = load_iris(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    rows = np.arange(0, 150, 2)
    X, y = X[rows], y[rows]
    params = _params(kernel=C(1000.0) * RBF(3.0))
    light = np.full(len(y), 0.3)
    model = TAPGaussianProcessClassifier(**params).fit(X, y, sample_weight=light)
    assert model.n_iter_ < params["max_iter"]
    proba = model.predict_proba(X)
    assert np.all(np.isfinite(proba)) and np.all(np.isfinite(model.loo_proba_))
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-12)

    some = np.arange(len(y)) % 5 == 0
    unweighted = TAPGaussianProcessClassifier(**params).fit(X, y).predict_proba(X)
    almost_one = np.where(some, 1.0 - 1e-7, 1.0)
    np.testing.assert_allclose(
        TAPGaussianProcessClassifier(**params)
        .fit(X, y, sample_weight=almost_one)
        .predict_proba(X),
        unweighted,
        atol=1e-5,
    )
    dropped = TAPGaussianProcessClassifier(**params).fit(X[~some], y[~some])
    almost_zero = np.where(some, 1e-8, 1.0)
    np.testing.assert_allclose(
        TAPGaussianProcessClassifier(**params)
        .fit(X, y, sample_weight=almost_zero)
        .predict_proba(X),
        dropped.predict_proba(X),
        atol=1e-5,
    )


def test_class_weight_is_the_equivalent_sample_weight():
    X, y = _classes(24, 3, 5)
    class_weight = {0: 2.0, 1: 0.5}
    by_class = TAPGaussianProcessClassifier(**_params(class_weight=class_weight))
    by_class.fit(X, y)
    sample_weight = np.array([class_weight.get(label, 1.0) for label in y])
    by_sample = TAPGaussianProcessClassifier(**_params()).fit(
        X, y, sample_weight=sample_weight
    )
    np.testing.assert_allclose(
        by_class.predict_proba(X), by_sample.predict_proba(X), atol=1e-10
    )


def test_fitted_model_is_one_model_with_its_own_evidence():
    X, y = _classes(30, 4, 6)
    labels = np.array(["a", "b", "c", "d"])[y]
    model = TAPGaussianProcessClassifier(**_params()).fit(X, labels)
    assert model.classes_.tolist() == ["a", "b", "c", "d"]
    assert not hasattr(model.kernel_, "kernels")  # one shared kernel
    assert model.log_marginal_likelihood(model.kernel_.theta) == pytest.approx(
        model.log_marginal_likelihood_value_, abs=1e-6
    )
    proba = model.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_array_equal(
        model.predict(X), model.classes_[np.argmax(model.decision_function(X), axis=1)]
    )
    np.testing.assert_allclose(np.exp(model.decision_function(X)), proba, rtol=1e-12)


def test_two_classes_are_the_binary_model():
    X, y = _classes(30, 2, 3)
    multinomial = TAPGaussianProcessClassifier(**_params()).fit(X, y)
    binary = (
        TAPGaussianProcessClassifier(
            **_params(),
        )
        .set_params(multi_class="one_vs_rest")
        .fit(X, y)
    )
    np.testing.assert_allclose(
        multinomial.predict_proba(X), binary.predict_proba(X), rtol=1e-12
    )


def test_the_optimiser_raises_the_evidence_and_beats_one_vs_rest_on_iris():
    X, y = load_iris(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    rows = np.arange(0, 150, 3)
    start = TAPGaussianProcessClassifier(
        C(1.0) * RBF(1.0), optimizer=None, multi_class="multinomial"
    ).fit(X[rows], y[rows])
    model = TAPGaussianProcessClassifier(
        C(1.0) * RBF(1.0), multi_class="multinomial", random_state=0
    ).fit(X[rows], y[rows])
    assert model.log_marginal_likelihood_value_ > start.log_marginal_likelihood_value_
    value, gradient = model.log_marginal_likelihood(model.kernel_.theta, True)
    # At the optimum (or on a bound) the gradient points out of the box only.
    theta, bounds = model.kernel_.theta, model.kernel_.bounds
    inside = (theta > bounds[:, 0] + 1e-3) & (theta < bounds[:, 1] - 1e-3)
    assert np.all(np.abs(gradient[inside]) < 1e-2 * max(1.0, abs(value)))


def test_restarts_give_the_same_model_for_any_n_jobs():
    X, y = _classes(20, 3, 8)
    params = dict(multi_class="multinomial", n_restarts_optimizer=1, random_state=0)
    one = TAPGaussianProcessClassifier(**params, n_jobs=1).fit(X, y)
    two = TAPGaussianProcessClassifier(**params, n_jobs=2).fit(X, y)
    np.testing.assert_array_equal(one.kernel_.theta, two.kernel_.theta)
    np.testing.assert_array_equal(one.predict_proba(X), two.predict_proba(X))


def test_nested_ep_ends_on_the_rounding_floor_of_its_factors():
    # A tolerance of zero cannot be met: the residual falls to the factors'
    # rounding and wanders there, and the run ends three sweeps after its
    # lowest residual instead of at max_iter.
    X, y = _classes(25, 3, 5)
    K = (C(2.0) * RBF(1.5))(X)
    run = dict(tol=0.0, max_iter=300, damping=1.0)
    ended = mn.multinomial_ep(K, y, 3, floor_sweeps=3, **run)
    assert not ended.converged
    assert ended.n_iter < 150
    assert ended.residual < 1e-10
    # Its residual is that of the factors it returns: a run from them that
    # stops at once reports it again.
    again = mn.multinomial_ep(K, y, 3, start=[(ended.tau, ended.nu)], tol=np.inf)
    assert again.n_iter == 0
    assert again.residual == pytest.approx(ended.residual, rel=1e-6)
    # Without the rule nothing else ends the run.
    capped = mn.multinomial_ep(K, y, 3, **{**run, "max_iter": ended.n_iter + 20})
    assert capped.n_iter == ended.n_iter + 20


def test_a_polish_ended_on_the_rounding_floor_keeps_its_factors(monkeypatch):
    # With a polish tolerance below any rounding floor the polish ends on
    # the floor; its factors meet the fit's tolerance, so the fit keeps them
    # (and its leave-one-out estimate) rather than the unpolished ones.
    from sklearn_meanfield.tap import _multinomial_gpc

    X, y = _classes(25, 3, 5)
    params = _params(tol=1e-5)
    unpolished = TAPGaussianProcessClassifier(**_params(tol=1e-5, max_iter=1000))
    monkeypatch.setattr(_multinomial_gpc, "_POLISH_TOL", 1e-5)
    unpolished.fit(X, y)
    monkeypatch.setattr(_multinomial_gpc, "_POLISH_TOL", 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        floor = TAPGaussianProcessClassifier(**params).fit(X, y)
    reference = TAPGaussianProcessClassifier(**_params(tol=1e-12)).fit(X, y)
    assert unpolished.n_iter_ < floor.n_iter_
    assert floor.n_iter_ < unpolished.n_iter_ + _multinomial_gpc._POLISH_SWEEPS
    assert np.isfinite(floor.loo_error_)
    np.testing.assert_allclose(
        floor.predict_proba(X), reference.predict_proba(X), atol=1e-9
    )
    np.testing.assert_allclose(floor.loo_proba_, reference.loo_proba_, atol=1e-9)
    assert np.abs(unpolished.predict_proba(X) - reference.predict_proba(X)).max() > 1e-8


@pytest.mark.parametrize(
    "params, match",
    [
        (dict(likelihood="logistic"), "multinomial probit"),
        (dict(label_noise=0.1), "multinomial probit"),
        (dict(method="naive"), "method='tap'"),
    ],
)
def test_options_the_model_does_not_have_are_refused(params, match):
    X, y = _classes(30, 3, 0)
    model = TAPGaussianProcessClassifier(multi_class="multinomial", **params)
    with pytest.raises(ValueError, match=match):
        model.fit(X, y)


@pytest.mark.filterwarnings("ignore:The optimal value found:UserWarning")
@pytest.mark.filterwarnings(
    "ignore:The optimal value found:sklearn.exceptions.ConvergenceWarning"
)
def test_an_amplitude_bound_that_holds_the_evidence_back_is_reported():
    # Nested shells: the default kernel's amplitude ends at its bound of 1e3
    # with the evidence climbing faster than a nat per e-fold there, and a
    # kernel with the wider bound it names fits with a higher evidence.
    # Wine's separable classes also end at the bound, but the saturated
    # likelihood gains little there: no warning.
    from sklearn_meanfield.tap._kernels import BINDING_AMPLITUDE_SLOPE

    X, y = make_gaussian_quantiles(
        n_samples=200, n_features=2, n_classes=4, random_state=0
    )
    X = (X - X.mean(0)) / X.std(0)
    params = dict(multi_class="multinomial", random_state=0)
    with pytest.warns(ConvergenceWarning, match="amplitude ran to its upper bound"):
        model = TAPGaussianProcessClassifier(**params).fit(X, y)
    _, gradient = model.log_marginal_likelihood(model.kernel_.theta, True)
    assert gradient[0] > BINDING_AMPLITUDE_SLOPE
    wider = TAPGaussianProcessClassifier(
        C(1.0, (1e-5, 1e5)) * RBF(1.0, (1e-3, 1e3)), **params
    ).fit(X, y)
    assert wider.kernel_.k1.constant_value > 1.01e3
    assert (
        wider.log_marginal_likelihood_value_
        > model.log_marginal_likelihood_value_ + 1.0
    )
    X, y = load_wine(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        separable = TAPGaussianProcessClassifier(**params).fit(X, y)
    assert separable.kernel_.k1.constant_value == pytest.approx(1e3)


def test_a_constant_model_warns_with_advice():
    rng = np.random.RandomState(0)
    X = rng.normal(size=(30, 3))
    y = rng.randint(3, size=30)
    model = TAPGaussianProcessClassifier(
        C(1e-3, "fixed") * RBF(1.0), multi_class="multinomial", optimizer=None
    )
    with pytest.warns(ConvergenceWarning, match="majority class"):
        model.fit(X, y)


@parametrize_with_checks(
    [TAPGaussianProcessClassifier(multi_class="multinomial", optimizer=None)]
)
def test_scikit_learn_checks(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(clone(estimator))

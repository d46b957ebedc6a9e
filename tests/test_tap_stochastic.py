"""Stochastic EP (tap/_stochastic_ep.py) against independent references.

References: full-batch EP on the FITC prior (its fixed point), the full-batch
evidence gradient of ``fitc_search_gradient`` and ``ep_label_noise_gradient``
(which central differences check in test_tap_sparse.py), the full-batch
L-BFGS-B search, and a fit with the learned kernel and inducing inputs kept
fixed.
"""

import warnings

import numpy as np
import pytest
from dask_helpers import local_dask_client
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF
from sklearn.gaussian_process.kernels import ConstantKernel as C
from test_tap_sparse_gpc import _data, assert_same_sparse_model

from sklearn_meanfield.tap._ep import expectation_propagation
from sklearn_meanfield.tap._evidence import ep_label_noise_gradient
from sklearn_meanfield.tap._likelihoods import make_likelihood
from sklearn_meanfield.tap._sparse import (
    FITCPosterior,
    RowBlock,
    _effective_sites,
    _weighted_gram,
    combine_site_statistics,
    fitc_search_gradient,
    inducing_cholesky,
    whiten_block,
)
from sklearn_meanfield.tap._stochastic_ep import (
    INDUCING_EPOCH_MOVE,
    LEARNING_RATE,
    REFRESH_MOVE,
    VALIDATION_WINDOWS,
    _label_noise_gradient,
    minibatch_gradient,
    minibatch_site_update,
    site_statistics,
    stochastic_search,
)
from sklearn_meanfield.tap.gpc import TAPGaussianProcessClassifier


def _posterior_of(X, kernel, Z, tau, nu):
    chol_mm, _ = inducing_cholesky(kernel(Z), 1e-8)
    precision, shift = site_statistics(X, kernel, Z, chol_mm, tau, nu, 37)
    chol_A, mean_w, _ = combine_site_statistics(precision, shift, 0.0)
    return chol_mm, chol_A, mean_w


def _minibatches(n, rng, sizes=(13, 40, 7, 61)):
    """A random partition of the rows into minibatches of unequal sizes."""
    order = rng.permutation(n)
    cuts = np.cumsum(sizes)
    cuts = cuts[cuts < n]
    return [np.sort(b) for b in np.split(order, cuts)]


@pytest.mark.parametrize("weighted", [False, True])
def test_a_partitions_minibatch_gradients_average_to_the_full_gradient(weighted):
    # scale = n / b makes each minibatch's estimate unbiased; weighted by
    # b / n, the estimates of a partition add up to the full-batch gradient
    # (kernel and inducing inputs) exactly, the adjoint being linear in the
    # rows' terms.
    X, t = _data(150, 0)
    Z = X[:12].copy() + 0.05
    kernel = C(1.5) * RBF(0.8)
    weights = np.random.default_rng(1).integers(1, 4, 150) if weighted else None
    solution = expectation_propagation(
        FITCPosterior.from_kernel(kernel, X, Z), t, make_likelihood("probit", 0.0),
        tol=1e-12, site_weights=weights,
    )  # fmt: skip
    full_theta, full_Z = fitc_search_gradient(solution, kernel, Z, inducing=True)
    chol_mm, chol_A, mean_w = _posterior_of(X, kernel, Z, solution.tau, solution.nu)
    n = len(X)
    theta, Z_gradient = 0.0, 0.0
    for rows in _minibatches(n, np.random.default_rng(2)):
        U, d = whiten_block(kernel(X[rows], Z), kernel.diag(X[rows]), chol_mm)
        part_theta, part_Z = minibatch_gradient(
            RowBlock(U, d, X[rows]), solution.tau[rows], solution.nu[rows],
            chol_A, mean_w, chol_mm, kernel, Z, n / len(rows), inducing=True,
        )  # fmt: skip
        theta = theta + len(rows) / n * part_theta
        Z_gradient = Z_gradient + len(rows) / n * part_Z
    np.testing.assert_allclose(theta, full_theta, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(Z_gradient, full_Z, rtol=1e-9, atol=1e-9)


def test_minibatch_label_noise_gradients_add_up_to_the_full_one():
    X, t = _data(120, 3)
    Z = X[:10].copy()
    kernel = C(2.0) * RBF(0.7)
    likelihood = make_likelihood("probit", 0.08)
    solution = expectation_propagation(
        FITCPosterior.from_kernel(kernel, X, Z), t, likelihood, tol=1e-12
    )
    full = ep_label_noise_gradient(solution, t, likelihood)
    chol_mm, chol_A, mean_w = _posterior_of(X, kernel, Z, solution.tau, solution.nu)
    total = 0.0
    for rows in _minibatches(len(X), np.random.default_rng(4)):
        U, d = whiten_block(kernel(X[rows], Z), kernel.diag(X[rows]), chol_mm)
        # At the fixed point a damped update is no update: the cavities are
        # the solution's own.
        sites = minibatch_site_update(
            U, d, solution.tau[rows], solution.nu[rows], t[rows], None,
            likelihood, chol_A, mean_w, 0.5,
        )  # fmt: skip
        np.testing.assert_allclose(sites.tau, solution.tau[rows], rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(
            sites.cavity_mean, solution.cavity_mean[rows], rtol=1e-9
        )
        total += _label_noise_gradient(sites, t[rows])
    assert total == pytest.approx(full, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("weighted", [False, True])
def test_minibatch_ep_converges_to_full_batch_eps_fixed_point(weighted):
    # At fixed hyperparameters the minibatch schedule is EP: every row keeps
    # its own site and its cavity removes exactly that site.
    X, t = _data(200, 5)
    Z = X[:15].copy()
    kernel = C(2.0) * RBF(0.6)
    likelihood = make_likelihood("probit", 0.0)
    weights = np.random.default_rng(6).integers(1, 4, 200) * 1.0 if weighted else None
    reference = expectation_propagation(
        FITCPosterior.from_kernel(kernel, X, Z), t, likelihood, tol=1e-12,
        site_weights=weights,
    )  # fmt: skip
    chol_mm, _ = inducing_cholesky(kernel(Z), 1e-8)
    U, d = whiten_block(kernel(X, Z), kernel.diag(X), chol_mm)
    tau, nu = np.zeros(200), np.zeros(200)
    precision, shift = np.zeros((15, 15)), np.zeros(15)
    rng = np.random.default_rng(7)
    for _ in range(200):
        for rows in _minibatches(200, rng, sizes=(50, 50, 50)):
            chol_A, mean_w, _ = combine_site_statistics(precision, shift, 0.0)
            w = None if weights is None else weights[rows]
            sites = minibatch_site_update(
                U[rows], d[rows], tau[rows], nu[rows], t[rows], w, likelihood,
                chol_A, mean_w, 0.8,
            )  # fmt: skip
            _, g_old, h_old = _effective_sites(d[rows], tau[rows], nu[rows])
            _, g_new, h_new = _effective_sites(d[rows], sites.tau, sites.nu)
            precision += _weighted_gram(U[rows], g_new - g_old)
            shift += U[rows].T @ (h_new - h_old)
            tau[rows], nu[rows] = sites.tau, sites.nu
    np.testing.assert_allclose(tau, reference.tau, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(nu, reference.nu, rtol=1e-7, atol=1e-9)


def _fit(X, y, **params):
    params.setdefault("kernel", C(0.1, (1e-3, 1e3)) * RBF(5.0, (1e-2, 1e2)))
    params.setdefault("n_inducing", 24)
    return TAPGaussianProcessClassifier(random_state=0, **params).fit(X, y)


@pytest.fixture(scope="module")
def stochastic_and_full_batch():
    X, t = _data(3000, 8)
    y = (t > 0).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        stochastic = _fit(X, y, optimizer="stochastic", max_iter=1000)
        full = _fit(X, y, optimizer="fmin_l_bfgs_b")
        start = _fit(X, y, optimizer=None)
    return X, y, stochastic, full, start


def test_stochastic_search_reaches_the_full_batch_evidence(stochastic_and_full_batch):
    # From a poor start (amplitude 0.1, length scale 5), the stochastic
    # search's point gains at least 95% of what the full-batch L-BFGS-B
    # search gains in exact (full-batch) evidence.
    _, _, stochastic, full, start = stochastic_and_full_batch
    gain = full.log_marginal_likelihood_value_ - start.log_marginal_likelihood_value_
    assert gain > 50
    reached = (
        stochastic.log_marginal_likelihood_value_ - start.log_marginal_likelihood_value_
    )
    assert reached > 0.95 * gain


def test_final_pass_equals_a_fit_with_the_learned_kernel_fixed(
    stochastic_and_full_batch,
):
    # After the search, full-batch EP at the learned point: the evidence, the
    # leave-one-out and the predictions are those of that fixed model.
    X, y, stochastic, _, _ = stochastic_and_full_batch
    fixed = _fit(
        X, y, kernel=stochastic.kernel_, optimizer=None,
        inducing_points=stochastic.inducing_points_,
    )  # fmt: skip
    assert stochastic.log_marginal_likelihood_value_ == pytest.approx(
        fixed.log_marginal_likelihood_value_, rel=1e-9
    )
    np.testing.assert_allclose(stochastic.loo_proba_, fixed.loo_proba_, atol=1e-7)
    assert stochastic.loo_error_ == fixed.loo_error_
    np.testing.assert_allclose(
        stochastic.predict_proba(X[:200]), fixed.predict_proba(X[:200]), atol=1e-7
    )


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_stochastic_restarts_and_inducing_inputs_are_independent_of_n_jobs():
    X, t = _data(600, 9)
    y = (t > 0).astype(int)
    # Identity, not convergence: a budget of 30 epochs.
    params = dict(
        kernel=C(1.0, (1e-2, 1e2)) * RBF(1.0, (1e-1, 1e1)),
        optimizer="stochastic",
        optimize_inducing_points=True,
        n_restarts_optimizer=1,
        n_inducing=10,
        max_iter=30,
    )
    one = _fit(X, y, n_jobs=1, **params)
    two = _fit(X, y, n_jobs=2, **params)
    np.testing.assert_array_equal(one.kernel_.theta, two.kernel_.theta)
    np.testing.assert_array_equal(one.inducing_points_, two.inducing_points_)
    np.testing.assert_array_equal(one.predict_proba(X), two.predict_proba(X))


# Learning the inducing inputs by the stochastic search: the kernel is learned
# at the starting inputs first, then the kernel and the inputs on all but a
# held-out share of the rows, and the end is kept only when its held-out
# Brier score beats the start's significantly.  The rule itself is tested
# with the L-BFGS-B path; here, what each answer of it gives.


def _learned_inputs(X, y, monkeypatch, gain):
    from sklearn_meanfield.tap import _sparse_gpc

    monkeypatch.setattr(_sparse_gpc, "significant_gain", lambda *args, **kw: gain)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return _fit(
            X, y, optimizer="stochastic", optimize_inducing_points=True,
            n_inducing=10, max_iter=60,
        )  # fmt: skip


def test_stochastic_inducing_inputs_without_a_gain_give_the_fixed_fit(monkeypatch):
    X, t = _data(1500, 12)
    y = (t > 0).astype(int)
    learned = _learned_inputs(X, y, monkeypatch, gain=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fixed = _fit(X, y, optimizer="stochastic", n_inducing=10, max_iter=60)
    np.testing.assert_array_equal(learned.kernel_.theta, fixed.kernel_.theta)
    np.testing.assert_array_equal(learned.inducing_points_, fixed.inducing_points_)
    np.testing.assert_array_equal(learned.predict_proba(X), fixed.predict_proba(X))
    np.testing.assert_array_equal(learned.loo_proba_, fixed.loo_proba_)


def test_stochastic_learned_inducing_inputs_end_in_the_fixed_point_of_their_model(
    monkeypatch,
):
    X, t = _data(1500, 13)
    y = (t > 0).astype(int)
    learned = _learned_inputs(X, y, monkeypatch, gain=True)
    start = _fit(X, y, optimizer=None, n_inducing=10)
    assert not np.allclose(learned.inducing_points_, start.inducing_points_)
    # The final full pass, warm-started from the search's sites on the
    # learning rows (zero on the held-out ones), reaches the fixed point of
    # the learned model: that of a fit with it given, to EP's tolerance.
    given = _fit(
        X, y, kernel=learned.kernel_, optimizer=None,
        inducing_points=learned.inducing_points_, n_inducing=10,
    )  # fmt: skip
    np.testing.assert_allclose(learned.kernel_.theta, given.kernel_.theta)
    assert learned.log_marginal_likelihood_value_ == pytest.approx(
        given.log_marginal_likelihood_value_, rel=1e-9
    )
    np.testing.assert_allclose(
        learned.predict_proba(X), given.predict_proba(X), atol=1e-7
    )
    np.testing.assert_allclose(learned.loo_proba_, given.loo_proba_, atol=1e-7)


def test_the_inducing_input_search_learns_on_a_capped_subset(monkeypatch):
    # Above INDUCING_SEARCH_MAX_SAMPLES learning rows the inputs' search runs
    # on a random subset of them (shorter epochs), still apart from the rows
    # its held-out score comes from; the final full pass, from sites on the
    # subset only, reaches the learned model's fixed point.
    from sklearn_meanfield.tap import _sparse_gpc

    monkeypatch.setattr(_sparse_gpc, "INDUCING_SEARCH_MAX_SAMPLES", 400)
    seen = []
    run = _sparse_gpc._stochastic_run

    def spy(start, seed, X, *args, **kwargs):
        if kwargs.get("validation") is not None:
            seen.append((X.copy(), kwargs["validation"].X_out.copy()))
        return run(start, seed, X, *args, **kwargs)

    monkeypatch.setattr(_sparse_gpc, "_stochastic_run", spy)
    X, t = _data(1500, 14)
    y = (t > 0).astype(int)
    learned = _learned_inputs(X, y, monkeypatch, gain=True)
    ((X_search, X_out),) = seen
    assert len(X_search) == 400 and len(X_out) == 150
    rows = {row.tobytes() for row in X}
    assert {row.tobytes() for row in X_search} <= rows
    assert not {row.tobytes() for row in X_search} & {row.tobytes() for row in X_out}
    given = _fit(
        X, y, kernel=learned.kernel_, optimizer=None,
        inducing_points=learned.inducing_points_, n_inducing=10,
    )  # fmt: skip
    assert learned.log_marginal_likelihood_value_ == pytest.approx(
        given.log_marginal_likelihood_value_, rel=1e-9
    )
    np.testing.assert_allclose(learned.loo_proba_, given.loo_proba_, atol=1e-7)


def test_label_noise_is_learned_by_the_stochastic_search():
    # With the label noise learned as well, the stochastic point gains at
    # least 95% of the full-batch search's gain in exact evidence.
    X, t = _data(3000, 10, noise=0.2)
    y = (t > 0).astype(int)
    kernel = C(0.1, (1e-3, 10.0)) * RBF(5.0, (1e-2, 1e2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        stochastic = _fit(
            X, y, kernel=kernel, optimizer="stochastic", label_noise="auto",
            max_iter=1000,
        )  # fmt: skip
        full = _fit(X, y, kernel=kernel, optimizer="fmin_l_bfgs_b", label_noise="auto")
    start = _fit(X, y, kernel=kernel, optimizer=None, label_noise=0.01)
    gain = full.log_marginal_likelihood_value_ - start.log_marginal_likelihood_value_
    assert gain > 50
    reached = (
        stochastic.log_marginal_likelihood_value_ - start.log_marginal_likelihood_value_
    )
    assert reached > 0.95 * gain
    assert 0.05 < stochastic.label_noise_ < 0.4


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_auto_searches_stochastically_above_the_threshold(monkeypatch):
    from sklearn_meanfield.tap import _sparse_gpc

    calls = []
    original = _sparse_gpc._stochastic_optimise

    def spy(*args, **kwargs):
        calls.append(len(args[0]))
        return original(*args, **kwargs)

    monkeypatch.setattr(_sparse_gpc, "_stochastic_optimise", spy)
    monkeypatch.setattr(_sparse_gpc, "STOCHASTIC_MIN_SAMPLES", 500)
    X, t = _data(600, 11)
    y = (t > 0).astype(int)
    _fit(X, y[:600], optimizer="auto")
    _fit(X[:400], y[:400], optimizer="auto")
    _fit(X, y, optimizer="fmin_l_bfgs_b")
    assert calls == [600]


def test_stochastic_needs_the_sparse_mode():
    X, t = _data(60, 12)
    y = (t > 0).astype(int)
    with pytest.raises(ValueError, match="optimizer='stochastic' searches the sparse"):
        TAPGaussianProcessClassifier(optimizer="stochastic", n_inducing=None).fit(X, y)
    y3 = np.digitize(X[:, 0], [-0.5, 0.5])
    with pytest.raises(ValueError, match="multinomial"):
        TAPGaussianProcessClassifier(
            optimizer="stochastic", multi_class="multinomial"
        ).fit(X, y3)


def test_stop_during_the_stochastic_search_keeps_a_usable_model():
    pytest.importorskip("sklearn.callback")
    from callback_helpers import TickDeadline

    X, t = _data(2000, 13)
    y = (t > 0).astype(int)
    model = TAPGaussianProcessClassifier(
        C(0.1) * RBF(5.0), n_inducing=16, optimizer="stochastic", random_state=0
    )
    model.set_callbacks(TickDeadline(5, task_name=None))
    with pytest.warns(ConvergenceWarning, match="callback asked the fit to stop"):
        model.fit(X, y)
    assert np.isnan(model.loo_error_)
    proba = model.predict_proba(X)
    assert np.all(np.isfinite(proba))
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_stochastic_fit_on_a_dask_cluster_equals_the_local_fit():
    # The searches' starts and minibatch seeds are drawn before dispatch; the
    # final full-batch EP maps over row blocks on the workers (sums in block
    # order), so the model is the local one.
    pytest.importorskip("distributed")
    from dask_helpers import local_dask_client
    from joblib import parallel_config

    X, t = _data(500, 14)
    y = (t > 0).astype(int)
    params = dict(
        optimizer="stochastic", n_restarts_optimizer=1, n_inducing=10, max_iter=30
    )
    local = _fit(X, y, n_jobs=1, **params)
    with local_dask_client(), parallel_config(backend="dask"):
        remote = _fit(X, y, **params)
    np.testing.assert_array_equal(remote.kernel_.theta, local.kernel_.theta)
    np.testing.assert_allclose(
        remote.predict_proba(X), local.predict_proba(X), rtol=0, atol=1e-12
    )
    np.testing.assert_allclose(remote.loo_proba_, local.loo_proba_, rtol=0, atol=1e-12)


def test_stochastic_learned_inducing_inputs_on_dask_row_blocks(monkeypatch):
    # The full-batch EP that scores the search's start and end, and the final
    # solve, map over row blocks on the workers: the local model, to rounding.
    pytest.importorskip("distributed")
    from joblib import parallel_config

    from sklearn_meanfield.tap import _sparse

    monkeypatch.setattr(_sparse, "_BLOCK_BYTES", 8 * 10 * 256)
    X, t = _data(1500, 14)
    y = (t > 0).astype(int)
    local = _learned_inputs(X, y, monkeypatch, gain=True)
    with (
        local_dask_client(n_workers=2, threads_per_worker=1),
        parallel_config(backend="dask"),
    ):
        remote = _learned_inputs(X, y, monkeypatch, gain=True)
    assert_same_sparse_model(remote, local, X)


# The stochastic search of the kernel and the inducing inputs together:
# Adam's step for the inputs shrinks with the minibatches an epoch has, and a
# held-out score of q ends the search and picks its point.


def _search_problem(n=400, m=10, seed=21):
    """Rows, labels, kernel, likelihood, starting inducing inputs and the
    search space (the kernel's log-hyperparameters, then the inputs):
    ``at``, the start and the bounds."""
    X, t = _data(n, seed)
    Z = X[:m].copy()
    kernel = C(1.0) * RBF(1.0)
    likelihood = make_likelihood("probit", 0.0)

    def at(point):
        theta, inputs = point[: kernel.n_dims], point[kernel.n_dims :]
        return kernel.clone_with_theta(theta), likelihood, inputs.reshape(Z.shape)

    start = np.r_[kernel.theta, Z.ravel()]
    bounds = np.c_[np.full(len(start), -50.0), np.full(len(start), 50.0)]
    return X, t, kernel, likelihood, Z, at, start, bounds


class _StopAfter:
    """A callback task asking the search to stop after ``steps`` steps."""

    def __init__(self, steps):
        self.steps = steps

    def step(self, name):
        self.steps -= 1
        return self.steps <= 0


def test_the_inducing_inputs_first_step_is_their_share_of_an_epochs_move():
    # Adam's first step moves every coordinate by its learning rate: the
    # log-hyperparameters by LEARNING_RATE, the inducing inputs by their unit
    # times INDUCING_EPOCH_MOVE / (minibatches an epoch) when that is less.
    X, t, kernel, _, Z, at, start, bounds = _search_problem()
    scales = np.r_[np.ones(kernel.n_dims), np.full(Z.size, 2.0)]
    n_batches = 40  # 400 rows, 10 a minibatch
    input_step = 2.0 * min(LEARNING_RATE, INDUCING_EPOCH_MOVE / n_batches)
    assert input_step < 2.0 * LEARNING_RATE
    run = stochastic_search(
        start, bounds, scales, at, X, t, None, jitter=1e-8, damping=0.5,
        learns_label_noise=False, learns_inducing=True, seed=0,
        task=_StopAfter(1), batch_size=10,
    )  # fmt: skip
    assert run.stopped
    move = np.abs(run.point - start)
    np.testing.assert_allclose(move[: kernel.n_dims], LEARNING_RATE, rtol=1e-6)
    assert np.all(move[kernel.n_dims :] <= input_step * (1 + 1e-12))
    assert np.max(move[kernel.n_dims :]) == pytest.approx(input_step, rel=1e-6)


def test_a_validated_search_keeps_its_lowest_scored_point_and_ends_on_patience():
    X, t, kernel, likelihood, Z, at, start, bounds = _search_problem()
    reference = expectation_propagation(
        FITCPosterior.from_kernel(kernel, X, Z), t, likelihood, tol=1e-10
    )
    scores = iter([3.0, 2.0, 5.0, 2.5, 4.0, 6.0, 7.0] + [1.0] * 50)
    held = []

    def validation(kernel_at, likelihood_at, Z_at, chol_mm, chol_A, mean_w):
        held.append(np.r_[kernel_at.theta, Z_at.ravel()])
        return next(scores)

    # 20 minibatches of 20 rows: every epoch is a window.
    run = stochastic_search(
        start, bounds, np.ones(len(start)), at, X, t, None, jitter=1e-8,
        damping=0.5, learns_label_noise=False, learns_inducing=True, seed=0,
        batch_size=20, sites=(reference.tau, reference.nu), validation=validation,
    )  # fmt: skip
    # The lowest score comes second, then VALIDATION_WINDOWS windows without
    # a lower one end the search; given converged sites, the first epoch
    # already steps.
    assert len(held) == 2 + VALIDATION_WINDOWS
    assert run.converged and not run.stopped
    assert run.epochs == len(held)
    np.testing.assert_allclose(run.point, held[1], rtol=1e-13, atol=1e-15)
    assert not np.allclose(held[1], held[-1])


def test_brier_scores_of_q_equal_the_solutions_held_out_losses():
    # The stochastic search scores its q with the prediction formula of a
    # full-batch solution: given that solution's q, the same numbers.
    from sklearn_meanfield.tap._sparse_gpc import brier_scores, held_out_losses

    X, t, kernel, likelihood, Z, _, _, _ = _search_problem()
    X_out, t_out = _data(150, 22)
    posterior = FITCPosterior.from_kernel(kernel, X, Z)
    solution = expectation_propagation(posterior, t, likelihood, tol=1e-10)
    expected = held_out_losses(solution, kernel, likelihood, Z, X_out, t_out)
    q = solution.posterior
    got = brier_scores(
        kernel, likelihood, Z, posterior.chol_mm, q.chol_A, q.mean_w, X_out, t_out
    )
    assert np.ptp(expected) > 0.1
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-14)


def test_learning_the_inducing_inputs_every_epoch_starts_from_all_rows_terms(
    monkeypatch,
):
    # Kept terms say what a row's site says about the field at the old
    # inducing inputs: with the inputs learned, each epoch after a step
    # recomputes every row's term at the current point (and the search
    # starts from them), so the q it scores then is the sites' own.
    from sklearn_meanfield.tap import _stochastic_ep

    X, t, kernel, likelihood, Z, at, start, bounds = _search_problem()
    reference = expectation_propagation(
        FITCPosterior.from_kernel(kernel, X, Z), t, likelihood, tol=1e-10
    )
    points = []
    original = _stochastic_ep._all_rows_information

    def spy(X_, kernel_at, Z_at, *args):
        points.append(np.r_[kernel_at.theta, Z_at.ravel()])
        return original(X_, kernel_at, Z_at, *args)

    monkeypatch.setattr(_stochastic_ep, "_all_rows_information", spy)
    # Two minibatches an epoch: the point moves by about 0.02 an epoch, less
    # than REFRESH_MOVE at the epochs' starts, so only this rule recomputes.
    run = stochastic_search(
        start, bounds, np.ones(len(start)), at, X, t, None, jitter=1e-8,
        damping=0.5, learns_label_noise=False, learns_inducing=True, seed=0,
        batch_size=200, sites=(reference.tau, reference.nu), max_epochs=3,
    )  # fmt: skip
    assert run.epochs == 3
    assert len(points) == 3
    np.testing.assert_allclose(points[0], start)
    # Each later one is at a new point, within REFRESH_MOVE of the start.
    assert all(not np.allclose(a, b) for a, b in zip(points, points[1:]))
    assert np.max(np.abs(points[-1] - start)) < REFRESH_MOVE

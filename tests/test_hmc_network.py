"""The network posterior, its gradient, the Gibbs steps and the step sizes."""

import numpy as np
import pytest

from sklearn_meanfield.hmc._chains import ChainRandom, ChainSettings, run_chains
from sklearn_meanfield.hmc._network import (
    HyperPrior,
    NetworkLayout,
    augment,
    forward,
    gibbs_precisions,
    log_posterior_and_grad,
    network_outputs,
    prior_precision_vector,
    step_scales,
)
from sklearn_meanfield.hmc._redraws import redraw_units
from sklearn_meanfield.hmc._rescaling import rescale_groups, rescale_units
from sklearn_meanfield.hmc._transition import NetworkPosterior


def _problem(ard=True, n_outputs=2, n_chains=3, seed=0):
    rng = np.random.RandomState(seed)
    layout = NetworkLayout(4, 5, n_outputs, ard)
    X = rng.normal(size=(30, 4))
    Y = rng.normal(size=(30, n_outputs))
    theta = rng.normal(size=(n_chains, layout.n_params))
    noise = rng.gamma(2.0, 1.0, size=(n_chains, n_outputs))
    groups = rng.gamma(2.0, 1.0, size=(n_chains, layout.n_groups))
    return layout, X, Y, theta, noise, prior_precision_vector(groups, layout)


def _naive_log_posterior(theta, X, Y, noise, precision, layout):
    """Per-sample loops and np.tanh: an independent reference for one chain."""
    d, h, m = layout.n_features, layout.n_hidden, layout.n_outputs
    w1 = theta[: d * h].reshape(d, h)
    b1 = theta[d * h : d * h + h]
    w2 = theta[d * h + h : d * h + h + h * m].reshape(h, m)
    b2 = theta[d * h + h + h * m :]
    total = 0.0
    for x, y in zip(X, Y):
        f = np.tanh(x @ w1 + b1) @ w2 + b2
        total -= 0.5 * np.sum(noise * (y - f) ** 2)
    return total - 0.5 * np.sum(precision * theta**2)


@pytest.mark.parametrize("ard,n_outputs", [(True, 2), (False, 1)])
def test_log_posterior_matches_naive_loop(ard, n_outputs):
    layout, X, Y, theta, noise, precision = _problem(ard, n_outputs)
    log_prob, _ = log_posterior_and_grad(theta, X, Y, noise, precision, layout)
    for c in range(theta.shape[0]):
        expected = _naive_log_posterior(theta[c], X, Y, noise[c], precision[c], layout)
        assert log_prob[c] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("ard,n_outputs", [(True, 2), (False, 1)])
def test_gradient_matches_finite_differences(ard, n_outputs):
    layout, X, Y, theta, noise, precision = _problem(ard, n_outputs)
    _, grad = log_posterior_and_grad(theta, X, Y, noise, precision, layout)
    h = 1e-6
    numeric = np.empty_like(theta)
    for j in range(layout.n_params):
        shift = np.zeros(layout.n_params)
        shift[j] = h
        up, _ = log_posterior_and_grad(theta + shift, X, Y, noise, precision, layout)
        down, _ = log_posterior_and_grad(theta - shift, X, Y, noise, precision, layout)
        numeric[:, j] = (up - down) / (2 * h)
    np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-5)


def test_forward_matches_tanh_network():
    layout, X, _, theta, _, _ = _problem()
    outputs, hidden, pre = forward(theta, X, layout)  # samples last
    w1, b1, w2, b2 = layout.unpack(theta)
    np.testing.assert_allclose(hidden[1].T, np.tanh(X @ w1[1] + b1[1]), atol=1e-15)
    np.testing.assert_allclose(outputs[1].T, hidden[1].T @ w2[1] + b2[1], atol=1e-12)
    np.testing.assert_allclose(pre[1].T, X @ w1[1] + b1[1], atol=1e-12)
    np.testing.assert_array_equal(
        network_outputs(theta, X, layout), outputs.transpose(0, 2, 1)
    )
    # The sampler's form [X, 1] [W1; b1] gives the same network.
    augmented = forward(theta, None, layout, X_augmented_T=augment(X))
    for got, expected in zip(augmented, (outputs, hidden, pre)):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    # Extreme pre-activations saturate without overflow warnings.
    big = theta * 1e6
    assert np.all(np.isfinite(forward(big, X, layout).outputs))


def test_layout_blocks_and_augmented_view_match_hand_offsets():
    layout = NetworkLayout(4, 5, 2)
    theta = np.arange(3.0 * layout.n_params).reshape(3, -1)
    w1, b1, w2, b2 = layout.unpack(theta)
    # W1: 4 x 5 = 20, b1: 5, W2: 5 x 2 = 10, b2: 2.
    assert layout.sizes == (20, 5, 10, 2) and layout.n_params == 37
    np.testing.assert_array_equal(w1, theta[:, :20].reshape(3, 4, 5))
    np.testing.assert_array_equal(b1, theta[:, 20:25])
    np.testing.assert_array_equal(w2, theta[:, 25:35].reshape(3, 5, 2))
    np.testing.assert_array_equal(b2, theta[:, 35:])
    v1, w2_again, b2_again = layout.augmented.unpack(theta)
    np.testing.assert_array_equal(v1, np.concatenate([w1, b1[:, None, :]], axis=1))
    np.testing.assert_array_equal(w2_again, w2)
    np.testing.assert_array_equal(b2_again, b2)
    assert layout.input_group_rows() == [[0], [1], [2], [3], [4]]


def test_gibbs_draws_follow_gamma_conditionals():
    layout = NetworkLayout(3, 4, 2, ard=True)
    prior = HyperPrior()
    rng = np.random.RandomState(1)
    theta = np.tile(rng.normal(size=layout.n_params), (5000, 1))
    residual = np.tile(rng.normal(0, 0.3, size=(1, 25, 2)), (5000, 1, 1))
    groups, noise = gibbs_precisions(
        theta, residual, layout, prior, ChainRandom(range(5000))
    )
    # Conditional Gamma(shape (a + n)/2, rate (a/w + sum z^2)/2): mean shape/rate.
    index = layout.group_index()
    for g, (n, w) in enumerate(zip(layout.group_sizes(), prior.group_means(layout))):
        z2 = np.sum(theta[0, index == g] ** 2)
        shape, rate = 0.5 * (prior.a_weights + n), 0.5 * (prior.a_weights / w + z2)
        assert groups[:, g].mean() == pytest.approx(shape / rate, rel=0.05)
        assert groups[:, g].var() == pytest.approx(shape / rate**2, rel=0.15)
    for k in range(2):
        shape = 0.5 * (prior.a_noise + 25)
        rate = 0.5 * (prior.a_noise / prior.w_noise + np.sum(residual[0, :, k] ** 2))
        assert noise[:, k].mean() == pytest.approx(shape / rate, rel=0.05)


def test_group_index_covers_every_parameter_once():
    layout = NetworkLayout(3, 4, 2, ard=True)
    index = layout.group_index()
    assert index.shape == (layout.n_params,)
    # 3 inputs x 4 hidden, then 4 hidden biases, 8 output weights, 2 biases.
    np.testing.assert_array_equal(layout.group_sizes(), [4, 4, 4, 4, 8, 2])
    np.testing.assert_array_equal(
        NetworkLayout(3, 4, 2, ard=False).group_sizes(), [12, 4, 8, 2]
    )


def test_output_layer_step_scales_bound_the_true_curvature():
    # The curvature of -log p in an output weight is its prior precision plus
    # the noise precision times sum_i z_ih^2 <= n: the scales use the bound,
    # which is exact for the output biases.
    layout, X, Y, theta, noise, _ = _problem(n_chains=2)
    groups = np.random.RandomState(2).gamma(2.0, 1.0, size=(2, layout.n_groups))
    precision = prior_precision_vector(groups, layout)
    scales = step_scales(groups, noise, np.sum(X**2, axis=0), X.shape[0], layout)
    start = layout.n_params - layout.n_hidden * layout.n_outputs - layout.n_outputs
    h = 1e-4
    for j in range(start, layout.n_params):
        shift = np.zeros(layout.n_params)
        shift[j] = h
        values = [
            log_posterior_and_grad(theta + s, X, Y, noise, precision, layout)[0]
            for s in (shift, 0 * shift, -shift)
        ]
        curvature = -(values[0] - 2 * values[1] + values[2]) / h**2
        bound = scales[:, j] ** -2
        assert np.all(curvature <= bound * (1 + 1e-6))
        if j >= layout.n_params - layout.n_outputs:  # output biases: exact
            np.testing.assert_allclose(curvature, bound, rtol=1e-5)


def test_chains_without_data_sample_the_hierarchical_prior():
    # With no data the posterior is the prior: Gibbs steps for the precisions
    # and HMC for the weights (step sizes following the precisions) must
    # together reproduce the Gamma marginals of the precisions and the
    # Student-t marginals of the weights, E[z^2] = E[1/tau] = rate / (shape - 1).
    from scipy.special import digamma

    layout = NetworkLayout(2, 3, 1, ard=True)
    # Less vague than the default so that the funnel mixes in a short test.
    prior = HyperPrior(a_weights=12.0, a_noise=12.0, w_input_per_feature=1.0)
    out = run_chains(
        NetworkPosterior(np.zeros((0, 2)), np.zeros((0, 1)), layout, prior),
        seeds=range(6),
        settings=ChainSettings(
            n_samples=1000, n_warmup=100, n_leapfrog=10, step_size=0.3
        ),
    )
    shape = 0.5 * prior.a_weights
    rate = shape / prior.group_means(layout)
    log_tau = np.log(out.group_precision).mean(axis=(0, 1))
    np.testing.assert_allclose(log_tau, digamma(shape) - np.log(rate), atol=0.05)
    index = layout.group_index()
    second = (out.theta**2).mean(axis=(0, 1))
    for g in range(layout.n_groups):
        expected = rate[g] / (shape - 1)
        np.testing.assert_allclose(second[index == g].mean(), expected, rtol=0.1)
    noise = out.noise_precision.mean()
    assert noise == pytest.approx(prior.w_noise, rel=0.05)


def test_rescale_moves_sample_the_precision_given_standardised_weights():
    # The joint move z -> c z, tau -> tau / c^2 keeps v = z sqrt(tau) fixed and
    # must leave p(tau | v, data) invariant.  With W1 = b1 = 0 the network is
    # its output bias b2 = v / sqrt(tau), so that conditional is one-
    # dimensional: tau Gamma(tau) prod_i N(y_i; v / sqrt(tau), 1 / noise) on
    # the log scale, which quadrature gives exactly.
    from sklearn_meanfield.hmc._chains import ChainRandom

    layout = NetworkLayout(1, 2, 1, ard=True)
    prior = HyperPrior()
    rng = np.random.RandomState(3)
    X = rng.normal(size=(8, 1))
    Y = 0.7 + rng.normal(0, 1.0, size=(8, 1))
    n_chains, v = 200, 1.5
    theta = np.zeros((n_chains, layout.n_params))
    groups = np.ones((n_chains, layout.n_groups))
    theta[:, -1] = v  # b2 = v / sqrt(tau) with tau = 1
    noise = np.ones((n_chains, 1))
    sd = np.full((n_chains, layout.n_groups), 0.8)
    random = ChainRandom(range(n_chains))
    log_tau = []
    for step in range(250):
        theta, groups, _, _ = rescale_groups(
            theta, groups, noise, augment(X), Y, layout, prior, sd, random
        )
        if step >= 50:
            log_tau.append(np.log(groups[:, -1]))
    # The standardised weight never changes.
    np.testing.assert_allclose(theta[:, -1] * np.sqrt(groups[:, -1]), v)
    log_tau = np.concatenate(log_tau)

    grid = np.linspace(-12, 12, 20001)
    tau = np.exp(grid)
    a, w = prior.a_weights, prior.group_means(layout)[-1]
    log_density = (
        grid  # the Jacobian: density of log tau
        + (0.5 * a - 1) * grid
        - 0.5 * a / w * tau
        - 0.5 * np.sum((Y[:, 0, None] - v / np.sqrt(tau)) ** 2, axis=0)
    )
    weights = np.exp(log_density - log_density.max())
    weights /= weights.sum()
    mean = np.sum(weights * grid)
    sd_exact = np.sqrt(np.sum(weights * (grid - mean) ** 2))
    # 40 000 correlated draws: the Monte Carlo error is a few hundredths.
    assert np.mean(log_tau) == pytest.approx(mean, abs=0.06)
    assert np.std(log_tau) == pytest.approx(sd_exact, rel=0.05)


def test_unit_rescaling_samples_the_scale_ridge():
    # The move (incoming, outgoing) -> (c incoming, outgoing / c) of a hidden
    # unit must leave the posterior invariant.  With one unit, along the orbit
    # of a starting point the posterior of u = log c is one-dimensional:
    # (d + 1 - m) u (the Jacobian) plus the log prior and log likelihood at
    # the scaled point, which quadrature gives exactly.
    from sklearn_meanfield.hmc._chains import ChainRandom

    layout = NetworkLayout(1, 1, 1, ard=True)
    rng = np.random.RandomState(4)
    X = rng.normal(size=(15, 1))
    Y = 0.8 * np.tanh(1.5 * X) + rng.normal(0, 0.3, size=(15, 1))
    start = np.array([1.2, 0.1, 0.9, 0.0])  # w1, b1, w2, b2
    precision = np.array([1.0, 2.0, 0.5, 1.0])
    noise = 1 / 0.3**2
    n_chains = 200
    theta = np.tile(start, (n_chains, 1))
    random = ChainRandom(range(n_chains))
    sd = np.full((n_chains, 1), 1.0)
    log_c = []
    for step in range(250):
        theta, _, _ = rescale_units(
            theta,
            np.tile(precision, (n_chains, 1)),
            np.full((n_chains, 1), noise),
            augment(X),
            Y,
            layout,
            sd,
            random,
        )
        if step >= 50:
            log_c.append(np.log(theta[:, 0] / start[0]))
    # The product of incoming and outgoing weights never changes.
    np.testing.assert_allclose(theta[:, 0] * theta[:, 2], start[0] * start[2])
    log_c = np.concatenate(log_c)

    grid = np.linspace(-6, 6, 12001)[:, None]
    c = np.exp(grid)
    f = np.tanh(c * (start[0] * X[:, 0] + start[1])) * start[2] / c
    log_density = (
        (2 - 1) * grid[:, 0]
        - 0.5
        * c[:, 0] ** 2
        * (precision[0] * start[0] ** 2 + precision[1] * start[1] ** 2)
        - 0.5 * precision[2] * start[2] ** 2 / c[:, 0] ** 2
        - 0.5 * noise * np.sum((Y[:, 0] - f) ** 2, axis=1)
    )
    weights = np.exp(log_density - log_density.max())
    weights /= weights.sum()
    mean = np.sum(weights * grid[:, 0])
    sd_exact = np.sqrt(np.sum(weights * (grid[:, 0] - mean) ** 2))
    assert np.mean(log_c) == pytest.approx(mean, abs=0.03)
    assert np.std(log_c) == pytest.approx(sd_exact, rel=0.05)


def _exact_unit_moments(X, Y, w2_bias, precision, noise, half_widths, n_grid):
    """Posterior moments of the one hidden unit (w1, b1, v) of a 1-input
    network with fixed precisions and output bias, by quadrature over (w1, b1)
    with v integrated out in closed form: for each grid point the targets
    minus the bias are Gaussian with covariance z z^T / lambda_v + I / tau,
    evaluated by a dense Cholesky (no rank-one shortcut)."""
    w_grid = np.linspace(-half_widths[0], half_widths[0], n_grid)
    b_grid = np.linspace(-half_widths[1], half_widths[1], n_grid)
    w, b = (a.ravel() for a in np.meshgrid(w_grid, b_grid, indexing="ij"))
    z = np.tanh(w[:, None] * X[:, 0] + b[:, None])  # (points, n)
    n = len(X)
    log_density = -0.5 * (precision[0] * w**2 + precision[1] * b**2)
    mean_v, second_v = [], []
    for k in range(Y.shape[1]):
        r = Y[:, k] - w2_bias[k]
        cov = z[:, :, None] * z[:, None, :] / precision[2] + np.eye(n) / noise[k]
        chol = np.linalg.cholesky(cov)
        half = np.linalg.solve(chol, np.broadcast_to(r, z.shape)[..., None])[..., 0]
        log_density += -np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(1) - 0.5 * (
            half**2
        ).sum(1)
        # v | w, b: the Gaussian regression of r on z.
        a = precision[2] + noise[k] * np.sum(z * z, axis=1)
        mean = noise[k] * (z @ r) / a
        mean_v.append(mean)
        second_v.append(mean**2 + 1 / a)
    p = np.exp(log_density - log_density.max())
    p /= p.sum()
    moments = {"w^2": p @ w**2, "b^2": p @ b**2, "w b": p @ (w * b)}
    for k in range(Y.shape[1]):
        moments[f"w v{k}"] = p @ (w * mean_v[k])
        moments[f"v{k}^2"] = p @ second_v[k]
    return moments


@pytest.mark.parametrize("n_outputs", [1, 2])
def test_unit_redraws_sample_the_unit_posterior(n_outputs):
    # Redrawing a unit's incoming weights from the prior and its outgoing
    # weights from their conditional, accepted on the ratio of marginal
    # likelihoods, must leave p(w1, b1, v | rest, data) invariant.  With one
    # hidden unit and fixed precisions and output bias the move alone is an
    # independence sampler of that 3-D posterior; its sign-free moments are
    # compared with quadrature (the posterior is symmetric under the sign
    # flip of the unit, so first moments would prove nothing).
    layout = NetworkLayout(1, 1, n_outputs, ard=True)
    rng, n_rows = np.random.RandomState(5), 12
    X = rng.uniform(-2, 2, size=(n_rows, 1))
    signal = np.column_stack(
        [np.tanh(1.5 * X[:, 0] - 0.5), -0.5 * np.tanh(1.5 * X[:, 0] - 0.5)]
    )
    Y = signal[:, :n_outputs] + rng.normal(0, 0.4, size=(n_rows, n_outputs))
    precision = np.array([0.5, 1.0, 0.8])  # w1, b1, w2
    noise = np.array([1 / 0.4**2, 1 / 0.5**2])[:n_outputs]
    bias = np.array([0.1, -0.2])[:n_outputs]
    n_chains = 1000
    theta = np.zeros((n_chains, layout.n_params))
    theta[:, -n_outputs:] = bias
    theta[:, 0] = 1.0
    prior_precision = np.tile(
        np.concatenate(
            [precision, [precision[2]] * (n_outputs - 1), [1.0] * n_outputs]
        ),
        (n_chains, 1),
    )
    random = ChainRandom(range(n_chains))
    noise_chains = np.tile(noise, (n_chains, 1))
    draws, accepted = [], []
    for step in range(200):
        theta, accept, _ = redraw_units(
            theta, prior_precision, noise_chains, augment(X), Y, layout, random
        )
        accepted.append(accept.mean())
        if step >= 40:
            draws.append(theta.copy())
    draws = np.concatenate(draws)
    # Output biases never move.
    np.testing.assert_array_equal(
        draws[:, -n_outputs:], np.broadcast_to(bias, (len(draws), n_outputs))
    )
    w, b, v = draws[:, 0], draws[:, 1], draws[:, 2 : 2 + n_outputs]
    sampled = {"w^2": np.mean(w**2), "b^2": np.mean(b**2), "w b": np.mean(w * b)}
    for k in range(n_outputs):
        sampled[f"w v{k}"] = np.mean(w * v[:, k])
        sampled[f"v{k}^2"] = np.mean(v[:, k] ** 2)
    exact = _exact_unit_moments(X, Y, bias, precision, noise, (7.0, 6.0), 161)
    assert 0.05 < np.mean(accepted) < 0.9
    # 160 000 draws of an independence sampler accepting about a third of
    # its proposals: Monte Carlo error of these moments below 1%.
    for name, value in exact.items():
        assert sampled[name] == pytest.approx(value, rel=0.03, abs=0.01), name


def test_unit_redraw_accepts_on_the_posterior_over_proposal_ratio():
    # An independence proposal x' ~ q is accepted with probability
    # min(1, [p(x') / q(x')] / [p(x) / q(x)]).  Here q is the prior of the
    # unit's incoming weights times the Gaussian conditional of its outgoing
    # ones; p is the full network posterior (log_posterior_and_grad, another
    # code path).  p / q must not depend on the outgoing weights, and the
    # acceptance probabilities must be that ratio, unit after unit.
    layout, X, Y, theta, noise, precision = _problem(n_outputs=2)
    weights = np.linspace(0.5, 2.0, len(X))
    n_chains, d1, m = theta.shape[0], layout.n_features + 1, layout.n_outputs
    lam_in, lam_out, _ = layout.augmented.unpack(precision)

    def outgoing_conditional(th, unit):
        """Mean and precision of the unit's outgoing weights given the rest:
        the weighted least-squares regression of the residual on the unit."""
        v1 = layout.augmented.unpack(th)[0]
        without = th.copy()
        layout.augmented.unpack(without)[1][:, unit] = 0.0
        residual = Y - network_outputs(without, X, layout)  # (C, n, m)
        z = np.tanh(v1[:, :, unit] @ augment(X))  # (C, n)
        a = lam_out[:, unit] + noise * np.einsum("n,cn->c", weights, z**2)[:, None]
        return noise * np.einsum("n,cn,cnm->cm", weights, z, residual) / a, a

    def log_ratio_to_proposal(th, unit):
        v1, w2, _ = layout.augmented.unpack(th)
        mean, a = outgoing_conditional(th, unit)
        log_q = 0.5 * np.sum(np.log(a) - a * (w2[:, unit] - mean) ** 2, axis=1)
        log_q -= 0.5 * np.sum(lam_in[:, :, unit] * v1[:, :, unit] ** 2, axis=1)
        log_p, _ = log_posterior_and_grad(
            th, X, Y, noise, precision, layout, sample_weight=weights
        )
        return log_p - log_q

    rng = np.random.default_rng(1)
    for unit in (0, 3):  # p / q is free of the outgoing weights
        ratios = []
        for _ in range(3):
            moved = theta.copy()
            layout.augmented.unpack(moved)[1][:, unit] = rng.normal(size=(n_chains, m))
            ratios.append(log_ratio_to_proposal(moved, unit))
        np.testing.assert_allclose(ratios[1], ratios[0], rtol=1e-9)
        np.testing.assert_allclose(ratios[2], ratios[0], rtol=1e-9)

    new, accept_prob, network = redraw_units(
        theta, precision, noise, augment(X), Y, layout, ChainRandom([4, 5, 6]), weights
    )
    # The proposals, drawn again from the same generators in the same order.
    draws = ChainRandom([4, 5, 6])
    incoming = draws.standard_normal((n_chains, layout.n_hidden, d1))
    outgoing = draws.standard_normal((n_chains, layout.n_hidden, m))
    current = theta.copy()
    for unit in range(layout.n_hidden):
        proposal = current.copy()
        v1, w2, _ = layout.augmented.unpack(proposal)
        v1[:, :, unit] = incoming[:, unit] / np.sqrt(lam_in[:, :, unit])
        w2[:, unit] = outgoing[:, unit]  # any value: p / q does not depend on it
        log_ratio = log_ratio_to_proposal(proposal, unit) - log_ratio_to_proposal(
            current, unit
        )
        np.testing.assert_allclose(
            accept_prob[:, unit], np.exp(np.minimum(log_ratio, 0.0)), rtol=1e-8
        )
        # The chains that moved took the proposed unit, with outgoing weights
        # drawn from their conditional.
        new_v1, new_w2, _ = layout.augmented.unpack(new)
        moved = np.any(
            new_v1[:, :, unit] != layout.augmented.unpack(current)[0][:, :, unit],
            axis=1,
        )
        np.testing.assert_allclose(new_v1[moved, :, unit], v1[moved, :, unit])
        mean, a = outgoing_conditional(proposal, unit)
        np.testing.assert_allclose(
            new_w2[moved, unit], (mean + outgoing[:, unit] / np.sqrt(a))[moved]
        )
        current[moved] = proposal[moved]
        layout.augmented.unpack(current)[1][moved, unit] = new_w2[moved, unit]
    assert 0 < np.mean(accept_prob) < 1
    np.testing.assert_allclose(new, current)
    np.testing.assert_allclose(
        network.outputs_by_sample(),
        network_outputs(new, X, layout),
        rtol=1e-10,
        atol=1e-12,
    )


# ------------------------------------------------------------- sample weights

WEIGHTS = np.array([0, 1, 3, 2, 0, 1, 4, 1, 1, 2] * 3)


def _repeated(X, Y, weights=WEIGHTS):
    return np.repeat(X, weights, axis=0), np.repeat(Y, weights, axis=0)


@pytest.mark.parametrize("n_outputs", [1, 2])
def test_weighted_potential_and_gradient_equal_repeated_rows(n_outputs):
    # scikit-learn's meaning of sample_weight: an integer weight is the row
    # repeated, a zero weight the row dropped.  Same theta, same precisions.
    layout, X, Y, theta, noise, precision = _problem(n_outputs=n_outputs)
    weighted = log_posterior_and_grad(
        theta, X, Y, noise, precision, layout, sample_weight=WEIGHTS.astype(float)
    )
    repeated = log_posterior_and_grad(theta, *_repeated(X, Y), noise, precision, layout)
    for a, b in zip(weighted, repeated):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    # Fractional weights scale each row's term: against the naive loop.
    w = np.linspace(0.1, 2.0, len(X))
    log_prob, _ = log_posterior_and_grad(
        theta, X, Y, noise, precision, layout, sample_weight=w
    )
    prior = -0.5 * np.sum(precision * theta**2, axis=1)
    for c in range(theta.shape[0]):
        per_row = [
            _naive_log_posterior(
                theta[c], X[i : i + 1], Y[i : i + 1], noise[c], precision[c], layout
            )
            - prior[c]
            for i in range(len(X))
        ]
        assert log_prob[c] == pytest.approx(prior[c] + np.dot(w, per_row), rel=1e-12)


def test_weighted_gibbs_and_rescaling_moves_equal_repeated_rows():
    layout, X, Y, theta, noise, precision = _problem(n_outputs=2)
    prior = HyperPrior()
    groups = np.random.RandomState(1).gamma(2.0, 1.0, size=(3, layout.n_groups))
    Xr, Yr = _repeated(X, Y)
    w = WEIGHTS.astype(float)
    # Same generator seeds: the draws differ only if the conditionals do.
    residual = Y - network_outputs(theta, X, layout)
    residual_r = Yr - network_outputs(theta, Xr, layout)
    a = gibbs_precisions(theta, residual, layout, prior, ChainRandom([1, 2, 3]), w)
    b = gibbs_precisions(theta, residual_r, layout, prior, ChainRandom([1, 2, 3]))
    for u, v in zip(a, b):
        np.testing.assert_allclose(u, v, rtol=1e-12)
    sd = np.full((3, layout.n_groups), 0.5)
    a = rescale_groups(
        theta,
        groups,
        noise,
        augment(X),
        Y,
        layout,
        prior,
        sd,
        ChainRandom([4, 5, 6]),
        w,
    )
    b = rescale_groups(
        theta, groups, noise, augment(Xr), Yr, layout, prior, sd, ChainRandom([4, 5, 6])
    )
    for u, v in zip(a[:3], b[:3]):  # not the network: the rows differ
        np.testing.assert_allclose(u, v, rtol=1e-10)
    sd = np.full((3, layout.n_hidden), 0.5)
    a = rescale_units(
        theta, precision, noise, augment(X), Y, layout, sd, ChainRandom([7, 8, 9]), w
    )
    b = rescale_units(
        theta, precision, noise, augment(Xr), Yr, layout, sd, ChainRandom([7, 8, 9])
    )
    for u, v in zip(a[:2], b[:2]):
        np.testing.assert_allclose(u, v, rtol=1e-10)
    # The network it hands to the redraws is that of its returned weights.
    np.testing.assert_allclose(
        a[2].outputs_by_sample(), network_outputs(a[0], X, layout), rtol=1e-10
    )
    assert 0 < np.mean(a[1]) < 1  # moves both taken and refused
    # Redraws: the same proposals, the same acceptance probabilities.
    a = redraw_units(
        theta, precision, noise, augment(X), Y, layout, ChainRandom([7, 8, 9]), w
    )
    b = redraw_units(
        theta, precision, noise, augment(Xr), Yr, layout, ChainRandom([7, 8, 9])
    )
    for u, v in zip(a[:2], b[:2]):
        np.testing.assert_allclose(u, v, rtol=1e-10)
    assert 0 < np.mean(a[1]) < 1


def test_weighted_chains_follow_the_repeated_rows_chains():
    # The whole sampler (step sizes, Gibbs, rescaling, HMC) on weighted rows
    # makes the same moves as on repeated rows, up to rounding, over a short
    # run (rounding differences grow along longer chains).
    layout, X, Y, *_ = _problem(n_outputs=1)
    Xr, Yr = _repeated(X, Y)
    settings = ChainSettings(n_samples=6, n_warmup=6, n_leapfrog=5, step_size=0.1)
    weighted = NetworkPosterior(X, Y, layout, HyperPrior(), WEIGHTS * 1.0)
    a = run_chains(weighted, [3, 4], settings)
    b = run_chains(NetworkPosterior(Xr, Yr, layout, HyperPrior()), [3, 4], settings)
    np.testing.assert_allclose(a.theta, b.theta, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(a.noise_precision, b.noise_precision, rtol=1e-6)
    np.testing.assert_array_equal(a.accepted, b.accepted)


def _prior_importance_moments(X, Y, layout, prior, x_test, n_draws, seed):
    """Posterior moments of a tiny network by importance sampling from the
    prior: precisions from their Gamma priors, weights from their Gaussians,
    weighted by the normalised likelihood (the noise precision varies)."""
    rng = np.random.default_rng(seed)
    a, means = prior.a_weights, prior.group_means(layout)
    groups = rng.gamma(a / 2, 2 * means / a, size=(n_draws, layout.n_groups))
    noise = rng.gamma(
        prior.a_noise / 2, 2 * prior.w_noise / prior.a_noise, size=n_draws
    )
    precision = prior_precision_vector(groups, layout)
    theta = rng.standard_normal((n_draws, layout.n_params)) / np.sqrt(precision)
    residual = Y[None, :, 0] - network_outputs(theta, X, layout)[:, :, 0]
    log_w = 0.5 * len(X) * np.log(noise) - 0.5 * noise * np.sum(residual**2, axis=1)
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    f = network_outputs(theta, x_test, layout)[:, :, 0]
    moments = {
        "f": w @ f,
        "f^2": w @ f**2,
        "log noise": w @ np.log(noise),
        "log groups": w @ np.log(groups),
    }
    return moments, 1.0 / np.sum(w**2)


# Long chains; the hierarchical-prior and unit-redraw tests check the same
# transitions against exact references in the default suite.
@pytest.mark.slow
def test_chains_sample_the_posterior_found_by_importance_sampling():
    # The whole iteration (Gibbs steps of the precisions, both rescaling
    # moves, the redraws of hidden units, the HMC trajectory) against an
    # independent reference: importance sampling from the prior of a
    # two-unit network on six points, with priors firm enough (Gamma shapes
    # of 4) for two million prior draws to give the posterior to a few
    # thousandths.  The chains' moments must match within 4 standard errors
    # (from the spread of 64 chains' means).
    layout = NetworkLayout(1, 2, 1, ard=True)
    prior = HyperPrior(a_weights=8.0, a_noise=8.0, w_noise=4.0)
    X = np.array([[-1.5], [-0.8], [-0.2], [0.3], [0.9], [1.6]])
    Y = np.tanh(1.5 * X) + np.array([[0.2], [-0.3], [0.1], [0.25], [-0.1], [0.3]])
    x_test = np.array([[-2.5], [0.0], [1.2]])
    reference, ess = _prior_importance_moments(
        X, Y, layout, prior, x_test, 2_000_000, 0
    )
    assert ess > 20_000
    n_chains = 64
    settings = ChainSettings(n_samples=400, n_warmup=200, n_leapfrog=20, step_size=0.2)
    draws = run_chains(
        NetworkPosterior(X, Y, layout, prior), list(range(n_chains)), settings
    )
    f = network_outputs(draws.theta.reshape(-1, layout.n_params), x_test, layout)[
        :, :, 0
    ]
    f = f.reshape(draws.theta.shape[0], n_chains, -1)
    per_chain = {
        "f": f.mean(axis=0),
        "f^2": (f**2).mean(axis=0),
        "log noise": np.log(draws.noise_precision[..., 0]).mean(axis=0)[:, None],
        "log groups": np.log(draws.group_precision).mean(axis=0),
    }
    for name, values in per_chain.items():
        mean = values.mean(axis=0)
        error = values.std(axis=0, ddof=1) / np.sqrt(n_chains)
        np.testing.assert_array_less(
            np.abs(mean - np.atleast_1d(reference[name])), 4 * error + 1e-3, name
        )

"""HMCNetworkRegressor against the truth of generated data and brute-force refits."""

import re
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from callback_helpers import TickDeadline
from hmc_targets import script_rhat
from joblib import parallel_config
from sklearn.exceptions import ConvergenceWarning

from sklearn_meanfield import HMCNetworkRegressor, _memory
from sklearn_meanfield.hmc import regressor
from sklearn_meanfield.hmc._chains import ChainSettings
from sklearn_meanfield.hmc._network import NetworkLayout, network_outputs

# Fits in this file are short on purpose (the defaults keep 1000 draws per
# chain); their R-hat is often above 1.05, which the estimator rightly reports.
# The default fit is checked for silence in a slow test below.
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

NOISE = 0.1


def truth(x):
    return np.sin(2 * x) + 0.3 * x


def one_dimensional(n, seed):
    rng = np.random.RandomState(seed)
    X = rng.uniform(-2, 2, size=(n, 1))
    return X, truth(X[:, 0]) + rng.normal(0, NOISE, size=n)


@pytest.fixture(scope="module")
def fitted_1d():
    X, y = one_dimensional(100, seed=0)
    model = HMCNetworkRegressor(
        hidden_layer_size=10,
        n_samples=150,
        max_samples=None,  # 150 draws per chain, as the tests below count
        n_warmup=150,
        n_leapfrog=50,
        n_chains=4,
        n_jobs=1,
        random_state=0,
    )
    return model.fit(X, y)


def test_one_dimensional_regression_against_truth(fitted_1d):
    grid = np.linspace(-2, 2, 201)[:, None]
    mean, std = fitted_1d.predict(grid, return_std=True)
    # Within 2 noise sd of the true function across the data range.
    assert np.max(np.abs(mean - truth(grid[:, 0]))) < 2 * NOISE
    # The predictive sd (noise included) is about the noise inside the data
    # and grows outside it, where the network is unconstrained.
    assert np.median(std) == pytest.approx(NOISE, rel=0.3)
    _, outside = fitted_1d.predict(np.array([[-3.5], [3.5]]), return_std=True)
    assert np.all(outside > 2 * np.median(std))
    # Held-out error is the noise variance plus a small approximation error.
    X_test, y_test = one_dimensional(4000, seed=1)
    mse = np.mean((fitted_1d.predict(X_test) - y_test) ** 2)
    assert mse == pytest.approx(NOISE**2, rel=0.2)
    assert fitted_1d.noise_std_[0] == pytest.approx(NOISE, rel=0.2)
    # The PSIS leave-one-out error estimates the held-out error.
    assert fitted_1d.loo_error_ == pytest.approx(mse, rel=0.25)
    # PSIS is reliable almost everywhere (the estimator warns above 5% of
    # points): 600 short-chain draws leave an influential point at the edge
    # of the data (x = 1.91) just above 0.7.
    assert np.mean(fitted_1d.pareto_k_ < 0.7) >= 0.98
    assert np.all(fitted_1d.acceptance_rate_ > 0.5)


def test_sample_y_matches_predictive_moments(fitted_1d):
    X = np.array([[-1.0], [0.3], [3.0]])
    mean, std = fitted_1d.predict(X, return_std=True)
    samples = fitted_1d.sample_y(X, n_samples=6000, random_state=0)
    assert samples.shape == (3, 6000)
    # MC sd of the sample mean is std / sqrt(6000) = 0.013 std.
    np.testing.assert_allclose(samples.mean(axis=1), mean, atol=0.06 * std.max())
    np.testing.assert_allclose(samples.std(axis=1), std, rtol=0.06)
    again = fitted_1d.sample_y(X, n_samples=6000, random_state=0)
    np.testing.assert_array_equal(again, samples)
    # Without noise, the draws average to the predictive mean exactly.
    functions = fitted_1d.predict_draws(X)
    assert functions.shape == (4 * 150, 3)
    np.testing.assert_allclose(functions.mean(axis=0), mean, rtol=1e-12)


def _unblocked_predictions(model, X):
    """All draws at all rows in one network evaluation, then the moments."""
    layout = model._layout
    draws = network_outputs(
        model.parameter_draws_, model._x_scaler.transform(X), layout
    )
    draws = model._y_scaler.inverse_mean(draws)[:, :, 0]
    noise_var = np.mean(1.0 / model.noise_precision_draws_) * model._y_scaler.scale**2
    return draws, draws.mean(axis=0), np.sqrt(draws.var(axis=0) + noise_var)


@pytest.mark.parametrize("block_bytes", [None, 1])
def test_predictions_in_row_blocks_equal_the_unblocked_computation(
    fitted_1d, monkeypatch, block_bytes
):
    # Blocks of 7 rows (or of one row, when the byte budget forbids more)
    # against one evaluation of every draw at every row.
    monkeypatch.setattr(regressor, "_PREDICT_BLOCK", 7)
    if block_bytes is not None:
        monkeypatch.setattr(regressor, "_PREDICT_BLOCK_BYTES", block_bytes)
    assert regressor._row_block(600, fitted_1d._layout) == (
        7 if block_bytes is None else 1
    )
    X = np.linspace(-3, 3, 23)[:, None]
    draws, mean, std = _unblocked_predictions(fitted_1d, X)
    np.testing.assert_allclose(
        fitted_1d.predict_draws(X), draws, rtol=1e-12, atol=1e-12
    )
    blocked_mean, blocked_std = fitted_1d.predict(X, return_std=True)
    np.testing.assert_allclose(blocked_mean, mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(blocked_std, std, rtol=1e-12)
    samples = fitted_1d.sample_y(X, n_samples=50, random_state=3)
    monkeypatch.setattr(regressor, "_PREDICT_BLOCK", 10**6)
    monkeypatch.setattr(regressor, "_PREDICT_BLOCK_BYTES", 2**60)
    np.testing.assert_allclose(
        fitted_1d.sample_y(X, n_samples=50, random_state=3),
        samples,
        rtol=1e-12,
        atol=1e-12,
    )


def test_predict_draws_refuses_a_result_that_does_not_fit(fitted_1d, monkeypatch):
    # 600 draws x 20,000 rows are 96 MB: refused under a 64 MiB budget,
    # before any work, with the way out named; predict works in blocks and
    # still answers, and a few rows still fit.
    X = np.linspace(-2, 2, 20_000)[:, None]
    monkeypatch.setattr(_memory, "available_memory_bytes", lambda: 2**26)
    with pytest.raises(MemoryError, match=r"predict_draws of 600 draws at 20000 rows"):
        fitted_1d.predict_draws(X)
    with pytest.raises(MemoryError, match="smaller batches"):
        fitted_1d.sample_y(X, n_samples=600)
    assert fitted_1d.predict(X).shape == (20_000,)
    assert fitted_1d.predict_draws(X[:100]).shape == (600, 100)


def test_multi_output_noise_levels_and_shapes():
    rng = np.random.RandomState(2)
    X = rng.uniform(-2, 2, size=(150, 2))
    f = np.column_stack([np.sin(2 * X[:, 0]), X[:, 0] * X[:, 1]])
    Y = f + rng.normal(size=(150, 2)) * np.array([0.1, 0.3])
    model = HMCNetworkRegressor(
        hidden_layer_size=8,
        n_samples=100,
        n_warmup=100,
        n_leapfrog=40,
        n_chains=2,
        n_jobs=1,
        random_state=0,
    ).fit(X, Y)
    np.testing.assert_allclose(model.noise_std_, [0.1, 0.3], rtol=0.2)
    mean, std = model.predict(X[:5], return_std=True)
    assert mean.shape == std.shape == (5, 2)
    assert model.loo_prediction_.shape == (150, 2)
    assert model.sample_y(X[:5], n_samples=3).shape == (5, 2, 3)
    assert np.all(std[:, 1] > std[:, 0])


def test_chains_do_not_depend_on_n_jobs():
    X, y = one_dimensional(40, seed=3)
    params = dict(
        hidden_layer_size=3, n_samples=10, n_warmup=10, n_leapfrog=5, n_chains=3
    )
    fits = [HMCNetworkRegressor(n_jobs=1, random_state=7, **params).fit(X, y)]
    # Two workers means two batches of chains; threads keep the test light.
    with parallel_config(backend="threading"):
        fits.append(HMCNetworkRegressor(n_jobs=2, random_state=7, **params).fit(X, y))
    np.testing.assert_array_equal(fits[0].parameter_draws_, fits[1].parameter_draws_)
    np.testing.assert_array_equal(fits[0].loo_prediction_, fits[1].loo_prediction_)


def test_automatic_relevance_determination_finds_irrelevant_inputs():
    rng = np.random.RandomState(4)
    X = rng.normal(size=(120, 3))
    y = np.tanh(1.5 * X[:, 0]) + rng.normal(0, 0.1, size=120)
    model = HMCNetworkRegressor(
        hidden_layer_size=5,
        n_samples=100,
        n_warmup=100,
        n_leapfrog=30,
        n_chains=2,
        n_jobs=1,
        random_state=0,
    ).fit(X, y)
    # Posterior median precision of each input's weights (first 3 groups):
    # the two inputs that carry nothing are shrunk far harder.  A factor of
    # 5 leaves room for the spread of such short chains from seed to seed.
    precision = np.median(model.precision_draws_[:, :3], axis=0)
    assert precision[1] > 5 * precision[0] and precision[2] > 5 * precision[0]


def test_short_run_warns_about_convergence():
    X, y = one_dimensional(30, seed=5)
    model = HMCNetworkRegressor(
        hidden_layer_size=3, n_samples=4, n_warmup=2, n_leapfrog=2, n_chains=2
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.set_params(random_state=0).fit(X, y)
    messages = [str(w.message) for w in caught if w.category is ConvergenceWarning]
    assert any("R-hat" in m for m in messages)
    # 8 draws leave no tail to fit: every k-hat is unusable.
    assert any("k-hat" in m for m in messages)
    assert np.all(np.isfinite(model.predict(X)))
    assert np.isfinite(model.loo_error_)


def _worst_at(index, n_samples, n_outputs, layout):
    """Diagnostics whose largest R-hat is at monitored quantity ``index``."""
    n_quantities = n_samples * n_outputs + n_outputs + layout.n_groups
    rhat = np.full(n_quantities, 1.01)
    rhat[index] = 1.4
    return rhat, np.full(n_quantities, 100.0)


@pytest.mark.parametrize(
    "ard, n_outputs, index, named",
    [
        # Quantities in the order _monitored stacks them: 5 samples x outputs,
        # the noise precisions, then the groups W1[0..2] (or W1), b1, W2, b2.
        (True, 1, 3, "the prediction at training sample 3"),
        (True, 2, 7, "the prediction at training sample 3 (output 1)"),
        (True, 1, 5, "the noise precision"),
        (True, 2, 11, "the noise precision of output 1"),
        (True, 1, 7, "the relevance precision of input 1 ('bmi'), column 1"),
        (False, 1, 6, "the precision of the input-to-hidden weights, column 0"),
        (True, 1, 9, "the precision of the hidden biases, column 3"),
        (True, 2, 16, "the precision of the hidden-to-output weights, column 4"),
        (False, 1, 9, "the precision of the output biases, column 3"),
    ],
)
def test_convergence_warning_names_the_worst_quantity(ard, n_outputs, index, named):
    layout = NetworkLayout(n_features=3, n_hidden=2, n_outputs=n_outputs, ard=ard)
    draws = SimpleNamespace(
        stopped_in_warmup=False,
        train_outputs=np.zeros((10, 2, 5, n_outputs)),
        n_divergent=np.zeros(2, dtype=int),
    )
    with pytest.warns(ConvergenceWarning, match="R-hat") as caught:
        regressor._check_convergence(
            draws,
            _worst_at(index, 5, n_outputs, layout),
            ChainSettings(
                n_samples=10,
                n_warmup=10,
                n_leapfrog=5,
                sampler="hmc",
            ),
            layout=layout,
            feature_names=np.array(["age", "bmi", "bp"], dtype=object),
        )
    if "column" in named:
        named += " of precision_draws_"
    expected = f"The 2 chains disagree: R-hat 1.400 > 1.05, for {named}."
    assert expected in str(caught[0].message), str(caught[0].message)


def test_convergence_warning_names_the_column_of_a_data_frame(monkeypatch):
    # The fit hands its layout and feature names to the warning: a relevance
    # precision is named by its column of X.
    pd = pytest.importorskip("pandas")
    X, y = one_dimensional(30, seed=5)
    X = pd.DataFrame({"dose": X[:, 0], "noise": np.random.RandomState(1).rand(30)})
    n_monitored = 30 + 1 + (2 + 3)  # predictions, noise, W1[0], W1[1], b1, W2, b2

    def second_input_disagrees(monitored):
        assert monitored.shape[2] == n_monitored
        rhat, ess = np.full(n_monitored, 1.0), np.full(n_monitored, 500.0)
        rhat[30 + 1 + 1] = 1.5
        return rhat, ess

    monkeypatch.setattr(regressor, "rhat_and_bulk_ess", second_input_disagrees)
    model = HMCNetworkRegressor(
        hidden_layer_size=3, n_samples=4, n_warmup=2, n_leapfrog=2, n_chains=2
    )
    with pytest.warns(ConvergenceWarning, match="R-hat") as caught:
        model.set_params(random_state=0).fit(X, y)
    message = next(str(w.message) for w in caught if "R-hat" in str(w.message))
    assert (
        "R-hat 1.500 > 1.05, for the relevance precision of input 1 ('noise'), "
        "column 1 of precision_draws_" in message
    ), message


@pytest.mark.parametrize("n_samples", [0, -1, 2.7, "3"])
def test_sample_y_refuses_a_number_of_draws_that_is_no_positive_integer(
    fitted_1d, n_samples
):
    X = np.zeros((3, 1))
    with pytest.raises(ValueError, match="'n_samples' parameter"):
        fitted_1d.sample_y(X, n_samples=n_samples)
    assert fitted_1d.sample_y(X, n_samples=np.int64(2)).shape == (3, 2)


def test_default_keeps_n_samples_draws_and_names_max_samples(monkeypatch):
    # Chains the continuation rule would take on (R-hat 1.2): by default
    # every chain keeps n_samples draws, and the warning names max_samples.
    script_rhat(monkeypatch, lambda n_draws: 1.2)
    X, y = one_dimensional(30, seed=6)
    model = HMCNetworkRegressor(
        hidden_layer_size=2, n_samples=8, n_warmup=8, n_leapfrog=3, n_chains=2
    )
    assert model.max_samples is None
    with pytest.warns(ConvergenceWarning, match="R-hat") as caught:
        model.set_params(random_state=0).fit(X, y)
    assert model.n_draws_ == 8
    assert model.parameter_draws_.shape[0] == 2 * 8
    message = next(str(w.message) for w in caught if "R-hat" in str(w.message))
    assert message.endswith(
        "Set max_samples='auto' to continue the chains until they agree."
    )


def test_verbose_acceptance_is_the_mean_over_each_block(monkeypatch, capsys):
    # Continued runs start within a block of iterations (the blocks are a
    # tenth of each run's iterations): each line's mean acceptance must be
    # that of the iterations the line covers, which the per-draw statistics
    # give independently.
    n_warmup = n_samples = 20
    script_rhat(monkeypatch, lambda n_draws: 1.2 if n_draws < 60 else 1.0)
    X, y = one_dimensional(30, seed=6)
    model = HMCNetworkRegressor(
        hidden_layer_size=3,
        n_samples=n_samples,
        max_samples="auto",
        n_warmup=n_warmup,
        n_leapfrog=3,
        n_chains=2,
        n_jobs=1,
        verbose=1,
        random_state=0,
    ).fit(X, y)
    assert model.n_draws_ == 60  # two continuations
    acceptance = model.chain_draws()["acceptance_rate"]  # (n_chains, n_kept)
    lines = re.findall(
        r"iteration (\d+)/(\d+) \(sampling\), mean acceptance \[([^\]]*)\]",
        capsys.readouterr().out,
    )
    partial = 0
    for done, total, printed in lines:
        done, total = int(done), int(total)
        # A run ends at `total` iterations; a continuation starts n_samples
        # draws before its end, the first run at 0.
        start = 0 if total == n_warmup + n_samples else total - n_samples
        first = max(done - max(total // 10, 1), start)
        partial += first == start > 0
        expected = acceptance[:, first - n_warmup : done - n_warmup].mean(axis=1)
        # Printed with two decimals.
        np.testing.assert_allclose(
            [float(v) for v in printed.split()], expected, atol=0.006
        )
    assert partial == 2  # each continuation's first line covers part of a block


def test_draws_do_not_depend_on_the_memory_layout_of_the_data():
    # The same data row-major, column-major and as DataFrames (which are
    # column-major after validation): the same model, draw for draw.
    pd = pytest.importorskip("pandas")
    rng = np.random.RandomState(3)
    X = rng.uniform(-2, 2, size=(40, 3))
    Y = np.column_stack([truth(X[:, 0]), np.tanh(X[:, 1])])
    Y += NOISE * rng.normal(size=Y.shape)
    X_test = rng.uniform(-2, 2, size=(9, 3))
    params = dict(
        hidden_layer_size=3,
        n_samples=12,
        n_warmup=12,
        n_leapfrog=5,
        n_chains=2,
        random_state=0,
    )
    columns = ["a", "b", "c"]
    fits = {
        "C": (X, Y, X_test),
        "F": (np.asfortranarray(X), np.asfortranarray(Y), np.asfortranarray(X_test)),
        "DataFrame": (
            pd.DataFrame(X, columns=columns),
            pd.DataFrame(Y, columns=["y0", "y1"]),
            pd.DataFrame(X_test, columns=columns),
        ),
    }
    assert not np.asarray(fits["DataFrame"][0]).flags.c_contiguous
    results = {}
    for name, (X_fit, Y_fit, X_pred) in fits.items():
        model = HMCNetworkRegressor(**params).fit(X_fit, Y_fit)
        results[name] = (
            model.parameter_draws_,
            model.noise_precision_draws_,
            model.precision_draws_,
            *model.predict(X_pred, return_std=True),
            model.predict_draws(X_pred),
            model.sample_y(X_pred, n_samples=3, random_state=1),
            model.loo_prediction_,
        )
    for name in ("F", "DataFrame"):
        for reference, value in zip(results["C"], results[name]):
            np.testing.assert_array_equal(np.asarray(value), reference)
    # Predictions of one model on rows in either layout agree too.
    model = HMCNetworkRegressor(**params).fit(X, Y)
    np.testing.assert_array_equal(
        model.predict_draws(np.asfortranarray(X_test)), model.predict_draws(X_test)
    )


def test_verbose_reports_chain_progress(capsys):
    X, y = one_dimensional(30, seed=6)
    HMCNetworkRegressor(
        hidden_layer_size=3,
        n_samples=10,
        n_warmup=10,
        n_leapfrog=3,
        n_chains=2,
        n_jobs=1,
        verbose=1,
        random_state=0,
    ).fit(X, y)
    out = capsys.readouterr().out
    assert "iteration 20/20 (sampling)" in out
    assert "acceptance" in out and "noise sd" in out and "R-hat" in out


@pytest.mark.slow
def test_loo_error_matches_brute_force_refits():
    # Leave each point out, refit, predict it: the reference PSIS-LOO saves.
    X, y = one_dimensional(30, seed=7)
    params = dict(
        hidden_layer_size=6,
        n_samples=250,
        n_warmup=150,
        n_leapfrog=30,
        n_chains=4,
        n_jobs=2,
        random_state=0,
    )
    model = HMCNetworkRegressor(**params).fit(X, y)
    brute = np.empty(len(y))
    log_density = np.empty(len(y))
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        refit = HMCNetworkRegressor(**params).fit(X[keep], y[keep])
        mean, std = refit.predict(X[i : i + 1], return_std=True)
        brute[i] = mean[0]
        # Log predictive density of the mixture over draws.
        draws = refit.predict_draws(X[i : i + 1])[:, 0]
        sd = refit._y_scaler.scale[0] / np.sqrt(refit.noise_precision_draws_[:, 0])
        log_p = -0.5 * ((y[i] - draws) / sd) ** 2 - np.log(sd * np.sqrt(2 * np.pi))
        log_density[i] = np.log(np.mean(np.exp(log_p)))
    brute_mse = np.mean((y - brute) ** 2)
    assert model.loo_error_ == pytest.approx(brute_mse, rel=0.15)
    assert model.loo_log_density_.sum() == pytest.approx(log_density.sum(), abs=3.0)


@pytest.mark.slow
def test_default_fit_converges_on_the_predictions():
    # A default fit on a few hundred points: the chains agree on the
    # predictions (split R-hat below 1.05, bulk ESS in the hundreds) and the
    # prediction is as good as the noise allows: Friedman's function with
    # noise sd 1 has a held-out RMSE of 1 for the true function.  The log
    # precisions mix more slowly (the hidden biases' precision most), so
    # their R-hat gets only a loose bound that holds whatever the rounding.
    from sklearn.datasets import make_friedman1

    from sklearn_meanfield.diagnostics import effective_sample_size, split_rhat

    X, y = make_friedman1(n_samples=200, noise=1.0, random_state=0)
    X_test, y_test = make_friedman1(n_samples=2000, noise=1.0, random_state=1)
    model = HMCNetworkRegressor(n_jobs=2, random_state=0)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*divergent", category=Warning)
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X, y)
    per_chain = model.predict_draws(X_test).reshape(model.n_chains, -1, len(X_test))
    assert split_rhat(per_chain).max() < 1.05
    assert effective_sample_size(per_chain).min() > 100
    assert model.rhat_ < 1.2
    rmse = np.sqrt(np.mean((model.predict(X_test) - y_test) ** 2))
    assert rmse < 1.4
    mean, std = model.predict(X_test, return_std=True)
    # Predictive sd calibrated: standardised held-out errors have unit variance.
    assert np.mean(((y_test - mean) / std) ** 2) == pytest.approx(1.0, abs=0.25)


# ------------------------------------------------------------- sample weights

WEIGHTED = dict(
    hidden_layer_size=4, n_samples=200, n_warmup=150, n_leapfrog=20, n_chains=2
)


def test_integer_weights_give_the_posterior_of_repeated_rows():
    # Statistically: the two posteriors are the same, the chains are not (the
    # sums run in another order), so predictions agree within Monte Carlo
    # error (the predictive sd over sqrt(ESS) is about 0.03 here).
    X, y = one_dimensional(40, seed=9)
    w = np.random.RandomState(0).randint(1, 4, size=40)
    grid = np.linspace(-1.8, 1.8, 9)[:, None]
    weighted = HMCNetworkRegressor(random_state=0, **WEIGHTED)
    weighted.fit(X, y, sample_weight=w)
    repeated = HMCNetworkRegressor(random_state=1, **WEIGHTED)
    repeated.fit(np.repeat(X, w, axis=0), np.repeat(y, w))
    unweighted = HMCNetworkRegressor(random_state=1, **WEIGHTED).fit(X, y)
    mean_w, std_w = weighted.predict(grid, return_std=True)
    mean_r, std_r = repeated.predict(grid, return_std=True)
    np.testing.assert_allclose(mean_w, mean_r, atol=0.06)
    np.testing.assert_allclose(std_w, std_r, rtol=0.2)
    assert weighted.noise_std_[0] == pytest.approx(repeated.noise_std_[0], rel=0.1)
    # The weights matter: with twice the data on average, the function's
    # posterior spread is narrower than the unweighted fit's.
    spread_w = weighted.predict_draws(grid).std(axis=0)
    spread_u = unweighted.predict_draws(grid).std(axis=0)
    assert np.median(spread_w / spread_u) < 0.85


def test_zero_weight_rows_are_left_out():
    X, y = one_dimensional(30, seed=10)
    w = np.ones(30)
    w[:5] = 0.0
    X_bad, y_bad = X.copy(), y.copy()
    y_bad[:5] = 50.0  # outliers that only a zero weight can silence
    X_bad[:5] = 9.0
    params = dict(
        hidden_layer_size=3,
        n_samples=20,
        n_warmup=20,
        n_leapfrog=10,
        n_chains=2,
        random_state=0,
        # Draw-for-draw agreement needs double-precision kicks: single
        # precision rounds the sums with and without the zero terms apart by
        # 1e-7, which the trajectories amplify.
        gradient_dtype="float64",
    )
    weighted = HMCNetworkRegressor(**params).fit(X_bad, y_bad, sample_weight=w)
    dropped = HMCNetworkRegressor(**params).fit(X[5:], y[5:])
    # Same standardisation, same potential: the chains only differ by rounding
    # of sums that include the zero terms, so the draws agree closely.
    np.testing.assert_allclose(
        weighted.parameter_draws_, dropped.parameter_draws_, rtol=1e-6, atol=1e-8
    )
    # The zero-weight rows' leave-one-out posterior is the posterior itself.
    draws = weighted.predict_draws(X_bad[:5])
    np.testing.assert_allclose(
        weighted.loo_prediction_[:5], draws.mean(axis=0), rtol=1e-12
    )
    np.testing.assert_array_equal(weighted.pareto_k_[:5], 0.0)
    # loo_error_ is the weighted mean: the outliers do not count.
    np.testing.assert_allclose(
        weighted.loo_error_,
        np.mean((y[5:] - weighted.loo_prediction_[5:]) ** 2),
        rtol=1e-12,
    )


@pytest.mark.slow
def test_weighted_leave_one_out_matches_brute_force_refits():
    # A row of weight 3 is left out whole: refit without it and predict it.
    X, y = one_dimensional(20, seed=11)
    w = np.tile([1.0, 3.0], 10)
    params = dict(
        hidden_layer_size=4,
        n_samples=400,
        n_warmup=200,
        n_leapfrog=30,
        n_chains=4,
        n_jobs=2,
        random_state=0,
    )
    model = HMCNetworkRegressor(**params).fit(X, y, sample_weight=w)
    rows = [1, 7, 12, 19]
    brute = []
    for i in rows:
        keep = np.arange(20) != i
        refit = HMCNetworkRegressor(**params).fit(
            X[keep], y[keep], sample_weight=w[keep]
        )
        brute.append(refit.predict(X[i : i + 1])[0])
    # A heavy row pulls the fit towards itself: its leave-one-out prediction
    # moves away from y_i by more than the in-sample prediction does.
    in_sample = model.predict(X[rows])
    np.testing.assert_allclose(model.loo_prediction_[rows], brute, atol=0.05)
    assert np.mean(np.abs(model.loo_prediction_[rows] - y[rows])) > np.mean(
        np.abs(in_sample - y[rows])
    )


# ---------------------------------------------------------------- memory guard


def test_fit_too_large_for_memory_is_refused_before_sampling(monkeypatch):
    # The case: 5e6 draws x 4 chains x 100 points was accepted and
    # would allocate 14.9 GiB of network outputs alone.
    monkeypatch.setattr(
        "sklearn_meanfield._memory.available_memory_bytes", lambda: 8 * 2**30
    )
    X, y = one_dimensional(100, seed=12)
    model = HMCNetworkRegressor(hidden_layer_size=10, n_samples=5_000_000)
    with pytest.raises(MemoryError, match=r"n_samples=5000000 .* needs about 85\.3"):
        model.fit(X, y)
    assert not hasattr(model, "parameter_draws_")


# ------------------------------------------------------- stopping in warm-up


def test_a_deadline_during_warm_up_stops_at_once_with_a_usable_model():
    pytest.importorskip("sklearn.callback")
    X, y = one_dimensional(60, seed=13)
    # 1000 iterations per chain in blocks of 100: the deadline falls in the
    # first block of warm-up.  Before the fix, the chains ran the 900
    # warm-up iterations left before stopping.
    deadline = TickDeadline(deadline=1, task_name="iterations")
    model = HMCNetworkRegressor(
        hidden_layer_size=6,
        n_samples=200,
        n_warmup=800,
        n_leapfrog=20,
        n_chains=2,
        n_jobs=1,
        random_state=0,
    ).set_callbacks(deadline)
    with pytest.warns(ConvergenceWarning, match="during warm-up"):
        model.fit(X, y)
    # One block per chain (chain, block), then the end.
    assert deadline.ended == [(0, 0), (1, 0)]
    assert model.parameter_draws_.shape[0] == 2 * 4
    # 100 warm-up iterations already find the function.
    grid = np.linspace(-1.8, 1.8, 20)[:, None]
    mean, std = model.predict(grid, return_std=True)
    assert np.all(np.isfinite(std)) and np.all(std > 0)
    assert np.sqrt(np.mean((mean - truth(grid[:, 0])) ** 2)) < 0.3
    assert np.isfinite(model.loo_error_)


# ---------------------------------------------------------------- shapes of y


def test_one_column_y_gives_the_shapes_of_gaussian_process_regressor():
    from sklearn.gaussian_process import GaussianProcessRegressor

    X, y = one_dimensional(30, seed=14)
    Y = y[:, None]
    model = HMCNetworkRegressor(
        hidden_layer_size=3,
        n_samples=10,
        n_warmup=10,
        n_leapfrog=5,
        n_chains=2,
        random_state=0,
    ).fit(X, Y)
    gpr = GaussianProcessRegressor().fit(X, Y)
    for ours, peer in [
        (model.predict(X[:4]), gpr.predict(X[:4])),
        (model.predict(X[:4], return_std=True)[1], gpr.predict(X[:4], True)[1]),
        (model.sample_y(X[:4], 3), gpr.sample_y(X[:4], 3)),
    ]:
        assert ours.shape == peer.shape
    assert model.predict_draws(X[:4]).shape == (20, 4)
    # loo_prediction_ keeps the shape of y (the package contract).
    assert model.loo_prediction_.shape == (30, 1)
    flat = HMCNetworkRegressor(**model.get_params()).fit(X, y)
    np.testing.assert_array_equal(model.predict(X), flat.predict(X))
    np.testing.assert_array_equal(model.loo_prediction_[:, 0], flat.loo_prediction_)

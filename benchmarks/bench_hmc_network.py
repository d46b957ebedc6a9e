"""HMCNetworkRegressor against scikit-learn's regressors, side by side.

Usage: ``python benchmarks/bench_hmc_network.py [--quick]``, or
``python benchmarks/bench_hmc_network.py --anneal [--sizes 200 1000] [--seeds 0 1]``

For ``make_friedman1`` (n = 200 and 1000, noise sd 1) and ``load_diabetes``
(a 75/25 split) the table gives test RMSE, test negative log predictive density
(NLPD, Gaussian with the model's predictive mean and sd; MLPRegressor gets the
sd of its training residuals) and fit time of HMCNetworkRegressor,
MLPRegressor, BayesianRidge and GaussianProcessRegressor, with the ratios of
ours to each peer; then HMC's effective samples per second, and the cost of one
log-posterior gradient against the two matrix products with the data it needs
(the floor), for one chain and per chain when chains are batched, in double
precision and in the single precision of the default leapfrog kicks
(``gradient_dtype="float32"``).

``--anneal`` runs instead HMCNetworkRegressor alone on friedman1 (the sizes
given, noise sd 1, 10 hidden units, 4 chains, ``n_jobs=2``, the seeds given)
with both samplers, without and with ``anneal_warmup``: largest split R-hat
over the test predictions (2000 points) and the log hyperparameters, smallest
bulk ESS of the test predictions, that ESS per thousand leapfrog steps of the
kept draws and per second, test MSE, fit seconds and divergences, with the
load average.
"""

import argparse
import os
import time
import warnings

import numpy as np
from sklearn.compose import TransformedTargetRegressor
from sklearn.datasets import load_diabetes, make_friedman1
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
from sklearn.linear_model import BayesianRidge
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sklearn_meanfield import HMCNetworkRegressor
from sklearn_meanfield.diagnostics import effective_sample_size, split_rhat

# Private on purpose: gradient_cost measures the sampler's own inner loop (one
# log-posterior gradient of the network against the matrix products it needs),
# an internal of HMCNetworkRegressor with no public counterpart.
from sklearn_meanfield.hmc._network import (
    NetworkLayout,
    augment,
    log_posterior_and_grad,
    log_posterior_gradient,
)


def datasets(quick):
    sizes = (200,) if quick else (200, 1000)
    for n in sizes:
        X, y = make_friedman1(n_samples=n, noise=1.0, random_state=0)
        X_test, y_test = make_friedman1(n_samples=2000, noise=1.0, random_state=1)
        yield f"friedman1 n={n}", X, y, X_test, y_test
    X, y = load_diabetes(return_X_y=True)
    X, X_test, y, y_test = train_test_split(X, y, test_size=0.25, random_state=0)
    yield f"diabetes n={len(y)}", X, y, X_test, y_test


def models(quick, n_features):
    # Chains that disagree are continued (max_samples="auto"): the benchmark
    # measures the fit a user makes to get converged chains.
    hmc = dict(hidden_layer_size=10, max_samples="auto", n_jobs=2, random_state=0)
    if quick:
        hmc.update(n_samples=60, n_warmup=60, n_leapfrog=30)
    kernel = ConstantKernel(1.0) * RBF(np.ones(n_features)) + WhiteKernel(0.1)
    return {
        "HMCNetwork": make_pipeline(StandardScaler(), HMCNetworkRegressor(**hmc)),
        "MLP": make_pipeline(
            StandardScaler(),
            TransformedTargetRegressor(
                MLPRegressor(hidden_layer_sizes=(10,), max_iter=3000, random_state=0),
                transformer=StandardScaler(),
            ),
        ),
        "BayesianRidge": make_pipeline(StandardScaler(), BayesianRidge()),
        "GP": make_pipeline(
            StandardScaler(),
            GaussianProcessRegressor(
                kernel, normalize_y=True, n_restarts_optimizer=0, random_state=0
            ),
        ),
    }


def gaussian_nlpd(y, mean, std):
    return float(
        np.mean(0.5 * ((y - mean) / std) ** 2 + np.log(std * np.sqrt(2 * np.pi)))
    )


def evaluate(name, model, X, y, X_test, y_test):
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        model.fit(X, y)
    seconds = time.perf_counter() - start
    # Which convergence warnings the fit raised: R-hat, k-hat, divergences.
    kinds = sorted(
        {
            kind
            for w in caught
            if issubclass(w.category, ConvergenceWarning)
            for kind in ("R-hat", "k-hat", "divergent")
            if kind in str(w.message)
        }
    )
    if name == "MLP":
        mean = model.predict(X_test)
        std = np.full_like(mean, np.std(y - model.predict(X)))
    else:
        mean, std = model.predict(X_test, return_std=True)
        if name == "BayesianRidge" or name == "GP":
            std = np.asarray(std)
    rmse = float(np.sqrt(np.mean((y_test - mean) ** 2)))
    return dict(
        rmse=rmse,
        nlpd=gaussian_nlpd(y_test, mean, std),
        seconds=seconds,
        warnings=",".join(kinds) or "-",
    )


def _best_cpu_time(function, repeats):
    """Smallest CPU time per call over 5 rounds (robust to a busy machine)."""
    best = np.inf
    for _ in range(5):
        start = time.process_time()
        for _ in range(repeats):
            function()
        best = min(best, (time.process_time() - start) / repeats)
    return best


def gradient_cost(n_samples, n_features, n_hidden, n_chains, repeats=200):
    """CPU seconds per gradient (per chain) in double and in single precision
    (the default leapfrog kicks), per floor (two products with X), and per
    floor plus the tanh of the hidden units (double precision)."""
    rng = np.random.RandomState(0)
    X = rng.normal(size=(n_samples, n_features))
    Y = rng.normal(size=(n_samples, 1))
    layout = NetworkLayout(n_features, n_hidden, 1)
    theta = rng.normal(size=(n_chains, layout.n_params)) * 0.3
    noise = np.ones((n_chains, 1))
    precision = np.ones((n_chains, layout.n_params))
    xa_t = augment(X)
    grad = _best_cpu_time(
        lambda: log_posterior_and_grad(
            theta, X, Y, noise, precision, layout, X_augmented_T=xa_t
        ),
        repeats,
    )
    xa_t32, Y32 = xa_t.astype(np.float32), Y.astype(np.float32)
    single = _best_cpu_time(
        lambda: log_posterior_gradient(theta, Y32, noise, precision, layout, xa_t32),
        repeats,
    )
    v1 = theta[0, : (n_features + 1) * n_hidden].reshape(n_features + 1, n_hidden)
    delta = rng.normal(size=(n_samples, n_hidden))

    def floor_products():
        xa_t.T @ v1
        xa_t @ delta

    def floor_with_tanh():
        np.tanh(xa_t.T @ v1)
        xa_t @ delta

    return (
        grad / n_chains,
        single / n_chains,
        _best_cpu_time(floor_products, repeats),
        _best_cpu_time(floor_with_tanh, repeats),
    )


def sampler_run(n, seed=0, **params):
    """One fit on friedman1 for the --anneal table, with
    ``params`` of HMCNetworkRegressor; returns its row as a dict."""
    X, y = make_friedman1(n_samples=n, noise=1.0, random_state=0)
    X_test, y_test = make_friedman1(n_samples=2000, noise=1.0, random_state=1)
    params = {"max_samples": "auto", **params}
    est = HMCNetworkRegressor(
        hidden_layer_size=10, n_jobs=2, random_state=seed, **params
    )
    load = os.getloadavg()[0]
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
    seconds = time.perf_counter() - start
    # predict_draws is chain after chain: (n_chains, n_kept, n_test).
    draws = est.predict_draws(X_test).reshape(est.n_chains, -1, len(X_test))
    hyper = np.log(
        np.concatenate([est.precision_draws_, est.noise_precision_draws_], axis=1)
    ).reshape(est.n_chains, draws.shape[1], -1)
    ess = float(np.min(effective_sample_size(draws)))
    steps = float(np.sum(est.chain_draws()["n_steps"]))
    return dict(
        rhat=float(max(np.max(split_rhat(draws)), np.max(split_rhat(hyper)))),
        ess=ess,
        ess_per_k=1000 * ess / steps,
        mse=float(np.mean((y_test - draws.mean(axis=(0, 1))) ** 2)),
        seconds=seconds,
        divergent=int(np.sum(est.n_divergent_)),
        load=(load, os.getloadavg()[0]),
    )


def anneal_table(sizes, seeds):
    """Both samplers without and with anneal_warmup, for every size and seed."""
    header = (
        f"{'data':16s} {'seed':>4s} {'sampler':7s} {'anneal':6s} {'R-hat':>6s} "
        f"{'ESS':>6s} {'ESS/1k':>7s} {'ESS/s':>6s} {'MSE':>6s} {'fit s':>6s} "
        f"{'div':>4s} load"
    )
    print(header)
    print("-" * len(header))
    for n in sizes:
        for seed in seeds:
            for sampler in ("hmc", "chees"):
                for anneal in (False, True):
                    r = sampler_run(n, seed, sampler=sampler, anneal_warmup=anneal)
                    print(
                        f"{'friedman1 n=' + str(n):16s} {seed:4d} {sampler:7s} "
                        f"{'yes' if anneal else '-':6s} {r['rhat']:6.3f} "
                        f"{r['ess']:6.0f} {r['ess_per_k']:7.3f} "
                        f"{r['ess'] / r['seconds']:6.2f} {r['mse']:6.3f} "
                        f"{r['seconds']:6.0f} {r['divergent']:4d} "
                        f"{r['load'][0]:.1f}-{r['load'][1]:.1f}",
                        flush=True,
                    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller, shorter runs")
    parser.add_argument(
        "--anneal",
        action="store_true",
        help="only HMCNetworkRegressor, with and without anneal_warmup",
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 1000])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args(argv)
    if args.anneal:
        anneal_table(args.sizes, args.seeds)
        return

    rows = []
    hmc_diag = []
    for label, X, y, X_test, y_test in datasets(args.quick):
        results = {}
        for name, model in models(args.quick, X.shape[1]).items():
            results[name] = evaluate(name, model, X, y, X_test, y_test)
            print(f"{label:18s} {name:14s} {results[name]}", flush=True)
            if name == "HMCNetwork":
                est = model[-1]
                # Bulk ESS of the network output at the training points, per
                # chain (draws are stored chain after chain).
                draws = est.predict_draws(model[0].transform(X))
                per_chain = draws.reshape(est.n_chains, est.n_draws_, -1)
                ess = effective_sample_size(per_chain)
                hmc_diag.append(
                    (
                        label,
                        est.ess_,
                        float(np.median(ess)),
                        float(np.median(ess)) / results[name]["seconds"],
                        est.rhat_,
                        float(np.median(split_rhat(per_chain))),
                        est.loo_error_**0.5,
                        float(np.mean(est.acceptance_rate_)),
                        int(np.sum(est.pareto_k_ > 0.7)),
                        results[name]["warnings"],
                    )
                )
        rows.append((label, results))

    print("\nTest RMSE / NLPD / fit seconds (ratio = HMCNetwork / peer)")
    header = f"{'data':18s} {'model':14s} {'RMSE':>8s} {'NLPD':>8s} {'fit s':>8s}"
    header += f" {'RMSE ratio':>10s} {'time ratio':>10s}"
    print(header)
    print("-" * len(header))
    for label, results in rows:
        ours = results["HMCNetwork"]
        for name, r in results.items():
            ratio = "" if name == "HMCNetwork" else f"{ours['rmse'] / r['rmse']:10.3f}"
            tratio = (
                ""
                if name == "HMCNetwork"
                else f"{ours['seconds'] / r['seconds']:10.1f}"
            )
            print(
                f"{label:18s} {name:14s} {r['rmse']:8.3f} {r['nlpd']:8.3f} "
                f"{r['seconds']:8.2f} {ratio:>10s} {tratio:>10s}"
            )

    print("\nHMCNetwork diagnostics (ESS: bulk, of the network output at the")
    print("training points unless 'min'; min and max R-hat over everything")
    print("monitored incl. the hyperparameters, median over the outputs)")
    print(
        f"{'data':18s} {'min ESS':>8s} {'med ESS':>8s} {'ESS/s':>7s} "
        f"{'max R-hat':>9s} {'med R-hat':>9s} {'LOO RMSE':>9s} {'accept':>7s} "
        f"{'k>0.7':>6s} warnings"
    )
    for label, ess, med, med_s, rhat, med_rhat, loo, acc, bad, warned in hmc_diag:
        print(
            f"{label:18s} {ess:8.0f} {med:8.0f} {med_s:7.2f} {rhat:9.3f} "
            f"{med_rhat:9.3f} {loo:9.3f} {acc:7.2f} {bad:6d} {warned}"
        )

    print("\nGradient cost (10 hidden units, 10 inputs), CPU microseconds per")
    print("chain; floor = [X, 1] @ [W1; b1] plus its transpose product, one chain;")
    print("floor+tanh adds the tanh of the (n, 10) pre-activations")
    print("(double precision); f32/chain: the single-precision gradient of the")
    print("default leapfrog kicks, per chain, and its speed-up over grad/chain")
    print(
        f"{'n':>6s} {'chains':>6s} {'grad/chain':>11s} {'floor':>8s} {'ratio':>6s} "
        f"{'floor+tanh':>10s} {'ratio':>6s} {'f32/chain':>10s} {'speed-up':>8s}"
    )
    for n, batches in ((200, (1, 2, 4, 8)), (1000, (1, 2, 4, 8)), (5000, (1, 2))):
        for chains in batches:
            grad, single, floor, floor_tanh = gradient_cost(
                n, 10, 10, chains, repeats=200 if n < 5000 else 40
            )
            print(
                f"{n:6d} {chains:6d} {grad * 1e6:11.1f} {floor * 1e6:8.1f} "
                f"{grad / floor:6.1f} {floor_tanh * 1e6:10.1f} "
                f"{grad / floor_tanh:6.1f} "
                f"{single * 1e6:10.1f} {grad / single:8.2f}"
            )


if __name__ == "__main__":
    main()

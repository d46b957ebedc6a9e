"""EnsembleLearningRegressor next to its peers: test RMSE, NLPD and fit time.

Data: ``make_friedman1`` (noise sd 1, n_train = 200 and 1000, 2000 test points)
and ``load_diabetes`` (a fixed 75/25 split).  Peers: MLPRegressor,
BayesianRidge, GaussianProcessRegressor (ARD RBF + white noise) and
HMCNetworkRegressor; our estimator with full, low-rank and diagonal
covariance.  Ratios are to the full-covariance row of each data set (RMSE and
time: ratio; NLPD: difference, since it is a log score).  NLPD is the mean
negative log density of the test targets under each model's Gaussian
predictive distribution; MLPRegressor has none, so it gets a Gaussian with the
training residual sd (a plug-in, marked with *).  Fit times are CPU seconds of
one process (every model runs with n_jobs=1).  For our estimator with several
restarts, the spread of the restarts' final bounds (nats per sample) is printed
too: above 0.05 the restarts found separate optima.

``--scaling`` measures only the fit time as the data grow (friedman1, n = 500,
2000 and 5000; the full mode ends with the same table): our defaults against
MLPRegressor, wall and CPU seconds side by side in this process.

Run: ``python benchmarks/bench_ensemble_learning.py [--quick] [--only NAME]
[--scaling]``.
"""

import argparse
import time
import warnings

import numpy as np
from sklearn.datasets import load_diabetes, make_friedman1
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
from sklearn.linear_model import BayesianRidge
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import sklearn_meanfield
from sklearn_meanfield import EnsembleLearningRegressor


def datasets(quick):
    sizes = (200,) if quick else (200, 1000)
    for n in sizes:
        X, y = make_friedman1(n_samples=n + 2000, noise=1.0, random_state=0)
        yield f"friedman1 n={n}", X[:n], y[:n], X[n:], y[n:]
    if not quick:
        X, y = load_diabetes(return_X_y=True)
        X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.25, random_state=0)
        yield f"diabetes n={len(y_tr)}", X_tr, y_tr, X_te, y_te


def models(quick, n_features):
    # Our defaults (two restarts, natural-gradient iterations to the
    # relative-change tolerance); the slow low-rank family is capped at 20
    # L-BFGS phases of 100 iterations.
    ours = dict(hidden_layer_size=8, random_state=0, n_jobs=1)
    if quick:
        ours["n_restarts"] = 1
    yield "ensemble full", EnsembleLearningRegressor(covariance="full", **ours)
    yield (
        "ensemble lowrank(4)",
        EnsembleLearningRegressor(covariance="lowrank", rank=4, max_iter=20, **ours),
    )
    yield "ensemble diag", EnsembleLearningRegressor(covariance="diag", **ours)
    yield "MLPRegressor", MLPRegressor(max_iter=2000, random_state=0)
    yield "BayesianRidge", BayesianRidge()
    kernel = ConstantKernel() * RBF(np.ones(n_features)) + WhiteKernel()
    yield (
        "GaussianProcessRegressor",
        GaussianProcessRegressor(
            kernel,
            normalize_y=True,
            n_restarts_optimizer=0 if quick else 2,
            random_state=0,
        ),
    )
    if hasattr(sklearn_meanfield, "HMCNetworkRegressor"):
        # A short run: 2 chains of 200 warm-up and 200 kept draws of Neal's
        # fixed-length HMC, a cost comparable to the other peers'.
        hmc = dict(
            hidden_layer_size=8,
            n_samples=50 if quick else 200,
            n_warmup=50 if quick else 200,
            sampler="hmc",
            n_leapfrog=50,
            n_chains=2,
            random_state=0,
            n_jobs=1,
        )
        yield "HMCNetworkRegressor", sklearn_meanfield.HMCNetworkRegressor(**hmc)


def nlpd(y, mean, std):
    return float(
        np.mean(0.5 * np.log(2 * np.pi * std**2) + 0.5 * ((y - mean) / std) ** 2)
    )


def evaluate(model, X_tr, y_tr, X_te, y_te):
    pipe = make_pipeline(StandardScaler(), model)
    # CPU time of this process (everything runs in it with n_jobs=1): wall
    # time means little on a shared machine.
    start = time.process_time()
    pipe.fit(X_tr, y_tr)
    seconds = time.process_time() - start
    plug_in = False
    try:
        # The GP's std includes its WhiteKernel noise, like ours and BayesianRidge's.
        mean, std = pipe.predict(X_te, return_std=True)
    except TypeError:
        mean = pipe.predict(X_te)
        std = np.full_like(mean, np.std(y_tr - pipe.predict(X_tr)))
        plug_in = True
    rmse = float(np.sqrt(np.mean((y_te - mean) ** 2)))
    return rmse, nlpd(y_te, mean, std), seconds, plug_in


def scaling(sizes=(500, 2000, 5000)):
    """Wall and CPU fit times of our defaults and MLPRegressor as n grows."""
    peers = (
        ("ensemble (defaults)", lambda: EnsembleLearningRegressor(random_state=0)),
        ("MLPRegressor (defaults)", lambda: MLPRegressor(random_state=0)),
        (
            "MLPRegressor max_iter=500",
            lambda: MLPRegressor(max_iter=500, random_state=0),
        ),
    )
    print("n      model                      RMSE    wall s  ratio  cpu s   ratio")
    for n in sizes:
        X, y = make_friedman1(n_samples=n + 2000, noise=1.0, random_state=0)
        reference = None
        for label, make in peers:
            pipe = make_pipeline(StandardScaler(), make())
            wall, cpu = time.perf_counter(), time.process_time()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                pipe.fit(X[:n], y[:n])
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            reference = reference or (wall, cpu)
            rmse = float(np.sqrt(np.mean((pipe.predict(X[n:]) - y[n:]) ** 2)))
            ratios = reference[0] / wall, reference[1] / cpu
            print(
                f"{n:<6} {label:<26} {rmse:6.3f}  {wall:7.2f}  {ratios[0]:5.1f}"
                f"  {cpu:7.2f}  {ratios[1]:5.1f}",
                flush=True,
            )
    print("ratio = ensemble time / this model's time (> 1: the peer is faster)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one small data set")
    parser.add_argument(
        "--scaling", action="store_true", help="fit times at n = 500, 2000, 5000"
    )
    parser.add_argument(
        "--only", default="", help="run the data sets whose name contains this"
    )
    args = parser.parse_args(argv)
    if args.scaling:
        scaling()
        return
    header = (
        "data set",
        "model",
        "RMSE",
        "RMSE ratio",
        "NLPD",
        "NLPD diff",
        "fit cpu s",
        "time ratio",
    )
    rows = []
    for name, X_tr, y_tr, X_te, y_te in datasets(args.quick):
        if args.only not in name:
            continue
        reference = None
        for label, model in models(args.quick, X_tr.shape[1]):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                rmse, score, seconds, plug_in = evaluate(model, X_tr, y_tr, X_te, y_te)
            if reference is None:
                reference = (rmse, score, seconds)
            rows.append(
                (
                    name,
                    label,
                    f"{rmse:.3f}",
                    f"{rmse / reference[0]:.2f}",
                    f"{score:.3f}" + ("*" if plug_in else ""),
                    f"{score - reference[1]:+.3f}",
                    f"{seconds:.2f}",
                    f"{seconds / reference[2]:.2f}",
                )
            )
            print("  ".join(rows[-1]), flush=True)
            bounds = getattr(model, "restart_bounds_", np.zeros(1))
            if bounds.size > 1:
                spread = np.ptp(bounds) / len(y_tr)
                print(f"    restarts' bounds spread {spread:.4f} nat per sample")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    print()
    print(line.format(*header))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line.format(*row))
    print(
        "\nRatios and differences are to 'ensemble full' on the same data set; "
        "* = plug-in Gaussian with the training residual sd."
    )
    if not args.quick and not args.only:
        print("\nFit time as the data grow (friedman1):")
        scaling()


if __name__ == "__main__":
    main()

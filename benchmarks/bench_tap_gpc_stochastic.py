"""Stochastic EP's kernel search next to L-BFGS-B's, and next to GPyTorch.

``TAPGaussianProcessClassifier`` in the sparse mode (m = 256 k-means inducing
inputs, probit likelihood, kernel learned from ``ConstantKernel(1) *
RBF(1)``, ``random_state=0``, one BLAS thread) on the four-input data of
``bench_tap_gpc_sparse.py`` (a non-linear boundary, labels flipped with
probability 0.1, 2000 held-out points).

Part 1: at n = 20,000, 50,000 and 100,000 rows, ``optimizer="fmin_l_bfgs_b"``
(EP solved over all rows at every evaluation) and ``optimizer="stochastic"``
(sites and kernel moved together by minibatches, then EP over all rows at
the learned kernel) side by side: fit time, the exact EP log evidence at the
learned kernel, held-out log-loss and error, and the stochastic fit's time
over L-BFGS-B's.  ``optimizer="auto"`` switches to the stochastic search
above ``STOCHASTIC_MIN_SAMPLES`` rows.
Part 2, when GPyTorch is installed (the ``benchmark`` extra): n = 200,000,
kernel and inducing inputs learned, ours (stochastic) against GPyTorch's
variational sparse GP from the same k-means centres
(``bench_tap_gpc_sparse.py --vs-gpytorch``, a budget of 480 s for GPyTorch).
Part 3 (``--million``): n = 1,000,000, kernel learned: fit time, peak
resident memory and held-out log-loss; with GPyTorch, its variational GP's
held-out log-loss after training for the same wall time.

Usage::

    python -m benchmarks.bench_tap_gpc_stochastic [--quick] [--million]
"""

import argparse
import os

from sklearn.gaussian_process.kernels import RBF
from sklearn.gaussian_process.kernels import ConstantKernel as C
from threadpoolctl import threadpool_limits

if __package__:
    from .bench_tap_gpc_sparse import (
        N_TEST,
        Timer,
        log_loss_and_error,
        make_data,
        max_rss_mib,
        part_vs_gpytorch,
        positive,
    )
else:  # run as a script: benchmarks/ is on sys.path
    from bench_tap_gpc_sparse import (
        N_TEST,
        Timer,
        log_loss_and_error,
        make_data,
        max_rss_mib,
        part_vs_gpytorch,
        positive,
    )

from sklearn_meanfield import TAPGaussianProcessClassifier

M = 256


def fit(X, t, optimizer, m=M):
    model = TAPGaussianProcessClassifier(
        C(1.0) * RBF(1.0), n_inducing=m, optimizer=optimizer, random_state=0
    )
    with Timer() as timer:
        model.fit(X, t)
    return model, timer


def part_one(sizes, m=M):
    print(f"m = {m}, kernel learned from 1**2 * RBF(1), held-out {N_TEST}")
    print(
        "  n       | search     | fit s  |   evidence | log-loss  error |"
        " kernel               | / L-BFGS-B"
    )
    for n in sizes:
        X, t = make_data(n + N_TEST, 4)
        X, t, X_test, t_test = X[:n], t[:n], X[n:], t[n:]
        wall = {}
        for optimizer in ("fmin_l_bfgs_b", "stochastic"):
            model, timer = fit(X, t, optimizer, m)
            wall[optimizer] = timer.wall
            ll, err = log_loss_and_error(positive(model, X_test), t_test)
            ratio = timer.wall / wall["fmin_l_bfgs_b"]
            theta = model.kernel_.get_params()
            kernel = (
                f"{theta['k1__constant_value'] ** 0.5:.3g}**2 * "
                f"RBF({theta['k2__length_scale']:.3g})"
            )
            name = "L-BFGS-B" if optimizer == "fmin_l_bfgs_b" else "stochastic"
            print(
                f"  {n:7d} | {name:10s} | {timer.wall:6.1f} |"
                f" {model.log_marginal_likelihood_value_:10.1f} |"
                f"   {ll:.4f}  {err:.3f} | {kernel:20s} | {ratio:9.2f}x"
            )

    print(
        "  evidence: the exact EP log evidence at the learned kernel; / L-BFGS-B:"
        " fit time over L-BFGS-B's"
    )


def part_million(n=1_000_000, m=M, gpytorch=False):
    """Our stochastic kernel search on ``n`` rows; with ``gpytorch``, then
    GPyTorch's variational GP (kernel and inducing inputs learned, from the
    same k-means centres) trained for our fit's wall time."""
    X, t = make_data(n + N_TEST, 5)
    X, t, X_test, t_test = X[:n], t[:n], X[n:], t[n:]
    before = max_rss_mib()
    model, timer = fit(X, t, "stochastic", m)
    ll, err = log_loss_and_error(positive(model, X_test), t_test)
    print(
        f"n = {n}, m = {m}, stochastic search: fit {timer.wall:.1f} s"
        f" ({timer.cpu:.1f} s cpu), peak resident memory {max_rss_mib():.0f} MiB"
        f" (before {before:.0f} MiB), held-out log-loss {ll:.4f}, error {err:.3f},"
        f" kernel {model.kernel_}"
    )
    if not gpytorch:
        return
    if __package__:
        from ._gpytorch_side import gpytorch_trajectory
        from .bench_tap_gpc_sparse import estimator_inducing_points
    else:  # run as a script: benchmarks/ is on sys.path
        from _gpytorch_side import gpytorch_trajectory
        from bench_tap_gpc_sparse import estimator_inducing_points
    Z0 = estimator_inducing_points(X, m)
    run = gpytorch_trajectory(X, t, X_test, t_test, Z0, timer.wall, n_threads=1)
    best, last = run.best(), len(run.seconds) - 1
    print(
        f"  GPyTorch SVGP in the same wall time ({run.steps[-1]} steps, "
        f"{run.steps[-1] / run.steps_per_epoch:.2f} epochs): log-loss"
        f" {run.log_loss[last]:.4f} at {run.seconds[last]:.0f} s, its best"
        f" {run.log_loss[best]:.4f} at {run.seconds[best]:.0f} s"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="part 1 at n = 5,000")
    parser.add_argument("--million", action="store_true", help="also part 3")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}, BLAS threads 1")
    with threadpool_limits(1):
        if args.quick:
            part_one([5000], m=64)
        else:
            part_one([20_000, 50_000, 100_000])
            try:
                import gpytorch  # noqa: F401
            except ImportError:
                print("GPyTorch is not installed: part 2 skipped.")
                has_gpytorch = False
            else:
                part_vs_gpytorch(200_000, M, 480.0)
                has_gpytorch = True
            if args.million:
                part_million(gpytorch=has_gpytorch)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

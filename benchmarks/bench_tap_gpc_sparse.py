"""Sparse (FITC) TAP / EP next to exact TAP, on the core functions (issue 17).

Until the sparse mode is wired into ``TAPGaussianProcessClassifier`` this
drives ``tap/_sparse.FITCPosterior`` and ``tap/_core.expectation_propagation``
directly, with the fixed kernel ``ConstantKernel(2) * RBF(1)`` for both
models (within 2 of the exact model's best log evidence, -501, on a 4 x 4 grid
of amplitudes 1-8 and length scales 0.5-1.4 at n = 1000) and the probit
likelihood.

Data: ``X ~ N(0, I_4)``, boundary ``sin(2 x0) + 0.8 x1^2 - 0.8 + 0.5 x2 x3 >
0``, every label flipped with probability 0.1 (so the Bayes log-loss is at
least 0.325, the Bayes error at least 0.10); 2000 held-out points.
Inducing inputs: k-means centres of the training inputs (``KMeans(m,
n_init=1, random_state=0)``).

Part 1, n = 2000: held-out log-loss and error of exact TAP and of sparse TAP
(m = 64, 128, 256), the LOO error from the cavities (no refits) next to the
held-out error, EP time (kernel matrices included, k-means not).
Part 2, n = 50,000 (``--large``), fixed kernel: k-means time, kernel time, EP
time and sweeps, peak resident memory (``ru_maxrss``, before and after) and
the held-out log-loss and error (also with the true label noise 0.1 in the
likelihood), next to exact TAP (same kernel) on the first
``--subsample`` points and ``LogisticRegression`` and
``HistGradientBoostingClassifier`` on all the data.

Times are wall-clock (``time.perf_counter``) of one run, next to the process
CPU time (``time.process_time``, steadier on a shared machine); BLAS threads
from ``--blas-threads`` (default 1, as ``bench_tap_gpc.py``).  Usage::

    python -m benchmarks.bench_tap_gpc_sparse [--large | --large-only | --quick]
        [--blas-threads K] [--optimise [--kernel-only] [--optimise-n N]]

Measured 2026-11-23 17:29 UTC (numpy 2.4, scipy 1.17, sklearn 1.9.1, one
BLAS thread, 2 cores shared with other sessions' tests: load average 4.4
before, 3.9 after; wall-clock times are inflated by that, the CPU times
much less)::

    n = 2000, kernel 1.41**2 * RBF(length_scale=1), probit, held-out 2000
      model       | log-loss  error  | LOO err | fit s  cpu s sweeps | vs exact
      exact       |  0.4001  0.139  |  0.155  |  4.96   2.47     9  |
      sparse   64 |  0.4222  0.146  |  0.172  |  0.04   0.04     8  | +0.0221
      sparse  128 |  0.4083  0.141  |  0.160  |  0.09   0.09     9  | +0.0082
      sparse  256 |  0.4048  0.143  |  0.158  |  0.22   0.16     9  | +0.0047
    (sparse 256: time 0.04x, cpu 0.07x of exact)

    n = 50000, m = 256, kernel 1.41**2 * RBF(length_scale=1) fixed, probit
      sparse TAP: k-means 5.5 s, kernel 1.0 s, EP 6.2 s (9 sweeps, 0.68 s
      each, converged); fit total 12.7 s; kernel + EP cpu 3.5 s
      with label noise 0.1: EP 43.5 s (52 sweeps, 21.5 s cpu, 4484
      negative sites)
      model                  | log-loss  error | LOO err | fit s
      sparse TAP m=256       |  0.3796  0.120 |  0.131  |  12.7
        + label noise 0.1    |  0.3310  0.095 |  0.111  |  50.0
      exact TAP n=4000       |  0.3982  0.139 |  0.142  |  22.6
      LogisticRegression     |  0.6615  0.339 |    -    |   0.0
      HistGradientBoosting   |  0.3708  0.130 |    -    |   1.2

Peak resident memory of the n = 50,000 fit alone (``--large-only``): 171 MiB
before, 310 MiB after (one n x n matrix: 18.6 GiB).  The Bayes log-loss of
the data is about 0.325 (label noise 0.1): the sparse fit with the label
noise in its likelihood is within 0.006 of it.

``--optimise`` (17:00 UTC, load 5; L-BFGS-B, at most 60 evaluations),
n = 10,000, m = 256, start ``C(2) * RBF([1, 1, 1, 1])``: kernel only 46.9 s
(24.3 s cpu, 14 evaluations), held-out log-loss 0.4172; kernel and inducing
inputs 277.4 s (138.8 s cpu, 61 evaluations), 0.4128 (the amplitude grew
to 44.5**2, FITC's known over-fitting of its diagonal); HistGradientBoosting
0.4219, LogisticRegression 0.6733.  ``--optimise --kernel-only --optimise-n
50000`` (17:09 UTC, load 7.5-12): 383 s (131 s cpu, 18 evaluations),
log-loss 0.3938 against HistGradientBoosting's 0.3973 and
LogisticRegression's 0.6749.
"""

import argparse
import os
import resource
import time

import numpy as np
from scipy.optimize import minimize
from sklearn.cluster import KMeans
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.gaussian_process.kernels import RBF
from sklearn.gaussian_process.kernels import ConstantKernel as C
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from sklearn_meanfield.tap._core import KernelPosterior, expectation_propagation
from sklearn_meanfield.tap._likelihoods import make_likelihood
from sklearn_meanfield.tap._sparse import (
    FITCPosterior,
    fitc_evidence_adjoints,
    fitc_kernel_gradient,
    fitc_kernel_inducing_gradient,
)

N_TEST = 2000
LABEL_NOISE = 0.1


def make_data(n, seed):
    """Four inputs, a non-linear boundary, labels flipped with prob. 0.1."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    f = np.sin(2 * X[:, 0]) + 0.8 * X[:, 1] ** 2 - 0.8 + 0.5 * X[:, 2] * X[:, 3]
    y = (f > 0) ^ (rng.uniform(size=n) < LABEL_NOISE)
    return X, np.where(y, 1.0, -1.0)


def log_loss_and_error(p_positive, t):
    p = np.clip(np.where(t > 0, p_positive, 1 - p_positive), 1e-15, 1.0)
    return float(-np.mean(np.log(p))), float(np.mean(p < 0.5))


def max_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class Timer:
    """Wall-clock and process CPU seconds of a ``with`` block."""

    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


def fit_exact(kernel, X, t, likelihood):
    with Timer() as timer:
        solution = expectation_propagation(
            KernelPosterior(kernel(X)), t, likelihood, max_iter=500
        )
    return solution, timer


def predict_exact(kernel, X, solution, X_new, likelihood):
    K_cross = kernel(X, X_new)
    mean = K_cross.T @ solution.alpha
    var = kernel.diag(X_new) - solution.posterior.variance_reduction(K_cross)
    return likelihood.predictive_positive(mean, np.maximum(var, 0.0))


def inducing_inputs(X, m):
    start = time.perf_counter()
    Z = KMeans(m, n_init=1, random_state=0).fit(X).cluster_centers_
    return Z, time.perf_counter() - start


def fit_sparse(kernel, X, Z, t, likelihood):
    """EP on the FITC prior; returns the solution and the kernel and EP timers."""
    with Timer() as kernel_timer:
        posterior = FITCPosterior.from_kernel(kernel, X, Z)
    with Timer() as ep_timer:
        solution = expectation_propagation(posterior, t, likelihood, max_iter=500)
    return solution, kernel_timer, ep_timer


def predict_sparse(kernel, Z, solution, X_new, likelihood):
    mean, var = solution.posterior.predict(kernel(Z, X_new), kernel.diag(X_new))
    return likelihood.predictive_positive(mean, var)


def loo_error(solution):
    return float(np.mean(np.exp(solution.log_z) < 0.5))


def part_one(kernel, likelihood, n=2000, sizes=(64, 128, 256)):
    X, t = make_data(n + N_TEST, 0)
    X, t, X_test, t_test = X[:n], t[:n], X[n:], t[n:]
    exact, timer = fit_exact(kernel, X, t, likelihood)
    seconds = timer.wall
    ll, err = log_loss_and_error(
        predict_exact(kernel, X, exact, X_test, likelihood), t_test
    )
    print(f"n = {n}, kernel {kernel}, probit, held-out {N_TEST}")
    print("  model       | log-loss  error  | LOO err | fit s  cpu s sweeps | vs exact")
    print(
        f"  exact       |  {ll:.4f}  {err:.3f}  |  {loo_error(exact):.3f}  |"
        f" {seconds:5.2f} {timer.cpu:6.2f}  {exact.n_iter:4d}  |"
    )
    for m in sizes:
        Z, _ = inducing_inputs(X, m)
        sparse, k_timer, ep_timer = fit_sparse(kernel, X, Z, t, likelihood)
        wall, cpu = k_timer.wall + ep_timer.wall, k_timer.cpu + ep_timer.cpu
        ll_s, err_s = log_loss_and_error(
            predict_sparse(kernel, Z, sparse, X_test, likelihood), t_test
        )
        print(
            f"  sparse {m:4d} |  {ll_s:.4f}  {err_s:.3f}  |"
            f"  {loo_error(sparse):.3f}  | {wall:5.2f} {cpu:6.2f}"
            f"  {sparse.n_iter:4d}  |"
            f" log-loss {ll_s - ll:+.4f}, time {wall / seconds:.2f}x"
            f" (cpu {cpu / timer.cpu:.2f}x)"
        )


def part_two(kernel, likelihood, n=50_000, m=256, n_subsample=4000):
    X, t = make_data(n + N_TEST, 1)
    X, t, X_test, t_test = X[:n], t[:n], X[n:], t[n:]
    rss_before = max_rss_mib()
    Z, kmeans_s = inducing_inputs(X, m)
    sparse, k_timer, ep_timer = fit_sparse(kernel, X, Z, t, likelihood)
    k_s, ep_s = k_timer.wall, ep_timer.wall
    rss_after = max_rss_mib()
    sparse_fit = kmeans_s + k_s + ep_s
    print(f"n = {n}, m = {m}, kernel {kernel} fixed, probit")
    print(
        f"  sparse TAP: k-means {kmeans_s:.1f} s, kernel {k_s:.1f} s, EP {ep_s:.1f} s"
        f" ({sparse.n_iter} sweeps, {ep_s / sparse.n_iter:.2f} s each,"
        f" converged {sparse.converged}); fit total {sparse_fit:.1f} s;"
        f" kernel + EP cpu {k_timer.cpu + ep_timer.cpu:.1f} s"
    )
    print(
        f"  peak RSS {rss_before:.0f} MiB before, {rss_after:.0f} MiB after"
        f" (one n x n matrix would be {8 * n * n / 2**30:.1f} GiB)"
    )
    rows = [
        (
            f"sparse TAP m={m}",
            predict_sparse(kernel, Z, sparse, X_test, likelihood),
            sparse_fit,
            loo_error(sparse),
        )
    ]
    noisy = make_likelihood("probit", LABEL_NOISE)
    noisy_fit, noisy_k, noisy_ep = fit_sparse(kernel, X, Z, t, noisy)
    print(
        f"  with label noise {LABEL_NOISE}: EP {noisy_ep.wall:.1f} s"
        f" ({noisy_fit.n_iter} sweeps, {noisy_ep.cpu:.1f} s cpu,"
        f" converged {noisy_fit.converged}, {np.sum(noisy_fit.tau < 0)} negative sites)"
    )
    rows.append(
        (
            f"  + label noise {LABEL_NOISE}",
            predict_sparse(kernel, Z, noisy_fit, X_test, noisy),
            kmeans_s + noisy_k.wall + noisy_ep.wall,
            loo_error(noisy_fit),
        )
    )
    exact, timer = fit_exact(kernel, X[:n_subsample], t[:n_subsample], likelihood)
    rows.append(
        (
            f"exact TAP n={n_subsample}",
            predict_exact(kernel, X[:n_subsample], exact, X_test, likelihood),
            timer.wall,
            loo_error(exact),
        )
    )
    for name, model in [
        ("LogisticRegression", LogisticRegression()),
        ("HistGradientBoosting", HistGradientBoostingClassifier(random_state=0)),
    ]:
        start = time.perf_counter()
        model.fit(X, t)
        seconds = time.perf_counter() - start
        rows.append((name, model.predict_proba(X_test)[:, 1], seconds, np.nan))
    print("  model                  | log-loss  error | LOO err | fit s | vs sparse")
    reference = log_loss_and_error(rows[0][1], t_test)[0]
    for name, proba, seconds, loo in rows:
        ll, err = log_loss_and_error(proba, t_test)
        loo_text = "  -  " if np.isnan(loo) else f"{loo:.3f}"
        print(
            f"  {name:22s} |  {ll:.4f}  {err:.3f} |  {loo_text}  | {seconds:5.1f} |"
            f" log-loss {ll - reference:+.4f}, time {seconds / sparse_fit:.2f}x"
        )


def optimise_sparse(kernel, X, t, Z, likelihood, inducing=True, max_evaluations=60):
    """L-BFGS-B on the FITC-EP evidence over ``kernel.theta`` (and ``Z``),
    each EP warm-started from the previous evaluation's sites."""
    n_theta = len(kernel.theta)
    sites = []
    evaluations = []

    def unpack(params):
        inducing_inputs_ = params[n_theta:].reshape(Z.shape) if inducing else Z
        return kernel.clone_with_theta(params[:n_theta]), inducing_inputs_

    def objective(params):
        k, Z_ = unpack(params)
        posterior = FITCPosterior.from_kernel(k, X, Z_)
        solution = expectation_propagation(
            posterior, t, likelihood, start=sites[-1:], max_iter=500
        )
        evaluations.append(solution.n_iter)
        if not np.isfinite(solution.log_evidence):
            return np.inf, np.zeros_like(params)
        sites.append((solution.tau, solution.nu))
        adjoints = fitc_evidence_adjoints(solution)
        gradient = fitc_kernel_gradient(adjoints, k, X, Z_)
        if inducing:
            z_gradient = fitc_kernel_inducing_gradient(adjoints, k, X, Z_)
            gradient = np.concatenate([gradient, z_gradient.ravel()])
        return -solution.log_evidence, -gradient

    x0 = kernel.theta if not inducing else np.concatenate([kernel.theta, Z.ravel()])
    bounds = list(kernel.bounds) + [(None, None)] * (len(x0) - n_theta)
    result = minimize(
        objective,
        x0,
        jac=True,
        method="L-BFGS-B",
        bounds=bounds,
        options={"maxfun": max_evaluations},
    )
    k, Z_ = unpack(result.x)
    return k, Z_, -result.fun, evaluations


def part_three(likelihood, n=10_000, m=256, with_inducing=True):
    """Kernel (amplitude, 4 length scales) and inducing inputs optimised."""
    X, t = make_data(n + N_TEST, 2)
    X, t, X_test, t_test = X[:n], t[:n], X[n:], t[n:]
    start_kernel = C(2.0) * RBF(np.ones(4))
    Z0, kmeans_s = inducing_inputs(X, m)
    print(f"n = {n}, m = {m}, start {start_kernel}, probit, optimised")
    rows = []
    for inducing in (False, True) if with_inducing else (False,):
        with Timer() as timer:
            kernel, Z, evidence, evaluations = optimise_sparse(
                start_kernel, X, t, Z0, likelihood, inducing=inducing
            )
            solution, _, _ = fit_sparse(kernel, X, Z, t, likelihood)
        proba = predict_sparse(kernel, Z, solution, X_test, likelihood)
        name = "kernel + Z" if inducing else "kernel"
        print(
            f"  {name}: {timer.wall + kmeans_s:.1f} s ({timer.cpu:.1f} s cpu),"
            f" {len(evaluations)} evaluations, {sum(evaluations)} sweeps,"
            f" log evidence {evidence:.2f}, {kernel}"
        )
        rows.append((f"sparse TAP, {name}", proba, loo_error(solution)))
    model = HistGradientBoostingClassifier(random_state=0).fit(X, t)
    rows.append(("HistGradientBoosting", model.predict_proba(X_test)[:, 1], np.nan))
    model = LogisticRegression().fit(X, t)
    rows.append(("LogisticRegression", model.predict_proba(X_test)[:, 1], np.nan))
    print("  model                        | log-loss  error | LOO err")
    for name, proba, loo in rows:
        ll, err = log_loss_and_error(proba, t_test)
        loo_text = "  -  " if np.isnan(loo) else f"{loo:.3f}"
        print(f"  {name:28s} |  {ll:.4f}  {err:.3f} |  {loo_text}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", action="store_true", help="also n = 50,000")
    parser.add_argument("--large-only", action="store_true")
    parser.add_argument("--blas-threads", type=int, default=1)
    parser.add_argument("--large-n", type=int, default=50_000)
    parser.add_argument("--large-m", type=int, default=256)
    parser.add_argument("--subsample", type=int, default=4000)
    parser.add_argument(
        "--optimise", action="store_true", help="part 3: optimised kernel and Z"
    )
    parser.add_argument("--optimise-n", type=int, default=10_000)
    parser.add_argument(
        "--kernel-only", action="store_true", help="part 3 without optimising Z"
    )
    parser.add_argument(
        "--quick", action="store_true", help="n = 500, m = 32 and 64 only"
    )
    args = parser.parse_args()
    kernel = C(2.0, "fixed") * RBF(1.0, "fixed")
    likelihood = make_likelihood("probit", 0.0)
    print(f"load average {os.getloadavg()[0]:.2f}, BLAS threads {args.blas_threads}")
    with threadpool_limits(args.blas_threads):
        if args.optimise:
            part_three(likelihood, args.optimise_n, args.large_m, not args.kernel_only)
        elif args.quick:
            part_one(kernel, likelihood, n=500, sizes=(32, 64))
        elif not args.large_only:
            part_one(kernel, likelihood)
        if args.large or args.large_only:
            part_two(kernel, likelihood, args.large_n, args.large_m, args.subsample)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

"""Sparse (FITC) TAP / EP next to exact TAP, through the estimator (issue 17).

Every GP fit is a ``TAPGaussianProcessClassifier``: exact (``n_inducing=None``)
or sparse (``n_inducing=m``, k-means inducing inputs, ``random_state=0``),
with the fixed kernel ``ConstantKernel(2) * RBF(1)`` for both models (within
2 of the exact model's best log evidence, -501, on a 4 x 4 grid of amplitudes
1-8 and length scales 0.5-1.4 at n = 1000) and the probit likelihood, except
in part 3 (optimised kernel, and inducing inputs with
``optimize_inducing_points=True``, L-BFGS-B limited to 60 evaluations).

Data: ``X ~ N(0, I_4)``, boundary ``sin(2 x0) + 0.8 x1^2 - 0.8 + 0.5 x2 x3 >
0``, every label flipped with probability 0.1 (so the Bayes log-loss is at
least 0.325, the Bayes error at least 0.10); 2000 held-out points.
Inducing inputs: the estimator's k-means centres of the training inputs
(Lloyd's k-means up to 10,000 rows, mini-batch k-means above).

Part 1, n = 2000: held-out log-loss and error of exact TAP and of sparse TAP
(m = 64, 128, 256), the LOO error from the cavities (no refits) next to the
held-out error, fit time (k-means included).
Part 2, n = 50,000 (``--large``), fixed kernel: fit time and sweeps, peak
resident memory (``ru_maxrss``, before and after) and
the held-out log-loss and error (also with the true label noise 0.1 in the
likelihood), next to exact TAP (same kernel) on the first
``--subsample`` points and ``LogisticRegression`` and
``HistGradientBoostingClassifier`` on all the data.

Times are wall-clock (``time.perf_counter``) of one run, next to the process
CPU time (``time.process_time``, steadier on a shared machine); BLAS threads
from ``--blas-threads`` (default 1, as ``bench_tap_gpc.py``).  Usage::

    python -m benchmarks.bench_tap_gpc_sparse [--large | --large-only | --quick]
        [--blas-threads K] [--optimise [--kernel-only] [--optimise-n N]]
    python -m benchmarks.bench_tap_gpc_sparse --dask [--dask-n N]
    python -m benchmarks.bench_tap_gpc_sparse --budget [--budget-optimised]
    python -m benchmarks.bench_tap_gpc_sparse --loo-gap

``--loo-gap``: the LOO (cavity) error and log-loss minus the held-out ones at
n = 2000 over 10 data sets with 20,000 held-out points each, exact and
sparse (m = 256).  Measured 19:30-19:57 UTC at load 8-12 (a script with the
same fits): LOO - test error exact +0.0033 (sd 0.0042 over the seeds),
sparse +0.0022 (sd 0.0041); log-loss exact +0.0080 (sd 0.0080), sparse
+0.0068 (sd 0.0081); standard errors of the means 0.0013 (error) and
0.0025 (log-loss).  So the LOO is slightly pessimistic on average (about
0.003 in error and 0.007 in log-loss, 2-3 standard errors), the same for
the sparse and the exact model (the sparse mode adds no bias of its own),
and a fifth of the target's 0.01 in error; part 1's 0.023 at n = 2000 is
one data set scored on 2000 held-out points, whose error rate alone has a
standard deviation of 0.008, plus the seeds' spread of 0.004.

``--dask`` (n = 200,000, m = 256, fixed kernel): the local fit, then the same
fit under ``joblib.parallel_config(backend="dask")`` on a ``LocalCluster``
of 2 worker processes with one thread each (the row blocks live on the
workers); the largest difference of their held-out probabilities and the
wall-time ratio local / cluster.  ``--budget`` (n = ``--large-n``, fixed
kernel; ``--budget-optimised``: every GP learns its kernel): the sparse
fit's wall time is the budget; exact TAP and scikit-learn's
GaussianProcessClassifier are fitted on the first 500, 1000, 2000, ... rows
while the next fit's time, extrapolated from the last two (cubic growth
before there are two), stays within the budget, and the largest fit within
it is scored; LogisticRegression and HistGradientBoosting on all rows.
Run the heavy parts (``--dask``, ``--optimise --optimise-n 50000``) on a
quiet machine with ``OPENBLAS_NUM_THREADS=1``.

Through the estimator (commit 19def2b + the 'auto' default, idle: load 0.4,
one BLAS thread), ``--large``: n = 2000 log-loss exact 0.4001, sparse
64/128/256 0.4302/0.4117/0.4037 (256: 0.12x the exact fit time); n = 50,000
m = 256 fit 4.3 s with k-means, peak RSS 328 MiB, log-loss 0.3820 (0.3312
with the label noise in the likelihood, 7.3 s) against exact TAP on 4000
rows 0.3982 (11.9 s), HistGradientBoosting 0.3708, LogisticRegression 0.6615.

The numbers below were measured at commit 9f51db5, when this script drove
the core functions (``FITCPosterior`` and ``expectation_propagation``, with
``KMeans(m, n_init=1, random_state=0)`` centres, k-means timed apart) that
the estimator now runs; not yet re-measured through the estimator.

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

``--optimise --optimise-n 10000`` after the gradient by matrix products
(commit e7743cc; 19:58 UTC, load 10, so compare CPU times): kernel only
11.4 s cpu (35.5 s wall; 16 evaluations, 4.3 EP sweeps each thanks to the
warm starts), log-loss 0.4173; kernel and inducing inputs 43.3 s cpu
(135.2 s wall; 61 evaluations, 4.3 sweeps each), 0.4111, against 138.8 s
cpu for the same 61 evaluations before: the kernel-derivative arrays of
the inducing-input gradient had taken three quarters of each evaluation.
The sweeps per evaluation were already low; the cost is linear in n, so
n = 50,000 should take about 5 x 43 = 220 s cpu, within the 10-minute
target.  Measured, ``--optimise --optimise-n 50000`` (21:08 UTC, load 0.0
at the start, 1-2.5 with CI running beside it, one BLAS thread): kernel only
60.7 s (58.9 s cpu; 21 evaluations, 3.9 sweeps each), log-loss 0.3974;
kernel and inducing inputs 239.1 s (176.5 s cpu; 61 evaluations, 3.8 sweeps
each), log-loss 0.3795 / error 0.113 (LOO error 0.112), against the
10-minute target; HistGradientBoosting 0.3973 / 0.141, LogisticRegression
0.6749 / 0.369.

``--budget`` (20:03 UTC, load 9.5, so the sizes are those a loaded machine
fits): the sparse fit of n = 50,000 took 10.7 s; in that time exact TAP fits
2000 rows (4.0 s; 4000 was extrapolated to 26 s) and scikit-learn's GPC
2000 (5.8 s).  Held-out log-loss / error: sparse 0.3820 / 0.112, exact TAP
on 2000 0.4104 / 0.158, scikit-learn GPC on 2000 0.4138 / 0.151,
LogisticRegression 0.6615 / 0.339, HistGradientBoosting 0.3708 / 0.130 (1.3
s).  The sparse fit is the best GP and far ahead of the linear model;
HistGradientBoosting is ahead of it with the noise-free likelihood, behind
it (0.331, part 2) with the data's label noise in the likelihood.

``--dask --dask-n 50000`` (20:03 UTC, load 10): the Dask fit equals the
local one to 2.1e-15 in held-out probabilities (same 8 sweeps); wall-time
ratio local / cluster 0.50 at that load (two worker processes competing
with ten other processes for two cores: not a measure of the speed-up).

LOO against brute force (19:50-20:00 UTC, load 10): on 300 random points of
the n = 2000 data set of seed 100, the sparse model refitted without each
point (kernel and inducing inputs kept) gives the same LOO error as the
cavities (0.1733) and log-loss 0.4915 against 0.4906, largest probability
difference 0.006: the cavities are the sparse model's leave-one-out.

``--large-only --data hastie``: the n = 50,000 part on Hastie, Tibshirani and
Friedman's ten-input benchmark (``make_hastie_10_2``, generated without
network; kernel 2 * RBF(3) fixed).  Measured at load 1.3-2.0 (CI running
beside it), one BLAS thread: sparse fit 9.0 s (6.0 s CPU, 14 sweeps, k-means
included), peak RSS 321 MiB; held-out log-loss / error 0.086 / 0.018 (LOO
error 0.013), against exact TAP on 4000 rows 0.181 / 0.025 (19.6 s),
HistGradientBoosting 0.210 / 0.053 and LogisticRegression 0.693 / 0.477.
"""

import argparse
import contextlib
import io
import os
import resource
import time

import numpy as np
from scipy.optimize import minimize
from sklearn.datasets import make_hastie_10_2
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.gaussian_process.kernels import RBF
from sklearn.gaussian_process.kernels import ConstantKernel as C
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from sklearn_meanfield import TAPGaussianProcessClassifier

N_TEST = 2000
LABEL_NOISE = 0.1


def make_data(n, seed):
    """Four inputs, a non-linear boundary, labels flipped with prob. 0.1."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    f = np.sin(2 * X[:, 0]) + 0.8 * X[:, 1] ** 2 - 0.8 + 0.5 * X[:, 2] * X[:, 3]
    y = (f > 0) ^ (rng.uniform(size=n) < LABEL_NOISE)
    return X, np.where(y, 1.0, -1.0)


def make_hastie(n, seed):
    """Hastie, Tibshirani & Friedman's (ESL, eq. 10.2) ten-input benchmark,
    generated without network: y = 1 when sum(x**2) > 9.34 (a sphere)."""
    X, y = make_hastie_10_2(n_samples=n, random_state=seed)
    return X, np.where(y > 0, 1.0, -1.0)


# Data sets of part two: (generator, fixed kernel, labels flipped at random).
DATASETS = {
    "nonlinear": (make_data, None, LABEL_NOISE),
    "hastie": (make_hastie, C(2.0, "fixed") * RBF(3.0, "fixed"), 0.0),
}


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


def limited_l_bfgs_b(max_evaluations, seconds=None):
    """An ``optimizer`` callable: L-BFGS-B with at most ``max_evaluations``;
    the wall seconds of each evaluation are appended to ``seconds``."""

    def optimizer(obj_func, initial_theta, bounds):
        def timed(theta):
            start = time.perf_counter()
            value = obj_func(theta)
            if seconds is not None:
                seconds.append(time.perf_counter() - start)
            return value

        result = minimize(
            timed,
            initial_theta,
            jac=True,
            method="L-BFGS-B",
            bounds=bounds,
            options={"maxfun": max_evaluations},
        )
        return result.x, float(result.fun)

    return optimizer


def count_sweeps(text):
    """EP sweeps in the estimator's ``verbose=2`` output."""
    return sum("EP sweep" in line for line in text.splitlines())


def fit_gp(kernel, X, t, m=None, label_noise=0.0, **params):
    """A fitted TAP GP classifier (exact for ``m=None``) and its timer."""
    model = TAPGaussianProcessClassifier(
        kernel,
        label_noise=label_noise,
        optimizer=params.pop("optimizer", None),
        max_iter=500,
        n_inducing=m,
        random_state=0,
        **params,
    )
    with Timer() as timer:
        model.fit(X, t)
    return model, timer


def positive(model, X):
    return model.predict_proba(X)[:, 1]


def part_one(kernel, n=2000, sizes=(64, 128, 256)):
    X, t = make_data(n + N_TEST, 0)
    X, t, X_test, t_test = X[:n], t[:n], X[n:], t[n:]
    exact, timer = fit_gp(kernel, X, t)
    ll, err = log_loss_and_error(positive(exact, X_test), t_test)
    print(f"n = {n}, kernel {kernel}, probit, held-out {N_TEST}")
    print("  model       | log-loss  error  | LOO err | fit s  cpu s sweeps | vs exact")
    print(
        f"  exact       |  {ll:.4f}  {err:.3f}  |  {exact.loo_error_:.3f}  |"
        f" {timer.wall:5.2f} {timer.cpu:6.2f}  {exact.n_iter_:4d}  |"
    )
    for m in sizes:
        sparse, s_timer = fit_gp(kernel, X, t, m)
        ll_s, err_s = log_loss_and_error(positive(sparse, X_test), t_test)
        print(
            f"  sparse {m:4d} |  {ll_s:.4f}  {err_s:.3f}  |"
            f"  {sparse.loo_error_:.3f}  | {s_timer.wall:5.2f} {s_timer.cpu:6.2f}"
            f"  {sparse.n_iter_:4d}  |"
            f" log-loss {ll_s - ll:+.4f}, time {s_timer.wall / timer.wall:.2f}x"
            f" (cpu {s_timer.cpu / timer.cpu:.2f}x)"
        )


def part_two(kernel, n=50_000, m=256, n_subsample=4000, data="nonlinear"):
    generate, data_kernel, label_noise = DATASETS[data]
    kernel = data_kernel or kernel
    X, t = generate(n + N_TEST, 1)
    X, t, X_test, t_test = X[:n], t[:n], X[n:], t[n:]
    rss_before = max_rss_mib()
    sparse, timer = fit_gp(kernel, X, t, m)
    rss_after = max_rss_mib()
    print(f"{data} data, n = {n}, m = {m}, kernel {kernel} fixed, probit")
    print(
        f"  sparse TAP: fit {timer.wall:.1f} s ({timer.cpu:.1f} s cpu,"
        f" {sparse.n_iter_} sweeps, k-means included)"
    )
    print(
        f"  peak RSS {rss_before:.0f} MiB before, {rss_after:.0f} MiB after"
        f" (one n x n matrix would be {8 * n * n / 2**30:.1f} GiB)"
    )
    rows = [(f"sparse TAP m={m}", positive(sparse, X_test), timer.wall, sparse)]
    if label_noise:
        noisy, noisy_timer = fit_gp(kernel, X, t, m, label_noise=label_noise)
        print(
            f"  with label noise {label_noise}: fit {noisy_timer.wall:.1f} s"
            f" ({noisy.n_iter_} sweeps, {noisy_timer.cpu:.1f} s cpu)"
        )
        rows.append(
            (
                f"  + label noise {label_noise}",
                positive(noisy, X_test),
                noisy_timer.wall,
                noisy,
            )
        )
    exact, e_timer = fit_gp(kernel, X[:n_subsample], t[:n_subsample])
    rows.append(
        (f"exact TAP n={n_subsample}", positive(exact, X_test), e_timer.wall, exact)
    )
    for name, model in [
        ("LogisticRegression", LogisticRegression()),
        ("HistGradientBoosting", HistGradientBoostingClassifier(random_state=0)),
    ]:
        with Timer() as other:
            model.fit(X, t)
        rows.append((name, positive(model, X_test), other.wall, None))
    print("  model                  | log-loss  error | LOO err | fit s | vs sparse")
    reference = log_loss_and_error(rows[0][1], t_test)[0]
    for name, proba, seconds, model in rows:
        ll, err = log_loss_and_error(proba, t_test)
        loo_text = "  -  " if model is None else f"{model.loo_error_:.3f}"
        print(
            f"  {name:22s} |  {ll:.4f}  {err:.3f} |  {loo_text}  | {seconds:5.1f} |"
            f" log-loss {ll - reference:+.4f}, time {seconds / timer.wall:.2f}x"
        )


def part_three(n=10_000, m=256, with_inducing=True, max_evaluations=60):
    """Kernel (amplitude, 4 length scales) and inducing inputs optimised:
    the time against the 10-minute target, and where it goes (evaluations,
    EP sweeps per evaluation, seconds per evaluation and per sweep)."""
    X, t = make_data(n + N_TEST, 2)
    X, t, X_test, t_test = X[:n], t[:n], X[n:], t[n:]
    start_kernel = C(2.0) * RBF(np.ones(4))
    print(f"n = {n}, m = {m}, start {start_kernel}, probit, optimised")
    rows = []
    for inducing in (False, True) if with_inducing else (False,):
        seconds = []
        log = io.StringIO()
        with contextlib.redirect_stdout(log):
            model, timer = fit_gp(
                start_kernel,
                X,
                t,
                m,
                optimizer=limited_l_bfgs_b(max_evaluations, seconds),
                optimize_inducing_points=inducing,
                verbose=2,
            )
        name = "kernel + Z" if inducing else "kernel"
        sweeps = count_sweeps(log.getvalue())
        search = sum(seconds)
        print(
            f"  {name}: {timer.wall:.1f} s ({timer.cpu:.1f} s cpu; target 600 s),"
            f" log evidence {model.log_marginal_likelihood_value_:.2f},"
            f" {model.kernel_}"
        )
        print(
            f"    {len(seconds)} evaluations, {search:.1f} s"
            f" ({search / max(len(seconds), 1):.2f} s each), {sweeps} EP sweeps"
            f" in all ({sweeps / max(len(seconds), 1):.1f} an evaluation,"
            f" {search / max(sweeps, 1):.2f} s a sweep with the gradient's"
            f" share); outside the search (k-means, final solve):"
            f" {timer.wall - search:.1f} s"
        )
        rows.append((f"sparse TAP, {name}", positive(model, X_test), model.loo_error_))
    model = HistGradientBoostingClassifier(random_state=0).fit(X, t)
    rows.append(("HistGradientBoosting", positive(model, X_test), np.nan))
    model = LogisticRegression().fit(X, t)
    rows.append(("LogisticRegression", positive(model, X_test), np.nan))
    print("  model                        | log-loss  error | LOO err")
    for name, proba, loo in rows:
        ll, err = log_loss_and_error(proba, t_test)
        loo_text = "  -  " if np.isnan(loo) else f"{loo:.3f}"
        print(f"  {name:28s} |  {ll:.4f}  {err:.3f} |  {loo_text}")


def part_loo_gap(kernel, n=2000, m=256, n_seeds=10, n_test=20_000):
    """LOO (cavity) error and log-loss minus held-out error and log-loss,
    exact and sparse, over ``n_seeds`` data sets (seeds 100, 101, ...):
    their mean and spread tell a bias from noise.  ``n_test`` held-out
    points keep the test side's own noise small (sd of an error rate about
    0.0025 at 20,000, 0.008 at 2000)."""
    print(
        f"n = {n}, LOO - test over {n_seeds} data sets ({n_test} held-out"
        f" points each), kernel {kernel} fixed, probit"
    )
    gaps = {"exact": [], f"sparse {m}": []}
    for seed in range(100, 100 + n_seeds):
        X, t = make_data(n + n_test, seed)
        X, t, X_test, t_test = X[:n], t[:n], X[n:], t[n:]
        line = f"  seed {seed}:"
        for name, size in (("exact", None), (f"sparse {m}", m)):
            model = fit_gp(kernel, X, t, size)[0]
            ll, err = log_loss_and_error(positive(model, X_test), t_test)
            loo_ll, _ = log_loss_and_error(model.loo_proba_[:, 1], t)
            gaps[name].append((model.loo_error_ - err, loo_ll - ll))
            line += (
                f" {name} LOO err {model.loo_error_:.4f} test {err:.4f},"
                f" LOO log-loss {loo_ll:.4f} test {ll:.4f};"
            )
        print(line)
    for name, values in gaps.items():
        values = np.array(values)
        mean, sd = values.mean(axis=0), values.std(axis=0, ddof=1)
        se = sd / np.sqrt(len(values))
        print(
            f"  {name}: LOO - test error {mean[0]:+.4f} (sd {sd[0]:.4f}, se"
            f" {se[0]:.4f}); log-loss {mean[1]:+.4f} (sd {sd[1]:.4f}, se {se[1]:.4f})"
        )


def part_dask(kernel, n=200_000, m=256, n_workers=2):
    """The sparse fit with its row blocks on a LocalCluster of ``n_workers``
    worker processes (one thread each) against the local fit, same model."""
    import distributed
    from joblib import parallel_config

    X, t = make_data(n + N_TEST, 3)
    X, t, X_test, t_test = X[:n], t[:n], X[n:], t[n:]
    print(f"n = {n}, m = {m}, kernel {kernel} fixed, probit: local vs Dask")
    local, timer = fit_gp(kernel, X, t, m)
    p_local = positive(local, X_test)
    print(
        f"  local: fit {timer.wall:.1f} s ({timer.cpu:.1f} s cpu, {local.n_iter_}"
        f" sweeps), log-loss {log_loss_and_error(p_local, t_test)[0]:.4f}"
    )
    with (
        distributed.LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        client.run(_one_blas_thread)
        with parallel_config(backend="dask"), Timer() as remote_timer:
            remote = fit_gp(kernel, X, t, m)[0]
    p_remote = positive(remote, X_test)
    print(
        f"  Dask LocalCluster, {n_workers} workers x 1 thread: fit"
        f" {remote_timer.wall:.1f} s ({remote_timer.cpu:.1f} s cpu here),"
        f" {remote.n_iter_} sweeps"
    )
    print(
        f"  max |proba local - proba Dask| on {N_TEST} held-out points:"
        f" {np.max(np.abs(p_local - p_remote)):.2e}; wall-time ratio"
        f" local / cluster {timer.wall / remote_timer.wall:.2f}"
    )


def _one_blas_thread():
    """Limit a Dask worker to one BLAS thread (as the local fit)."""
    threadpool_limits(1)


def largest_within(fit, n_max, budget, start=500):
    """The largest subsample size whose fit takes at most ``budget`` seconds,
    by doubling from ``start``: the next size is tried only when its time,
    extrapolated from the last two fits' growth (cubic until there are two),
    is within the budget.  Returns ``(size, seconds, model)`` of the largest
    fit within it (None when even ``start`` is over) and the sizes tried."""
    best, tried = None, []
    size, times = start, []
    while size <= n_max:
        if len(times) >= 2:
            exponent = np.log(times[-1][1] / times[-2][1]) / np.log(2.0)
            predicted = times[-1][1] * 2.0 ** max(exponent, 1.0)
        else:
            predicted = times[-1][1] * 8.0 if times else 0.0
        if predicted > budget:
            break
        model, seconds = fit(size)
        tried.append((size, seconds))
        times.append((size, seconds))
        if seconds > budget:
            break
        best = (size, seconds, model)
        size *= 2
    return best, tried


def part_budget(kernel, n=50_000, m=256, optimise=False):
    """What a user would do instead in the sparse fit's wall time: exact TAP
    and scikit-learn's GaussianProcessClassifier on the largest subsample
    they fit within it (a doubling search), LogisticRegression and
    HistGradientBoostingClassifier on all the data."""
    X, t = make_data(n + N_TEST, 1)
    X, t, X_test, t_test = X[:n], t[:n], X[n:], t[n:]
    if optimise:  # every GP learns its kernel (scikit-learn's default)
        kernel = C(2.0) * RBF(np.ones(4))
    optimizer = "fmin_l_bfgs_b" if optimise else None
    sparse, timer = fit_gp(kernel, X, t, m, optimizer=optimizer)
    budget = timer.wall
    what = "optimised" if optimise else "fixed"
    print(f"n = {n}, kernel {what}: the sparse fit's wall time is the budget")
    rows = [(f"sparse TAP m={m}, n={n}", positive(sparse, X_test), budget)]
    candidates = [
        (
            "exact TAP",
            lambda size: fit_gp(kernel, X[:size], t[:size], optimizer=optimizer),
        ),
        (
            "sklearn GPC (Laplace)",
            lambda size: _sklearn_gpc(kernel, X[:size], t[:size], optimizer),
        ),
    ]
    for name, fit in candidates:

        def timed(size, fit=fit):
            model, timer = fit(size)
            return model, timer.wall

        best, tried = largest_within(timed, n, budget)
        sizes = ", ".join(f"{size}: {seconds:.1f} s" for size, seconds in tried)
        print(f"  {name}: doubling from 500 rows ({sizes})")
        if best is None:
            print(f"  {name}: not even 500 rows fit within the budget")
        else:
            size, seconds, model = best
            rows.append((f"{name}, n={size}", positive(model, X_test), seconds))
    for name, model in [
        ("LogisticRegression", LogisticRegression()),
        ("HistGradientBoosting", HistGradientBoostingClassifier(random_state=0)),
    ]:
        with Timer() as other:
            model.fit(X, t)
        rows.append((f"{name}, n={n}", positive(model, X_test), other.wall))
    print(f"  budget {budget:.1f} s (load {os.getloadavg()[0]:.1f})")
    print("  model                              | log-loss  error | fit s")
    for name, proba, seconds in rows:
        ll, err = log_loss_and_error(proba, t_test)
        print(f"  {name:34s} |  {ll:.4f}  {err:.3f} | {seconds:6.1f}")


def _sklearn_gpc(kernel, X, t, optimizer):
    from sklearn.gaussian_process import GaussianProcessClassifier

    model = GaussianProcessClassifier(kernel, optimizer=optimizer, random_state=0)
    with Timer() as timer:
        model.fit(X, t)
    return model, timer


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", action="store_true", help="also n = 50,000")
    parser.add_argument("--large-only", action="store_true")
    parser.add_argument("--blas-threads", type=int, default=1)
    parser.add_argument("--large-n", type=int, default=50_000)
    parser.add_argument("--large-m", type=int, default=256)
    parser.add_argument("--subsample", type=int, default=4000)
    parser.add_argument(
        "--data",
        choices=sorted(DATASETS),
        default="nonlinear",
        help="data set of the n = 50,000 part (hastie: ESL's make_hastie_10_2)",
    )
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
    parser.add_argument(
        "--dask", action="store_true", help="local vs LocalCluster (2 workers)"
    )
    parser.add_argument(
        "--loo-gap", action="store_true", help="LOO - test over 10 data sets"
    )
    parser.add_argument("--dask-n", type=int, default=200_000)
    parser.add_argument(
        "--budget",
        action="store_true",
        help="exact TAP / sklearn GPC on subsamples in the sparse fit's time",
    )
    parser.add_argument(
        "--budget-optimised",
        action="store_true",
        help="with --budget: every GP learns its kernel",
    )
    args = parser.parse_args()
    kernel = C(2.0, "fixed") * RBF(1.0, "fixed")
    print(f"load average {os.getloadavg()[0]:.2f}, BLAS threads {args.blas_threads}")
    with threadpool_limits(args.blas_threads):
        if args.loo_gap:
            part_loo_gap(kernel)
            return
        if args.dask:
            part_dask(kernel, args.dask_n, args.large_m)
            return
        if args.budget:
            part_budget(kernel, args.large_n, args.large_m, args.budget_optimised)
            return
        if args.optimise:
            part_three(args.optimise_n, args.large_m, not args.kernel_only)
        elif args.quick:
            part_one(kernel, n=500, sizes=(32, 64))
        elif not args.large_only:
            part_one(kernel)
        if args.large or args.large_only:
            part_two(kernel, args.large_n, args.large_m, args.subsample, args.data)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

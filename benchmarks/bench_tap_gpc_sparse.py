"""Sparse (FITC) TAP / EP next to exact TAP, through the estimator.

Every GP fit is a ``TAPGaussianProcessClassifier``: exact (``n_inducing=None``)
or sparse (``n_inducing=m``, k-means inducing inputs, ``random_state=0``),
with the fixed kernel ``ConstantKernel(2) * RBF(1)`` for both models (close
to the exact model's best log evidence on this data) and the probit
likelihood, except in part 3 (optimised kernel, and inducing inputs with
``optimize_inducing_points=True``, L-BFGS-B limited to 60 evaluations).

Data: ``X ~ N(0, I_4)``, boundary ``sin(2 x0) + 0.8 x1^2 - 0.8 + 0.5 x2 x3 >
0``, every label flipped with probability 0.1 (so the Bayes log-loss is at
least 0.325, the Bayes error at least 0.10); 2000 held-out points.

Part 1, n = 2000: held-out log-loss and error of exact TAP and of sparse TAP
(m = 64, 128, 256), the LOO error from the cavities (no refits) next to the
held-out error, fit time (k-means included), sweeps, and each sparse fit's
log-loss difference and time ratio against the exact fit.
Part 2, n = 50,000 (``--large``), fixed kernel: fit time and sweeps, peak
resident memory (``ru_maxrss``, before and after) and the held-out log-loss
and error (also with the true label noise 0.1 in the likelihood), next to
exact TAP (same kernel) on the first ``--subsample`` points and
``LogisticRegression`` and ``HistGradientBoostingClassifier`` on all the
data; ``--data hastie`` runs it on ``make_hastie_10_2`` instead.
Part 3 (``--optimise``, n = ``--optimise-n``): the optimised fit's time and
where it goes (evaluations, EP sweeps per evaluation, seconds per sweep).
Inducing inputs (run with part 1): for n = 300 and 1000 rows and m = 12 and
48, four data sets each, the default kernel learned with k-means inducing
inputs and with ``optimize_inducing_points=True``: their held-out log-loss,
on how many data sets learning the inputs is better, the same (the inputs
kept at their start) or worse, and the largest rise.
ARD (run with part 1): n = 15,000, ten standardised inputs of which the
labels depend on four (those of the data above; six of pure noise), m =
256: the default isotropic kernel and ``C(1) * RBF`` with a length scale
per input, both learned by L-BFGS-B, next to LogisticRegression and
HistGradientBoosting: held-out log-loss and error, LOO error, fit time,
and the ARD kernel's length scales.

``--loo-gap``: the LOO (cavity) error and log-loss minus the held-out ones at
n = 2000 over 10 data sets with 20,000 held-out points each, exact and
sparse (m = 256): their mean and spread tell a bias of the LOO estimate from
noise.  ``--dask`` (n = ``--dask-n``, m = 256, fixed kernel): the local fit,
then the same fit under ``joblib.parallel_config(backend="dask")`` on a
``LocalCluster`` of 2 worker processes with one thread each (the row blocks
live on the workers); the largest difference of their held-out
probabilities and the wall-time ratio local / cluster.  ``--budget`` (n =
``--large-n``, fixed kernel; ``--budget-optimised``: every GP learns its
kernel): the sparse fit's wall time is the budget; exact TAP and
scikit-learn's GaussianProcessClassifier are fitted on the first 500, 1000,
2000, ... rows while the next fit's time, extrapolated from the last two,
stays within the budget, and the largest fit within it is scored;
LogisticRegression and HistGradientBoosting on all rows.

``--vs-gpytorch`` (n = ``--vs-n``, m = ``--vs-m``; the data of ``--dask``
at the default n): the sparse fit learning its kernel (amplitude and one
length scale, both from 1) and its inducing inputs by stochastic EP
(``--vs-kernel-only``: the kernel only; ``--vs-optimizer fmin_l_bfgs_b``:
the full-batch search), next to GPyTorch's variational sparse GP classifier
(``_gpytorch_side.py``: the same zero-mean probit model and starting
kernel, a Gaussian q(u) learned with the kernel and the inducing inputs by
Adam on the minibatch ELBO).
Both start from the same k-means centres (the estimator's own for
``random_state=0``, computed once and given to both; their time is
reported apart), run on ``--blas-threads`` threads in float64, and are
scored on the 2000 held-out points.  GPyTorch is trained for at most
``--vs-budget`` seconds (evaluations excluded) and stops earlier when its
held-out log-loss stalls; the table gives our fit time, log-loss and error,
GPyTorch's best log-loss (chosen on the held-out set, which favours it) with
the time it first reached it, the time it first reached our log-loss (both
at its evaluations, every epoch or 50 steps, whichever is more), its last
evaluation, and each time over ours.  Not in ``python -m benchmarks``:
it needs torch and gpytorch (the ``benchmark`` extra) and, at the defaults,
more than ten minutes of a quiet machine.

Times are wall-clock (``time.perf_counter``) of one run, next to the process
CPU time (``time.process_time``, steadier on a shared machine); BLAS threads
from ``--blas-threads`` (default 1, as ``bench_tap_gpc.py``).  Run the heavy
parts (``--dask``, ``--optimise --optimise-n 50000``) on a quiet machine.
Usage::

    python -m benchmarks.bench_tap_gpc_sparse [--large | --large-only | --quick]
        [--blas-threads K] [--data {nonlinear,hastie}]
        [--optimise [--kernel-only] [--optimise-n N]]
    python -m benchmarks.bench_tap_gpc_sparse --dask [--dask-n N]
    python -m benchmarks.bench_tap_gpc_sparse --budget [--budget-optimised]
    python -m benchmarks.bench_tap_gpc_sparse --loo-gap
    python -m benchmarks.bench_tap_gpc_sparse --vs-gpytorch [--vs-n N] [--vs-m M]
        [--vs-budget SECONDS] [--vs-kernel-only] [--vs-optimizer fmin_l_bfgs_b]
"""

import argparse
import contextlib
import io
import os
import resource
import time
import warnings

import numpy as np
from scipy.optimize import minimize
from sklearn.datasets import make_hastie_10_2
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.exceptions import ConvergenceWarning
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


def peer_rows(X, t, X_test):
    """``(name, held-out P(+1), fit seconds, None)`` of LogisticRegression
    and HistGradientBoosting fitted on ``X, t``."""
    rows = []
    for name, model in [
        ("LogisticRegression", LogisticRegression()),
        ("HistGradientBoosting", HistGradientBoostingClassifier(random_state=0)),
    ]:
        with Timer() as timer:
            model.fit(X, t)
        rows.append((name, positive(model, X_test), timer.wall, None))
    return rows


def print_rows(rows, t_test):
    """One line per ``(name, held-out P(+1), fit seconds, fitted GP or
    None)``: log-loss, error, LOO error, fit time, and the log-loss and time
    against the first row's."""
    reference_ll, reference_time = log_loss_and_error(rows[0][1], t_test)[0], rows[0][2]
    for name, proba, seconds, model in rows:
        ll, err = log_loss_and_error(proba, t_test)
        loo_text = "  -  " if model is None else f"{model.loo_error_:.3f}"
        print(
            f"  {name:22s} |  {ll:.4f}  {err:.3f} |  {loo_text}  | {seconds:6.1f} |"
            f" log-loss {ll - reference_ll:+.4f}, time {seconds / reference_time:.2f}x"
        )


def part_one(kernel, n=2000, sizes=(64, 128, 256)):
    X, t = make_data(n + N_TEST, 0)
    X, t, X_test, t_test = X[:n], t[:n], X[n:], t[n:]
    exact, timer = fit_gp(kernel, X, t)
    ll, err = log_loss_and_error(positive(exact, X_test), t_test)
    print(f"n = {n}, kernel {kernel}, probit, held-out {N_TEST}")
    print(
        "  model       | log-loss  error | LOO err |  fit s  cpu s sweeps |"
        " vs exact: log-loss  time   cpu"
    )
    print(
        f"  exact       |   {ll:.4f}  {err:.3f} |   {exact.loo_error_:.3f} |"
        f" {timer.wall:6.2f} {timer.cpu:6.2f} {exact.n_iter_:6d} |"
    )
    for m in sizes:
        sparse, s_timer = fit_gp(kernel, X, t, m)
        ll_s, err_s = log_loss_and_error(positive(sparse, X_test), t_test)
        print(
            f"  sparse {m:4d} |   {ll_s:.4f}  {err_s:.3f} |"
            f"   {sparse.loo_error_:.3f} | {s_timer.wall:6.2f} {s_timer.cpu:6.2f}"
            f" {sparse.n_iter_:6d} |            {ll_s - ll:+.4f}"
            f" {s_timer.wall / timer.wall:5.2f}x {s_timer.cpu / timer.cpu:5.2f}x"
        )


def part_inducing(setups=((300, 48), (300, 12), (1000, 12), (1000, 48)), seeds=4):
    """Learned against fixed inducing inputs, kernel learned (default kernel).

    For each (n, m) and data seed: the held-out log-loss of the fit with
    k-means inducing inputs and of ``optimize_inducing_points=True`` (kept
    at the start unless their held-out Brier score says otherwise)."""
    print(
        "inducing inputs learned vs fixed (default kernel learned, k-means"
        f" start), held-out {N_TEST}, {seeds} data sets each"
    )
    print(
        "  n     m  | fixed log-loss | learned log-loss | learned better / same"
        " / worse | largest rise | fit s fixed / learned"
    )
    rises = []
    for n, m in setups:
        fixed_ll, learned_ll, times = [], [], [0.0, 0.0]
        for seed in range(seeds):
            X, t = make_data(n + N_TEST, 100 + seed)
            X, t, X_test, t_test = X[:n], t[:n], X[n:], t[n:]
            for index, learn in enumerate((False, True)):
                model = TAPGaussianProcessClassifier(
                    n_inducing=m, optimize_inducing_points=learn, random_state=seed
                )
                with Timer() as timer, warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    model.fit(X, t)
                times[index] += timer.wall
                ll, _ = log_loss_and_error(positive(model, X_test), t_test)
                (learned_ll if learn else fixed_ll).append(ll)
        diff = np.array(learned_ll) - np.array(fixed_ll)
        rises.append(diff.max())
        print(
            f"  {n:5d} {m:3d} |         {np.mean(fixed_ll):.4f} |"
            f"           {np.mean(learned_ll):.4f} |"
            f" {np.sum(diff < -1e-9):7d} / {np.sum(np.abs(diff) <= 1e-9):4d} /"
            f" {np.sum(diff > 1e-9):5d}       |      {diff.max():+.4f} |"
            f" {times[0]:6.1f} / {times[1]:6.1f}"
        )
    worst = max(rises)
    print(
        "  target: learned inducing inputs never raise the held-out log-loss by"
        f" more than 0.01 over fixed ones: largest rise {worst:+.4f},"
        f" {'holds' if worst <= 0.01 else 'does not hold'}"
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
    rows += peer_rows(X, t, X_test)
    print("  model                  | log-loss  error | LOO err |  fit s | vs sparse")
    print_rows(rows, t_test)


def make_irrelevant(n, seed, n_irrelevant=6):
    """The four inputs of :func:`make_data`, then ``n_irrelevant`` inputs
    the labels do not depend on, on scales from 0.3 to 3."""
    X, t = make_data(n, seed)
    rng = np.random.default_rng(seed + 1000)
    scales = np.geomspace(0.3, 3.0, n_irrelevant)
    return np.hstack([X, rng.normal(size=(n, n_irrelevant)) * scales]), t


def part_ard(n=15_000, m=256):
    """An ARD kernel (a length scale per input) against the isotropic
    default on data where six of ten inputs are irrelevant, inputs
    standardised; HistGradientBoosting and LogisticRegression alongside."""
    X, t = make_irrelevant(n + N_TEST, 2)
    X = (X - X[:n].mean(axis=0)) / X[:n].std(axis=0)
    X, t, X_test, t_test = X[:n], t[:n], X[n:], t[n:]
    d = X.shape[1]
    print(
        f"ARD: n = {n}, {d} standardised inputs (4 relevant), m = {m}, kernel"
        " learned by L-BFGS-B, probit"
    )
    print("  model                  | log-loss  error | LOO err |  fit s | vs iso")
    rows = []
    for name, kernel in [
        ("isotropic (default)", None),
        ("ARD", C(1.0) * RBF(np.full(d, np.sqrt(d)), (1e-2, 1e3))),
    ]:
        model = TAPGaussianProcessClassifier(
            kernel, n_inducing=m, optimizer="fmin_l_bfgs_b", random_state=0
        )
        with Timer() as timer, warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(X, t)
        rows.append((name, positive(model, X_test), timer.wall, model))
    rows += peer_rows(X, t, X_test)
    print_rows(rows, t_test)
    ard = rows[1][3].kernel_.k2.length_scale
    print(
        "  ARD length scales: relevant "
        + " ".join(f"{v:.3g}" for v in ard[:4])
        + " | irrelevant "
        + " ".join(f"{v:.3g}" for v in ard[4:])
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


def estimator_inducing_points(X, m, random_state=0):
    """The k-means centres a sparse fit of one binary problem starts from
    with this ``random_state``: the estimator's seed chain (one seed per
    problem, then the problem's k-means seed drawn first from it)."""
    # Private on purpose: the estimator has no public way to return its
    # starting inducing inputs, and both sides must start from them.
    from sklearn_meanfield._parallel import draw_seeds
    from sklearn_meanfield.tap._sparse_gpc import (
        InducingOptions,
        initial_inducing_points,
    )

    problem_seed = int(draw_seeds(random_state, 1)[0])
    rng = np.random.RandomState(problem_seed)
    kmeans_seed = int(rng.randint(np.iinfo(np.int32).max))
    return initial_inducing_points(X, InducingOptions(m), kmeans_seed)


def part_vs_gpytorch(
    n=200_000, m=256, budget=600.0, kernel_only=False, optimizer="stochastic", threads=1
):
    """Our sparse fit (kernel, and inducing inputs unless ``kernel_only``,
    learned) against GPyTorch's variational sparse GP trained for at most
    ``budget`` seconds, both from the same k-means centres."""
    if __package__:
        from ._gpytorch_side import gpytorch_trajectory, import_gpytorch
    else:  # run as a script: benchmarks/ is on sys.path
        from _gpytorch_side import gpytorch_trajectory, import_gpytorch
    try:  # before our fit: fail early
        torch, gpytorch = import_gpytorch()
    except ImportError as error:
        raise SystemExit(str(error)) from None

    X, t = make_data(n + N_TEST, 3)
    X, t, X_test, t_test = X[:n], t[:n], X[n:], t[n:]
    start_kernel = C(1.0) * RBF(1.0)
    with Timer() as kmeans:
        Z0 = estimator_inducing_points(X, m)
    learns = "kernel" if kernel_only else "kernel + Z"
    print(
        f"n = {n}, m = {m}, start {start_kernel}, probit, held-out {N_TEST};"
        f" threads {threads}"
    )
    print(f"  k-means centres, both sides' start: {kmeans.wall:.1f} s (not counted)")
    ours = TAPGaussianProcessClassifier(
        kernel=start_kernel,
        n_inducing=m,
        inducing_points=Z0,
        optimize_inducing_points=not kernel_only,
        optimizer=optimizer,
        random_state=0,
    )
    with Timer() as timer:
        ours.fit(X, t)
    ll, err = log_loss_and_error(positive(ours, X_test), t_test)
    print(
        f"  ours: optimizer={optimizer!r}, learns {learns}; fit {timer.wall:.1f} s"
        f" ({timer.cpu:.1f} s cpu)"
    )
    run = gpytorch_trajectory(X, t, X_test, t_test, Z0, budget, n_threads=threads)
    print(
        f"  GPyTorch {gpytorch.__version__} (torch {torch.__version__}): SVGP,"
        f" learns kernel + Z, Adam lr {run.lr:g}, batch {run.batch_size};"
    )
    print(
        f"    {len(run.steps)} evaluations, {run.steps[-1]} steps"
        f" ({run.steps[-1] / run.steps_per_epoch:.1f} epochs), stopped: {run.stop}"
    )
    print(f"  kernels: ours {ours.kernel_}, GPyTorch {run.kernel}")
    rows = [("sparse TAP (ours)", timer.wall, ll, err)]
    for name, index in (
        ("GPyTorch, its best", run.best()),
        ("GPyTorch, first at ours", run.first_reaching(ll)),
        ("GPyTorch, last evaluation", len(run.seconds) - 1),
    ):
        if index is None:
            rows.append((name, None, None, None))
        else:
            rows.append(
                (name, run.seconds[index], run.log_loss[index], run.error[index])
            )
    print("  model                     | train s | log-loss  error | time / ours")
    for name, seconds, row_ll, row_err in rows:
        if seconds is None:
            print(f"  {name:25s} | not within the budget ({budget:g} s)")
            continue
        print(
            f"  {name:25s} | {seconds:7.1f} |   {row_ll:.4f}  {row_err:.3f} |"
            f" {seconds / timer.wall:10.2f}x"
        )
    best = run.best()
    holds = ll <= run.log_loss[best] and timer.wall <= 0.5 * run.seconds[best]
    print(
        "  target: our log-loss at or below GPyTorch's best in at most half its"
        f" time to it ({ll:.4f} vs {run.log_loss[best]:.4f}, {timer.wall:.0f} s"
        f" vs {0.5 * run.seconds[best]:.0f} s): {'holds' if holds else 'does not hold'}"
    )
    print(f"  load average {os.getloadavg()[0]:.2f}")


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
    parser.add_argument(
        "--vs-gpytorch",
        action="store_true",
        help="learned sparse fit vs GPyTorch's variational GP (needs gpytorch)",
    )
    parser.add_argument("--vs-n", type=int, default=200_000)
    parser.add_argument("--vs-m", type=int, default=256)
    parser.add_argument(
        "--vs-budget",
        type=float,
        default=600.0,
        help="GPyTorch's training wall-clock cap in seconds",
    )
    parser.add_argument(
        "--vs-kernel-only",
        action="store_true",
        help="with --vs-gpytorch: ours learns the kernel only, not Z",
    )
    parser.add_argument(
        "--vs-optimizer",
        choices=("stochastic", "fmin_l_bfgs_b"),
        default="stochastic",
        help="with --vs-gpytorch: our search (full-batch L-BFGS-B or minibatch)",
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
        if args.vs_gpytorch:
            part_vs_gpytorch(
                args.vs_n,
                args.vs_m,
                args.vs_budget,
                args.vs_kernel_only,
                args.vs_optimizer,
                args.blas_threads,
            )
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
            part_inducing()
            part_ard()
        if args.large or args.large_only:
            part_two(kernel, args.large_n, args.large_m, args.subsample, args.data)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

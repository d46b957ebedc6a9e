"""
=============================================================
Large-n Gaussian-process classification with inducing points
=============================================================

Exact TAP Gaussian-process classification costs ``O(n^3)`` time and
``O(n^2)`` memory, which beyond a few thousand rows leaves a subsample as the
only exact option.  The sparse mode of
:class:`~sklearn_meanfield.TAPGaussianProcessClassifier`, which the default
``n_inducing="auto"`` switches on above 4000 rows, runs the same TAP / EP
equations on the FITC prior of ``m`` inducing inputs
(Csato and Opper's sparse on-line GPs in batch form, Naish-Guzman and
Holden's FITC-EP): ``O(n m^2)`` time and ``O(n m)`` memory, so it uses all
the data.  This example draws the learning curve a user faces: held-out
log-loss against the number of training rows for exact TAP on subsamples
(up to 4000 rows) and sparse TAP with
``m = 256`` on up to 50,000 rows, with
:class:`~sklearn.linear_model.LogisticRegression` as the floor a linear model
reaches, and the fit times.
"""

# %%
# Data and kernel
# ---------------
# Four standard-normal inputs, a non-linear boundary
# ``sin(2 x0) + 0.8 x1^2 - 0.8 + 0.5 x2 x3 > 0`` and every label flipped with
# probability 0.1 (so no classifier gets a log-loss below about 0.33).  The
# kernel is learned once, by maximising exact TAP's evidence on 1000 rows,
# and then kept fixed for every fit below, so the curves differ only in the
# data each model sees and in the approximation.
import time
import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss
from threadpoolctl import threadpool_limits

from sklearn_meanfield import TAPGaussianProcessClassifier

# The exact fits' matrices are small enough for one BLAS thread, and the
# sparse fit's work is many m x m products: one thread keeps the timings
# comparable on a shared machine.
threadpool_limits(limits=1, user_api="blas")


def make_data(n, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    f = np.sin(2 * X[:, 0]) + 0.8 * X[:, 1] ** 2 - 0.8 + 0.5 * X[:, 2] * X[:, 3]
    y = (f > 0) ^ (rng.uniform(size=n) < 0.1)
    return X, y.astype(int)


X, y = make_data(50_000, 0)
X_test, y_test = make_data(5000, 1)

kernel = (
    TAPGaussianProcessClassifier(ConstantKernel(1.0) * RBF(1.0), random_state=0)
    .fit(X[:1000], y[:1000])
    .kernel_
)
print("kernel:", kernel)

# %%
# The learning curves
# -------------------
# ``n_inducing=None`` is the exact model, ``n_inducing=256`` the sparse one
# (k-means centres of the inputs as inducing inputs).  ``n_inducing="auto"``,
# the default, switches from the first to the second above 4000 rows.


def fit_and_score(model, n):
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X[:n], y[:n])
    seconds = time.perf_counter() - start
    return log_loss(y_test, model.predict_proba(X_test)), seconds


def gp(n_inducing):
    return TAPGaussianProcessClassifier(
        kernel, n_inducing=n_inducing, optimizer=None, random_state=0
    )


exact_sizes = [250, 500, 1000, 2000, 4000]
sparse_sizes = [1000, 2000, 5000, 10_000, 20_000, 50_000]
curves = {
    "exact TAP (subsamples)": [fit_and_score(gp(None), n) for n in exact_sizes],
    "sparse TAP, m = 256": [fit_and_score(gp(256), n) for n in sparse_sizes],
    "LogisticRegression": [
        fit_and_score(LogisticRegression(), n) for n in sparse_sizes
    ],
}
sizes = {
    "exact TAP (subsamples)": exact_sizes,
    "sparse TAP, m = 256": sparse_sizes,
    "LogisticRegression": sparse_sizes,
}
for name, results in curves.items():
    print(name)
    for n, (loss, seconds) in zip(sizes[name], results):
        print(f"  n = {n:6d}: log-loss {loss:.4f}, fit {seconds:6.2f} s")

# %%
# Plot
# ----
# Exact TAP is the better model at equal n (the sparse prior is an
# approximation of its kernel), but it stops at a few thousand rows; the
# sparse fit keeps improving with the data, in less time than the largest
# exact fit.
fig, (ax_loss, ax_time) = plt.subplots(1, 2, figsize=(10, 4))
for name, results in curves.items():
    losses, seconds = np.array(results).T
    ax_loss.plot(sizes[name], losses, "o-", label=name)
    ax_time.plot(sizes[name], seconds, "o-", label=name)
ax_loss.axhline(0.325, color="gray", ls=":", label="label noise floor (about)")
ax_loss.set(xscale="log", xlabel="training rows n", ylabel="held-out log-loss")
ax_time.set(xscale="log", yscale="log", xlabel="training rows n", ylabel="fit time (s)")
ax_loss.legend()
fig.tight_layout()
plt.show()

# %%
# Choosing ``m`` and scaling out
# ------------------------------
# Accuracy grows with ``m`` and the cost as ``n m^2``:
# ``benchmarks/bench_tap_gpc_sparse.py`` compares m = 64, 128 and 256 with
# exact TAP at n = 2000 (its table is in ``benchmarks/RESULTS.md`` and in the
# user guide).  Under
# ``joblib.parallel_config(backend="dask")`` the sparse fit keeps its row
# blocks on the Dask workers and gives the same model.

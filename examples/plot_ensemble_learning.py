"""
==================================================
Ensemble learning for a two-layer network
==================================================

Barber & Bishop (1998) fit a Gaussian ``Q(w) = N(mean, C)`` with a *full*
covariance to the posterior of a two-layer network with erf hidden units by
maximising a lower bound on the log evidence.  Every expectation in that bound
has a closed form, so the fit is deterministic, and the hyperparameters (noise
precision, one prior precision per input) are re-estimated along the way.

This example shows the three things the method gives besides a point fit: a
predictive band that widens away from the data, a bound that rises iteration
by iteration, and prior precisions that switch off irrelevant inputs (automatic
relevance determination) on ``make_friedman1``, where only the first five of
ten inputs matter.
"""

# %%
# A predictive band on 1-D data
# -----------------------------
# The predictive standard deviation combines the noise level ``1 / alpha_``
# with the spread of the network output under ``Q``; it grows where there are
# no data.
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import make_friedman1

from sklearn_meanfield import EnsembleLearningRegressor

rng = np.random.RandomState(0)
X = np.concatenate([rng.uniform(-3, -0.5, 25), rng.uniform(1, 3, 25)])[:, None]
y = np.sin(1.5 * X[:, 0]) + 0.15 * rng.normal(size=len(X))

model = EnsembleLearningRegressor(hidden_layer_size=6, random_state=0).fit(X, y)
grid = np.linspace(-6, 6, 300)[:, None]
mean, std = model.predict(grid, return_std=True)

fig, ax = plt.subplots(figsize=(7, 3.5))
ax.fill_between(grid[:, 0], mean - 2 * std, mean + 2 * std, alpha=0.3, label="±2 sd")
ax.plot(grid[:, 0], mean, label="predictive mean")
ax.plot(grid[:, 0], np.sin(1.5 * grid[:, 0]), "k--", lw=1, label="truth")
ax.scatter(X[:, 0], y, s=12, c="k", label="data")
ax.set(xlabel="x", ylabel="y", title="EnsembleLearningRegressor, full covariance")
ax.legend(loc="lower left", fontsize=8)
fig.tight_layout()

# %%
# The bound across iterations
# ---------------------------
# Full and diagonal covariances are fitted by natural-gradient steps (the
# precision of ``Q`` moves towards the prior precision plus the expected
# Hessian of the data term), the low-rank family by L-BFGS phases; every
# iteration ends with the exact re-estimation of the hyperparameters, so the
# bound on the log evidence never decreases.  The fit stops when an iteration
# raises the bound by less than ``tol`` relative to its size.  The three
# covariance families are nested, so the full covariance can reach the
# highest bound.
X_f, y_f = make_friedman1(n_samples=200, noise=1.0, random_state=0)
fits = {
    covariance: EnsembleLearningRegressor(
        hidden_layer_size=8,
        covariance=covariance,
        n_restarts=1,
        random_state=0,
        **({"max_iter": 20} if covariance == "lowrank" else {}),
    ).fit(X_f, y_f)
    for covariance in ("full", "lowrank", "diag")
}
fig, ax = plt.subplots(figsize=(6, 3.5))
for covariance, fit in fits.items():
    ax.plot(np.arange(1, fit.n_iter_ + 1), fit.scores_, "o-", label=covariance)
ax.set(xlabel="iteration", ylabel="lower bound on log evidence", title="friedman1")
ax.set_xscale("log")
ax.legend()
fig.tight_layout()

# %%
# Automatic relevance determination
# ---------------------------------
# One prior precision per input: large values shrink that input's weights to
# zero.  Inputs 6-10 of ``make_friedman1`` are pure noise; their precisions
# climb towards the cap of 1e6 (standardised units), where the input's effect
# on every hidden unit is negligible.
lam = fits["full"].lambda_[: X_f.shape[1]]
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.bar(np.arange(1, 11), lam, color=["C0"] * 5 + ["C3"] * 5)
ax.set_yscale("log")
ax.set(xlabel="input", ylabel="prior precision (lambda_)", title="ARD on friedman1")
fig.tight_layout()
plt.show()

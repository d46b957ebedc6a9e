"""
===========================================================
Bayesian network regression by Hybrid Monte Carlo (Neal)
===========================================================

A one-hidden-layer tanh network with hierarchical Gaussian priors is fitted to
noisy 1-D data by sampling its posterior with Hybrid Monte Carlo, as in Neal
(1993).  Averaging the network over the posterior draws gives a predictive
mean and a predictive band that widens away from the data; the draws
themselves show the functions the data allow.  Trace plots of several chains
with their split R-hat say whether the chains agree, and Pareto-smoothed
importance sampling gives leave-one-out predictions from the same draws, with
a k-hat per point that says which of them can be trusted.
"""

# %%
# Data: a smooth function, noise sd 0.1, and a gap in the inputs
# ---------------------------------------------------------------
import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.exceptions import ConvergenceWarning

from sklearn_meanfield import HMCNetworkRegressor
from sklearn_meanfield.diagnostics import split_rhat

rng = np.random.RandomState(0)
X = np.concatenate([rng.uniform(-3, -0.5, 50), rng.uniform(1.0, 3, 40)])[:, None]


def truth(x):
    return np.sin(2 * x) + 0.3 * x


y = truth(X[:, 0]) + rng.normal(0, 0.1, size=len(X))
# One outlier: its leave-one-out estimate is the hardest.
y[10] += 1.0

# The defaults: 10 hidden units, 4 chains of 500 warm-up iterations and 1000
# draws, trajectory lengths adapted during warm-up (ChEES, several hundred
# leapfrog steps); two workers run two chains each.  On these data the chains
# first disagree about the precision of the hidden biases (units whose tanh
# transition sits in the gap or beyond the data have biases the data do not
# pin down, and their sum of squares drifts slowly), so
# ``max_samples="auto"`` continues them until they agree (up to 8000 draws
# per chain on data this small).  The long adapted trajectories meet a
# divergent one now and then, which the fit reports with a
# ``ConvergenceWarning``; ``target_accept=0.9`` (smaller steps) makes them
# rare.  The fit's warnings are collected and printed, so that the output
# below says whether there were any.
model = HMCNetworkRegressor(
    max_samples="auto", target_accept=0.9, n_jobs=2, random_state=0
)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", ConvergenceWarning)
    model.fit(X, y)
fit_warnings = [w for w in caught if issubclass(w.category, ConvergenceWarning)]
for w in fit_warnings:
    print(f"ConvergenceWarning: {w.message}")
print(f"convergence warnings: {len(fit_warnings)}")
print(f"draws per chain: {model.n_draws_}")
print(f"acceptance per chain: {np.round(model.acceptance_rate_, 2)}")
print(f"noise sd: {model.noise_std_[0]:.3f}, largest split R-hat: {model.rhat_:.3f}")
print(f"PSIS-LOO mean squared error: {model.loo_error_:.4f}")

# %%
# A warning is part of the result, not a failure: the model is usable either
# way.  A warning about chains that disagree gives R-hat, the quantity that
# mixes worst and one remedy; one about divergent trajectories asks for a
# larger ``target_accept``; one about Pareto k-hat says that some
# leave-one-out estimates cannot be trusted (see the user guide's
# Diagnostics section).

# %%
# Posterior predictive band and draws of the network function
# -----------------------------------------------------------
# The band (mean +- 2 sd, noise included) is narrow where the data are and
# opens up in the gap and beyond the data; individual draws of the network
# agree on the data and disagree elsewhere.
grid = np.linspace(-4.5, 4.5, 300)[:, None]
mean, std = model.predict(grid, return_std=True)
functions = model.predict_draws(grid)

fig, ax = plt.subplots(figsize=(8, 4.5))
ax.fill_between(
    grid[:, 0],
    mean - 2 * std,
    mean + 2 * std,
    color="C0",
    alpha=0.2,
    label="predictive mean $\\pm$ 2 sd",
)
pick = np.random.RandomState(1).choice(len(functions), size=15, replace=False)
ax.plot(grid[:, 0], functions[pick].T, color="C1", lw=0.7, alpha=0.6)
ax.plot(grid[:, 0], mean, color="C0", lw=2, label="predictive mean")
ax.plot(grid[:, 0], truth(grid[:, 0]), "k--", lw=1, label="truth")
ax.scatter(X[:, 0], y, s=12, color="k", zorder=3, label="data")
ax.set_ylim(-4, 4)
ax.set_xlabel("x")
ax.set_ylabel("y")
ax.set_title("Posterior predictive band and 15 posterior network draws")
ax.legend(loc="lower right")

# %%
# Trace plots with split R-hat
# ----------------------------
# Draws are stored chain after chain.  The noise sd and the prediction at one
# input in the gap and one in the data are traced per chain; the
# hyperparameters (here the noise) mix within a few iterations while the
# function in the gap wanders more slowly, which R-hat reports.
n_chains, n_kept = model.n_chains, model.n_draws_
# The noise precision is stored for the internally standardised targets: its
# inverse square root times the sd of y is the noise sd.
noise_sd = np.std(y) / np.sqrt(model.noise_precision_draws_[:, 0])
at = model.predict_draws(np.array([[0.25], [-2.0]]))
traces = {
    "noise sd": noise_sd.reshape(n_chains, n_kept),
    "f(0.25) (gap)": at[:, 0].reshape(n_chains, n_kept),
    "f(-2) (data)": at[:, 1].reshape(n_chains, n_kept),
}
fig, axes = plt.subplots(len(traces), 1, figsize=(8, 6), sharex=True)
for ax, (name, trace) in zip(axes, traces.items()):
    for c in range(n_chains):
        ax.plot(trace[c], lw=0.7)
    rhat = split_rhat(trace)  # (n_chains, n_draws): one quantity
    ax.set_ylabel(name)
    ax.set_title(f"split R-hat {rhat:.3f}", fontsize=9, loc="right")
axes[-1].set_xlabel("iteration after warm-up")
fig.tight_layout()

# %%
# Leave-one-out predictions and Pareto k-hat per point
# ----------------------------------------------------
# PSIS re-weights the draws to mimic a fit without each point.  The outlier
# pulls the full-data fit towards itself, so it gets the largest k-hat; below
# 0.7 the leave-one-out estimate is reliable.
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
order = np.argsort(X[:, 0])
ax1.scatter(X[:, 0], y, s=12, color="k", label="data")
ax1.plot(X[order, 0], model.predict(X)[order], color="C0", label="full-data mean")
ax1.plot(X[order, 0], model.loo_prediction_[order], "C3.", ms=5, label="LOO prediction")
ax1.set_xlabel("x")
ax1.set_title("leave-one-out predictions (PSIS)")
ax1.legend(fontsize=8)
ax2.scatter(X[:, 0], model.pareto_k_, s=14)
ax2.axhline(0.7, color="C3", ls="--", lw=1, label="k = 0.7")
ax2.axhline(0.5, color="C1", ls=":", lw=1, label="k = 0.5")
ax2.set_xlabel("x")
ax2.set_ylabel("Pareto k-hat")
ax2.set_title("PSIS k-hat per training point")
ax2.legend(fontsize=8)
fig.tight_layout()
plt.show()

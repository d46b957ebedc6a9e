"""
==============================================================
Learning curve of the TAP mean-field perceptron (noisy labels)
==============================================================

Opper and Winther (1996) showed that the TAP mean-field equations give the
Bayes-optimal perceptron for a "teacher-student" problem and, from the cavity
fields of the same fit, a leave-one-out (LOO) estimate of the generalisation
error at no extra cost.  This example reproduces the spirit of the paper's
Figure 1: a teacher perceptron with ``N = 50`` weights labels Gaussian inputs,
5% of the labels are flipped, and we plot the test error, the training error
and the built-in LOO estimate of :class:`TAPPerceptronClassifier` against the
number of examples per weight ``alpha = m / N``, with scikit-learn's
:class:`~sklearn.linear_model.LogisticRegression` for comparison.
"""

# %%
# One data set, one fit
# ---------------------
# A module-level function so that :class:`joblib.Parallel` can send it to
# worker processes.  Test labels carry the same 5% label noise as the training
# labels, so no classifier can go below an error of 0.05.
import warnings

import matplotlib.pyplot as plt
import numpy as np
from joblib import Parallel, delayed
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

from sklearn_meanfield.tap.perceptron import TAPPerceptronClassifier

N_FEATURES = 50
LABEL_NOISE = 0.05
ALPHAS = [0.5, 1, 2, 3, 4, 6, 8, 12]
N_DATASETS = 12
N_TEST = 2000


def noisy_teacher_labels(X, teacher, rng):
    y = np.where(X @ teacher >= 0, 1, -1)
    flip = rng.uniform(size=len(y)) < LABEL_NOISE
    return np.where(flip, -y, y)


def learning_curve_point(alpha, seed):
    """Errors of one fit on one teacher-student data set."""
    rng = np.random.RandomState(seed)
    teacher = rng.normal(size=N_FEATURES)
    m = int(round(alpha * N_FEATURES))
    X = rng.normal(size=(m, N_FEATURES))
    y = noisy_teacher_labels(X, teacher, rng)
    X_test = rng.normal(size=(N_TEST, N_FEATURES))
    y_test = noisy_teacher_labels(X_test, teacher, rng)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        tap = TAPPerceptronClassifier(
            label_noise=LABEL_NOISE, fit_intercept=False, random_state=seed, n_jobs=1
        ).fit(X, y)
    logreg = LogisticRegression(max_iter=1000, fit_intercept=False).fit(X, y)
    return {
        "test": np.mean(tap.predict(X_test) != y_test),
        "train": np.mean(tap.predict(X) != y),
        "loo": tap.loo_error_,
        "logreg": np.mean(logreg.predict(X_test) != y_test),
    }


# %%
# Many data sets per alpha, in parallel
# -------------------------------------
# Each point on the curves is an average over ``N_DATASETS`` independent
# teachers and data sets; the error bars are standard errors of that mean.
jobs = [
    (alpha, 1000 * i + k) for i, alpha in enumerate(ALPHAS) for k in range(N_DATASETS)
]
results = Parallel(n_jobs=2)(
    delayed(learning_curve_point)(alpha, seed) for alpha, seed in jobs
)

keys = ["test", "train", "loo", "logreg"]
values = {
    key: np.array([r[key] for r in results]).reshape(len(ALPHAS), -1) for key in keys
}
mean = {key: v.mean(axis=1) for key, v in values.items()}
sem = {key: v.std(axis=1, ddof=1) / np.sqrt(N_DATASETS) for key, v in values.items()}

print(f"{'alpha':>6} {'test':>7} {'train':>7} {'LOO':>7} {'LogReg':>7}")
for i, alpha in enumerate(ALPHAS):
    print(
        f"{alpha:>6g} {mean['test'][i]:>7.3f} {mean['train'][i]:>7.3f} "
        f"{mean['loo'][i]:>7.3f} {mean['logreg'][i]:>7.3f}"
    )

# %%
# The learning curve
# ------------------
# The LOO estimate, read off the fit itself, tracks the test error of the TAP
# perceptron to within the spread over data sets, while the training error
# stays near or below the label-noise level and says little about
# generalisation at small alpha.  The test error falls towards the floor of
# 0.05 as alpha grows, and the Bayes prediction is at or below the test error
# of logistic regression with its default regularisation at every alpha.
labels = {
    "test": "TAP test error",
    "train": "TAP training error",
    "loo": "TAP leave-one-out estimate",
    "logreg": "LogisticRegression test error",
}
styles = {"test": "o-", "train": "s--", "loo": "^-", "logreg": "d:"}
fig, ax = plt.subplots(figsize=(7, 4.5))
for key in keys:
    ax.errorbar(
        ALPHAS, mean[key], yerr=sem[key], fmt=styles[key], capsize=3, label=labels[key]
    )
ax.axhline(LABEL_NOISE, color="grey", lw=0.8, ls="--", label="label noise (floor)")
ax.set_xlabel(r"examples per weight $\alpha = m / N$")
ax.set_ylabel("error")
ax.set_title(
    f"Teacher-student perceptron, N = {N_FEATURES}, {LABEL_NOISE:.0%} label noise, "
    f"{N_DATASETS} data sets per point"
)
ax.legend()
fig.tight_layout()
plt.show()

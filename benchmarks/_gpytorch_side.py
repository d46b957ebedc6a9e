"""GPyTorch's variational sparse GP classifier, trained against a wall-clock cap.

The other side of ``bench_tap_gpc_sparse.py --vs-gpytorch``:
:func:`gpytorch_trajectory` trains GPyTorch's stochastic variational GP
(Hensman, Matthews & Ghahramani 2015) on the same data and from the same
inducing inputs as the sparse TAP fit, and records its held-out log-loss and
error along the way.  torch and gpytorch are imported only when it runs
(``pip install "sklearn-meanfield[benchmark]"``).
"""

import math
import time
from dataclasses import dataclass, field

import numpy as np

INSTALL_HINT = (
    "The GPyTorch comparison needs torch and gpytorch: "
    'pip install "sklearn-meanfield[benchmark]" (or pip install gpytorch).'
)
# A held-out log-loss must fall this far below its best so far to count as
# progress (0.0001 nats: well below the differences the comparison reports).
MIN_IMPROVEMENT = 1e-4


def import_gpytorch():
    """``(torch, gpytorch)``, or an ImportError that says what to install."""
    try:
        import gpytorch
        import torch
    except ImportError as error:
        raise ImportError(INSTALL_HINT) from error
    return torch, gpytorch


@dataclass
class Trajectory:
    """Held-out scores of a GPyTorch run at its evaluations.

    ``seconds`` is the training wall time at each evaluation (evaluations
    excluded), ``steps`` the Adam steps taken; ``log_loss`` and ``error`` are
    on the held-out set.  ``stop`` says why training ended and ``kernel``
    gives the learned kernel in scikit-learn's notation.
    """

    seconds: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    log_loss: list = field(default_factory=list)
    error: list = field(default_factory=list)
    stop: str = ""
    kernel: str = ""
    steps_per_epoch: int = 1
    batch_size: int = 1024
    lr: float = 0.01

    def best(self):
        """Index of the lowest held-out log-loss (its first evaluation)."""
        return int(np.argmin(self.log_loss))

    def first_reaching(self, log_loss):
        """Index of the first evaluation at or below ``log_loss``, or None."""
        hits = np.flatnonzero(np.asarray(self.log_loss) <= log_loss)
        return int(hits[0]) if len(hits) else None


def _variational_gp(gpytorch, Z0):
    """An SVGP with the model of the sparse TAP classifier: zero mean, an
    isotropic RBF kernel times an amplitude, both starting at 1 as
    ``ConstantKernel(1.0) * RBF(1.0)``, probit likelihood."""

    class VariationalGP(gpytorch.models.ApproximateGP):
        def __init__(self, inducing_points):
            distribution = gpytorch.variational.CholeskyVariationalDistribution(
                len(inducing_points)
            )
            strategy = gpytorch.variational.VariationalStrategy(
                self, inducing_points, distribution, learn_inducing_locations=True
            )
            super().__init__(strategy)
            self.mean_module = gpytorch.means.ZeroMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.RBFKernel()
            )

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(
                self.mean_module(x), self.covar_module(x)
            )

    model = VariationalGP(Z0)
    model.covar_module.outputscale = 1.0
    model.covar_module.base_kernel.lengthscale = 1.0
    return model


def _held_out(torch, model, likelihood, X_test, positive):
    """Held-out log-loss and error of the predictive probabilities."""
    model.eval()
    likelihood.eval()
    with torch.no_grad():
        # Probit: the Bernoulli marginal is Phi(mean / sqrt(1 + var)), exact.
        p = likelihood(model(X_test)).mean.numpy()
    model.train()
    likelihood.train()
    p = np.clip(np.where(positive, p, 1.0 - p), 1e-15, 1.0)
    return float(-np.mean(np.log(p))), float(np.mean(p < 0.5))


def gpytorch_trajectory(
    X,
    y,
    X_test,
    y_test,
    Z0,
    budget,
    batch_size=1024,
    lr=0.01,
    eval_every=None,
    patience=50,
    seed=0,
    n_threads=1,
):
    """Train GPyTorch's variational sparse GP classifier; score it as it goes.

    The model is the sparse TAP classifier's: a zero-mean GP (``ZeroMean``;
    a ``ConstantMean`` would add a bias that the TAP model does not have),
    ``ScaleKernel(RBFKernel())`` starting from amplitude 1 and length scale 1
    (as ``ConstantKernel(1.0) * RBF(1.0)``), the probit likelihood
    (``BernoulliLikelihood``), and ``m`` inducing inputs starting at ``Z0``.
    The approximation differs: a Gaussian ``q(u)`` with a full Cholesky
    factor (``CholeskyVariationalDistribution``, whitened
    ``VariationalStrategy`` with ``learn_inducing_locations=True``), fitted
    with the kernel and the inducing inputs by Adam on the minibatch
    ``VariationalELBO``.  Double precision, ``n_threads`` torch threads.

    Every ``eval_every`` steps (and before the first) the held-out log-loss
    and error are recorded with the training wall time so far; evaluations
    are not timed.  Training stops when that time exceeds ``budget`` seconds,
    or when the held-out log-loss has not fallen :data:`MIN_IMPROVEMENT`
    below its best for ``patience`` evaluations in a row.  The best point is
    chosen on the held-out set itself, which favours this side.

    Parameters
    ----------
    X, X_test : ndarray of shape (n, d) and (n_test, d)
    y, y_test : ndarray
        Labels; positive values are the positive class (``{-1, 1}`` or
        ``{0, 1}``).
    Z0 : ndarray of shape (m, d)
        Starting inducing inputs.
    budget : float
        Cap on the training wall time, in seconds.
    batch_size : int, default=1024
    lr : float, default=0.01
        Adam's learning rate, for all parameters.
    eval_every : int or None, default=None
        Steps between evaluations; None: one epoch, at least 50 steps.
    patience : int, default=50
        Evaluations without progress before training stops.
    seed : int, default=0
        Seeds torch (the variational mean's start, the minibatch order).
    n_threads : int, default=1
        torch's intra-op threads (``torch.set_num_threads``).

    Returns
    -------
    Trajectory
    """
    torch, gpytorch = import_gpytorch()
    torch.set_num_threads(n_threads)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    dtype = torch.float64

    X = torch.as_tensor(np.asarray(X, dtype=float), dtype=dtype)
    targets = torch.as_tensor(np.asarray(y) > 0, dtype=dtype)
    X_test = torch.as_tensor(np.asarray(X_test, dtype=float), dtype=dtype)
    positive = np.asarray(y_test) > 0
    Z0 = torch.as_tensor(np.array(Z0, dtype=float), dtype=dtype)
    n = len(X)

    model = _variational_gp(gpytorch, Z0).to(dtype)
    likelihood = gpytorch.likelihoods.BernoulliLikelihood().to(dtype)
    objective = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=n)
    optimizer = torch.optim.Adam(
        list(model.parameters()) + list(likelihood.parameters()), lr=lr
    )
    model.train()
    likelihood.train()

    steps_per_epoch = math.ceil(n / batch_size)
    if eval_every is None:
        eval_every = max(steps_per_epoch, 50)
    result = Trajectory(steps_per_epoch=steps_per_epoch, batch_size=batch_size, lr=lr)

    def record(seconds, steps):
        log_loss, error = _held_out(torch, model, likelihood, X_test, positive)
        result.seconds.append(seconds)
        result.steps.append(steps)
        result.log_loss.append(log_loss)
        result.error.append(error)
        return log_loss

    seconds, steps = 0.0, 0
    best = record(seconds, steps)
    stale = 0
    order = torch.randperm(n, generator=generator)
    position = 0
    while True:
        start = time.perf_counter()
        for _ in range(eval_every):
            if position >= n:
                order = torch.randperm(n, generator=generator)
                position = 0
            rows = order[position : position + batch_size]
            position += batch_size
            optimizer.zero_grad()
            loss = -objective(model(X[rows]), targets[rows])
            loss.backward()
            optimizer.step()
            steps += 1
            if seconds + time.perf_counter() - start >= budget:
                break
        seconds += time.perf_counter() - start
        log_loss = record(seconds, steps)
        stale = 0 if log_loss < best - MIN_IMPROVEMENT else stale + 1
        best = min(best, log_loss)
        if seconds >= budget:
            result.stop = f"budget of {budget:g} s reached"
            break
        if stale >= patience:
            result.stop = f"log-loss flat for {patience} evaluations"
            break
    amplitude = math.sqrt(model.covar_module.outputscale.item())
    length_scale = model.covar_module.base_kernel.lengthscale.item()
    result.kernel = f"{amplitude:.3g}**2 * RBF(length_scale={length_scale:.3g})"

    return result

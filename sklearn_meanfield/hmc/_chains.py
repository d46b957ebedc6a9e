"""A batch of HMC chains on the network posterior, with Gibbs hyperparameter steps.

:func:`run_chains` is the unit of parallel work: a pure module-level function
that advances several chains together as one array (the Python overhead of a
leapfrog step is then shared) and returns their draws.  Every chain owns its
random generator, seeded up front, so a chain's draws do not depend on which
other chains share its batch, hence not on ``n_jobs``.
"""

import numpy as np

from .._progress import CallbackTask, ProgressReporter
from ._network import (
    augment,
    forward,
    gibbs_precisions,
    log_posterior_and_grad,
    prior_precision_vector,
    step_scales,
)
from ._rescaling import rescale_groups, rescale_units
from ._sampler import DualAveraging, hmc_step

__all__ = ["ChainRandom", "iteration_blocks", "run_chains"]

# Draws a chain keeps at least when a callback stops it early: split R-hat
# needs two halves of two draws.
MIN_DRAWS = 4


def iteration_blocks(n_warmup, n_samples):
    """How the iterations of a chain are grouped for progress reports.

    Parameters
    ----------
    n_warmup, n_samples : int

    Returns
    -------
    block_size : int
        Iterations per block (a tenth of the total, at least one); a progress
        line is printed after each full block.
    n_blocks : int
        Blocks, the last one possibly shorter: the callback steps of a chain.

    Examples
    --------
    >>> from sklearn_meanfield.hmc._chains import iteration_blocks
    >>> iteration_blocks(20, 25)
    (4, 12)
    """
    total = n_warmup + n_samples
    block_size = max(total // 10, 1)
    return block_size, -(-total // block_size)


class ChainRandom:
    """Per-chain random generators behind the interface the sampler uses.

    Row ``c`` of every array drawn comes from the generator of chain ``c``.

    Parameters
    ----------
    seeds : sequence of int

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._chains import ChainRandom
    >>> # Row c comes from chain c's generator, whatever the batch holds.
    >>> both = ChainRandom([1, 2]).standard_normal((2, 3))
    >>> alone = ChainRandom([2]).standard_normal((1, 3))
    >>> bool(np.array_equal(both[1], alone[0]))
    True
    """

    def __init__(self, seeds):
        self.generators = [np.random.default_rng(int(s)) for s in seeds]

    def standard_normal(self, size):
        return np.stack([g.standard_normal(size[1:]) for g in self.generators])

    def uniform(self, low=0.0, high=1.0, size=None):
        size = (len(self.generators),) if size is None else np.atleast_1d(size)
        size = tuple(int(n) for n in size)
        return np.stack([g.uniform(low, high, size[1:]) for g in self.generators])

    def gamma(self, shape, size):
        shape = np.broadcast_to(shape, size)
        return np.stack(
            [g.gamma(shape[c], size=size[1:]) for c, g in enumerate(self.generators)]
        )


def run_chains(
    X,
    Y,
    layout,
    prior,
    seeds,
    *,
    n_samples,
    n_warmup,
    n_leapfrog,
    step_size,
    persistence,
    target_accept,
    chain_ids=None,
    verbose=0,
    tasks=None,
    sample_weight=None,
):
    """Run a batch of chains: warm-up with adaptation, then sampling.

    Warm-up follows Neal's practice: the hyperparameters stay at their prior
    means (the noise at a low level) for the first fifth of it while the
    weights find the data, then Gibbs steps for the precisions alternate with
    HMC trajectories for the weights.  Each Gibbs step is followed by a joint
    rescaling move of every weight group and its precision
    (:func:`~sklearn_meanfield.hmc._rescaling.rescale_groups`): Gibbs alone moves
    the log precision of a group in steps of about ``sqrt(2 / group size)``,
    a slow random walk whenever the prior rather than the data holds the
    group; the rescaling, whose proposal sd per group is adapted during
    warm-up and then frozen, moves it in one step.  A global step-size
    multiplier per chain is adapted by dual averaging during warm-up and frozen
    afterwards; the per-weight step sizes follow the hyperparameters
    (``step_scales``).

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    Y : ndarray of shape (n_samples, n_outputs)
        Standardised training data.
    layout : NetworkLayout
    prior : HyperPrior
    seeds : sequence of int
        One seed per chain.
    n_samples, n_warmup, n_leapfrog : int
    step_size : float
        Initial step-size multiplier.
    persistence : float in [0, 1)
    target_accept : float
    chain_ids : sequence of int or None
        Used in progress messages.
    verbose : int
    tasks : sequence of CallbackTask or None, default=None
        scikit-learn callback task of each chain
        (:class:`~sklearn_meanfield._progress.CallbackTask`): its hooks run
        around the chain, and every block of iterations
        (:func:`iteration_blocks`) is one of its steps.  When a step's
        callback asks to stop, the batch stops at the end of the first block
        of the sampling phase that leaves every chain ``MIN_DRAWS`` draws or
        more; the draws kept so far are returned.  A request during warm-up
        ends the batch at once: the last ``MIN_DRAWS`` warm-up states become
        the draws (the warm-up continues only until it has made that many),
        and ``stopped_in_warmup`` says so.
    sample_weight : ndarray of shape (n_samples,) or None, default=None
        Weight of every row's log likelihood (an integer weight counts the row
        that many times): in the potential energy and its gradient, the Gibbs
        step of the noise precisions, the rescaling moves and the step sizes.

    Returns
    -------
    result : dict
        ``theta`` (n_kept, n_chains, n_params), ``noise_precision``
        (n_kept, n_chains, n_outputs), ``group_precision`` (n_kept,
        n_chains, n_groups), ``train_outputs`` (n_kept, n_chains, n_train,
        n_outputs), ``accepted`` and ``divergent`` (n_kept, n_chains, bool,
        per draw), ``accept_rate``, ``step_size``, ``n_divergent``
        (n_chains,), acceptance and divergences counted after warm-up.
        ``n_kept`` is ``n_samples`` unless a callback stopped the chains;
        ``stopped_in_warmup`` (bool) when it stopped them during warm-up.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.hmc._chains import run_chains
    >>> from sklearn_meanfield.hmc._network import HyperPrior, NetworkLayout
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(30, 1))
    >>> Y = np.tanh(X) + 0.1 * rng.normal(size=(30, 1))
    >>> out = run_chains((X - X.mean()) / X.std(), (Y - Y.mean()) / Y.std(),
    ...     NetworkLayout(1, 3, 1), HyperPrior(), seeds=[0, 1], n_samples=40,
    ...     n_warmup=40, n_leapfrog=10, step_size=0.2, persistence=0.0,
    ...     target_accept=0.8)
    >>> out["theta"].shape, out["train_outputs"].shape
    ((40, 2, 10), (40, 2, 30, 1))
    >>> bool(np.all(out["accept_rate"] > 0.5))
    True
    """
    rng = ChainRandom(seeds)
    n_chains = len(seeds)
    tasks = [CallbackTask() for _ in range(n_chains)] if tasks is None else tasks
    for task in tasks:
        task.begin()
    chain_ids = (
        list(range(n_chains)) if chain_ids is None else [int(i) for i in chain_ids]
    )
    reporter = ProgressReporter(verbose, f"HMCNetworkRegressor chains {chain_ids}")
    n_train = X.shape[0]
    if sample_weight is None:
        # Summed squares of what feeds each weight, for the step sizes.
        X_sq_sum, n_weighted = np.sum(X**2, axis=0), n_train
    else:
        X_sq_sum, n_weighted = sample_weight @ X**2, float(np.sum(sample_weight))
    X_aug_t = augment(X)

    group_precision = np.tile(prior.group_means(layout), (n_chains, 1))
    # Start with little noise so the weights are pulled towards the data first.
    noise_precision = np.full((n_chains, layout.n_outputs), 100.0)
    theta = rng.standard_normal((n_chains, layout.n_params)) / np.sqrt(
        prior_precision_vector(group_precision, layout)
    )

    def make_target(noise, groups):
        precision = prior_precision_vector(groups, layout)

        def target(q):
            return log_posterior_and_grad(
                q,
                X,
                Y,
                noise,
                precision,
                layout,
                X_augmented_T=X_aug_t,
                sample_weight=sample_weight,
            )

        return target

    target = make_target(noise_precision, group_precision)
    scales = step_scales(group_precision, noise_precision, X_sq_sum, n_weighted, layout)
    log_prob, grad = target(theta)
    log_eta = np.full(n_chains, np.log(step_size))
    adapter = DualAveraging(log_eta, target=target_accept)
    n_fixed = n_warmup // 5
    momentum = None
    # Log proposal sd of the group rescaling moves, adapted towards an
    # acceptance of 0.44 (the optimum of a one-dimensional random-walk
    # Metropolis) while the hyperparameters move during warm-up, then frozen.
    log_rescale_sd = np.full((n_chains, layout.n_groups), np.log(0.5))
    log_unit_sd = np.full((n_chains, layout.n_hidden), np.log(0.3))

    P, m, G = layout.n_params, layout.n_outputs, layout.n_groups
    out = {
        "theta": np.empty((n_samples, n_chains, P)),
        "noise_precision": np.empty((n_samples, n_chains, m)),
        "group_precision": np.empty((n_samples, n_chains, G)),
        "train_outputs": np.empty((n_samples, n_chains, n_train, m)),
        "accepted": np.zeros((n_samples, n_chains), dtype=bool),
        "divergent": np.zeros((n_samples, n_chains), dtype=bool),
    }
    accepted = np.zeros(n_chains)
    recent = np.zeros(n_chains)
    n_divergent = np.zeros(n_chains, dtype=int)
    total = n_warmup + n_samples
    report_every, _ = iteration_blocks(n_warmup, n_samples)
    n_kept = n_samples
    stop = stopped_in_warmup = False
    # The last MIN_DRAWS warm-up states, the draws of a chain stopped during
    # warm-up; row ``iteration % MIN_DRAWS`` holds that iteration's state.
    recent_states = {
        "theta": np.empty((MIN_DRAWS, n_chains, P)),
        "noise_precision": np.empty((MIN_DRAWS, n_chains, m)),
        "group_precision": np.empty((MIN_DRAWS, n_chains, G)),
        "accepted": np.zeros((MIN_DRAWS, n_chains), dtype=bool),
        "divergent": np.zeros((MIN_DRAWS, n_chains), dtype=bool),
    }
    for iteration in range(total):
        if iteration >= n_fixed:
            outputs = forward(theta, X, layout).outputs
            group_precision, noise_precision = gibbs_precisions(
                theta, Y - outputs, layout, prior, rng, sample_weight
            )
            theta, group_precision, rescale_accept = rescale_groups(
                theta,
                group_precision,
                noise_precision,
                X_aug_t,
                Y,
                layout,
                prior,
                np.exp(log_rescale_sd),
                rng,
                sample_weight,
            )
            theta, unit_accept = rescale_units(
                theta,
                prior_precision_vector(group_precision, layout),
                noise_precision,
                X_aug_t,
                Y,
                layout,
                np.exp(log_unit_sd),
                rng,
                sample_weight,
            )
            if iteration < n_warmup:
                rate = (iteration - n_fixed + 1) ** -0.6
                log_rescale_sd += rate * (rescale_accept - 0.44)
                log_unit_sd += rate * (unit_accept - 0.44)
            target = make_target(noise_precision, group_precision)
            scales = step_scales(
                group_precision, noise_precision, X_sq_sum, n_weighted, layout
            )
            log_prob, grad = target(theta)
        jitter = rng.uniform(0.9, 1.1, size=(n_chains, 1))
        eps = np.exp(log_eta)[:, None] * jitter * scales
        step = hmc_step(
            theta,
            log_prob,
            grad,
            target,
            eps,
            n_leapfrog,
            rng,
            momentum=momentum,
            persistence=persistence,
        )
        theta, log_prob, grad, momentum = (
            step.q,
            step.log_prob,
            step.grad,
            step.momentum,
        )
        recent += step.accept_prob
        if iteration < n_warmup:
            log_eta = adapter.update(step.accept_prob)
            if iteration == n_warmup - 1:
                log_eta = adapter.final()
            row = iteration % MIN_DRAWS
            recent_states["theta"][row] = theta
            recent_states["noise_precision"][row] = noise_precision
            recent_states["group_precision"][row] = group_precision
            recent_states["accepted"][row] = step.accepted
            recent_states["divergent"][row] = step.divergent
            if stop and iteration + 1 >= MIN_DRAWS:
                # A stop asked for during warm-up (and enough states made).
                stopped_in_warmup = True
                break
        else:
            s = iteration - n_warmup
            out["theta"][s] = theta
            out["noise_precision"][s] = noise_precision
            out["group_precision"][s] = group_precision
            out["train_outputs"][s] = forward(theta, X, layout).outputs
            out["accepted"][s] = step.accepted
            out["divergent"][s] = step.divergent
            accepted += step.accepted
            n_divergent += step.divergent
        if (iteration + 1) % report_every == 0:
            reporter(
                1,
                "iteration %d/%d (%s), mean acceptance %s, noise sd %s",
                iteration + 1,
                total,
                "warm-up" if iteration < n_warmup else "sampling",
                np.array2string(recent / report_every, precision=2),
                np.array2string(
                    1.0 / np.sqrt(noise_precision.mean(axis=1)), precision=3
                ),
            )
            recent[:] = 0.0
        if (iteration + 1) % report_every == 0 or iteration + 1 == total:
            # Every chain's step runs (no short-circuit), whichever asks.
            stop |= any([task.step("iterations") for task in tasks])
            n_drawn = iteration + 1 - n_warmup
            if stop and MIN_DRAWS <= n_drawn < n_samples:
                n_kept = n_drawn
                break
            if stop and iteration < n_warmup and iteration + 1 >= MIN_DRAWS:
                stopped_in_warmup = True
                break
    for task in tasks:
        task.end()
    if stopped_in_warmup:
        # The last MIN_DRAWS warm-up states, oldest first, are the draws.
        order = (np.arange(iteration + 1 - MIN_DRAWS, iteration + 1)) % MIN_DRAWS
        n_kept = MIN_DRAWS
        for key, value in recent_states.items():
            out[key] = value[order]
        out["train_outputs"] = np.stack(
            [forward(t, X, layout).outputs for t in out["theta"]]
        )
        accepted = out["accepted"].sum(axis=0).astype(float)
        n_divergent = out["divergent"].sum(axis=0)
    for key in ("theta", "noise_precision", "group_precision", "train_outputs"):
        out[key] = out[key][:n_kept]
    out["accepted"] = out["accepted"][:n_kept]
    out["divergent"] = out["divergent"][:n_kept]
    out["accept_rate"] = accepted / max(n_kept, 1)
    out["step_size"] = np.exp(log_eta)
    out["n_divergent"] = n_divergent
    out["stopped_in_warmup"] = stopped_in_warmup
    return out

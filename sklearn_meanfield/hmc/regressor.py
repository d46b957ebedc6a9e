"""HMCNetworkRegressor: a Bayesian one-hidden-layer network sampled by HMC."""

import warnings
from dataclasses import replace
from numbers import Integral, Real
from typing import NamedTuple

import joblib
import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import (
    Interval,
    StrOptions,
    validate_parameter_constraints,
)
from sklearn.utils.validation import check_is_fitted, validate_data

from .._base import StandardizedRegressorMixin, atomic_fit
from .._loo import log_sum_exp, psis_smooth
from .._memory import check_memory
from .._parallel import N_JOBS_CONSTRAINT, draw_seeds
from .._progress import CallbackSupportMixin, fit_progress
from ._chains import (
    ANNEAL_AUTO_ROWS,
    MIN_DRAWS,
    ChainSettings,
    join_draws,
    sample_chains,
)
from ._diagnostics import effective_sample_size, rhat_and_bulk_ess
from ._network import HyperPrior, NetworkLayout, network_outputs
from ._transition import NetworkPosterior

__all__ = ["HMCNetworkRegressor"]

# Parameters a warm-started fit may change: the draws do not depend on them
# (random_state only seeds chains that start anew).
_CONTINUABLE_PARAMS = (
    "n_samples",
    "max_samples",
    "n_jobs",
    "verbose",
    "random_state",
    "warm_start",
)


def _same_value(a, b):
    """Whether two parameter values are equal (numbers by value, else by
    identity or ``==``)."""
    try:
        return bool(a is b or a == b)
    except (TypeError, ValueError):
        return False


# Test rows are pushed through all posterior draws in blocks of at most this
# many rows, fewer when a block's network activations (about n_draws * rows *
# (2 hidden + 3 outputs) floats) would exceed _PREDICT_BLOCK_BYTES: predict and
# sample_y then work in bounded memory for any number of rows and draws.
_PREDICT_BLOCK = 64

_PREDICT_BLOCK_BYTES = 64 * 2**20

# Chains whose largest split R-hat exceeds this warn of poor mixing.
CONVERGED_RHAT = 1.05

# Chains above CONVERGED_RHAT but at most this continue (max_samples), on
# more than SMALL_DATA_ROWS rows.  Chains further apart need far more draws
# than max_samples="auto" allows: they stop at once, and the warning suggests
# another remedy.
CONTINUE_MAX_RHAT = 1.3

# max_samples="auto": at most this many times n_samples draws per chain.
AUTO_MAX_SAMPLES_FACTOR = 4

# On at most this many rows (the sum of sample_weight) a draw is cheap, and
# chains are continued from further apart and for longer: from R-hat up to
# SMALL_DATA_CONTINUE_MAX_RHAT, and with max_samples="auto" to
# SMALL_DATA_MAX_SAMPLES_FACTOR times n_samples (on 200 rows, 8000 draws per
# chain take about 100 s on two cores).
SMALL_DATA_ROWS = 500
SMALL_DATA_CONTINUE_MAX_RHAT = 1.4
SMALL_DATA_MAX_SAMPLES_FACTOR = 8


def _row_block(n_draws, layout):
    """Rows per block of the predictions: at most ``_PREDICT_BLOCK``, and
    about ``_PREDICT_BLOCK_BYTES`` of activations at most (one row at least).

    Examples
    --------
    >>> from sklearn_meanfield.hmc._network import NetworkLayout
    >>> from sklearn_meanfield.hmc.regressor import _row_block
    >>> _row_block(4000, NetworkLayout(10, 10, 1))
    64
    >>> _row_block(400_000, NetworkLayout(10, 10, 1))
    1
    """
    per_row = 8.0 * n_draws * (2 * layout.n_hidden + 3 * layout.n_outputs)
    return int(max(1, min(_PREDICT_BLOCK, _PREDICT_BLOCK_BYTES // per_row)))


def sampling_memory_bytes(n_samples, n_chains, n_train, n_params, n_outputs, n_groups):
    """Peak bytes a fit holds: the draws, then the leave-one-out arrays beside them.

    The chains store, per draw and chain, the parameters, the precisions and
    the network outputs at the training points; the leave-one-out step then
    holds about three more arrays of draws x training points x outputs (the
    residuals, the log likelihoods and the importance weights) while the draws
    are still held, plus the concatenated copies of the draws.

    Examples
    --------
    >>> from sklearn_meanfield.hmc.regressor import sampling_memory_bytes
    >>> # 5e6 draws per chain, 4 chains, 100 points, 1 input, 10 hidden units:
    >>> # the network outputs alone are 14.9 GiB.
    >>> round(sampling_memory_bytes(5_000_000, 4, 100, 31, 1, 4) / 2**30)
    85
    """
    per_draw = n_params + n_outputs + n_groups + n_train * n_outputs
    draws = 8.0 * n_samples * n_chains * (per_draw + 0.25)
    loo = 8.0 * n_samples * n_chains * n_train * (n_outputs + 2)
    # Chains' arrays, their concatenation, then the LOO arrays.
    return 2.0 * draws + loo


def _check_sampling_memory(n_samples, n_chains, n_train, layout):
    """Refuse a fit whose draws and leave-one-out arrays would not fit."""
    needed = sampling_memory_bytes(
        n_samples,
        n_chains,
        n_train,
        layout.n_params,
        layout.n_outputs,
        layout.n_groups,
    )
    check_memory(
        needed,
        f"HMCNetworkRegressor with n_samples={n_samples} draws x "
        f"{n_chains} chains on {n_train} training points",
        "Use fewer draws per chain (n_samples) or fewer chains: a few "
        "thousand draws in all usually suffice for the predictive mean "
        "and standard deviation.",
    )


def _fits_in_memory(n_samples, n_chains, n_train, layout):
    """Whether :func:`_check_sampling_memory` lets a fit make these draws."""
    try:
        _check_sampling_memory(n_samples, n_chains, n_train, layout)
    except MemoryError:
        return False
    return True


def _chain_after_chain(values):
    """``(n_kept, n_chains, k)`` draws as ``(n_chains * n_kept, k)``, chain by chain."""
    n_kept, n_chains = values.shape[:2]
    return values.transpose(1, 0, 2).reshape(n_chains * n_kept, -1)


def _monitored(draws):
    """What R-hat and ESS watch, (n_chains, n_kept, n_quantities): the
    network outputs at the training points and the log precisions."""
    n_kept, n_chains = draws.train_outputs.shape[:2]
    return np.concatenate(
        [
            draws.train_outputs.reshape(n_kept, n_chains, -1),
            np.log(draws.noise_precision),
            np.log(draws.group_precision),
        ],
        axis=2,
    ).transpose(1, 0, 2)


def _describe_quantity(index, n_samples, n_outputs, layout, feature_names=None):
    """What monitored quantity ``index`` of :func:`_monitored` is, in words.

    The predictions at the training points come first (sample by sample,
    outputs within), then the log noise precisions, then the log weight-group
    precisions, named by what they govern (an input's relevance under ARD,
    with its feature name when the data had them) and by their column of
    ``precision_draws_``.

    Examples
    --------
    >>> from sklearn_meanfield.hmc._network import NetworkLayout
    >>> from sklearn_meanfield.hmc.regressor import _describe_quantity
    >>> layout = NetworkLayout(n_features=2, n_hidden=3, n_outputs=1)
    >>> _describe_quantity(7, 10, 1, layout)
    'the prediction at training sample 7'
    >>> _describe_quantity(11, 10, 1, layout, feature_names=["age", "bmi"])
    "the relevance precision of input 0 ('age'), column 0 of precision_draws_"
    >>> _describe_quantity(15, 10, 1, layout)
    'the precision of the output biases, column 4 of precision_draws_'
    """
    n_predictions = n_samples * n_outputs
    if index < n_predictions:
        sample, output = divmod(index, n_outputs)
        of_output = f" (output {output})" if n_outputs > 1 else ""
        return f"the prediction at training sample {sample}{of_output}"
    if index < n_predictions + n_outputs:
        output = index - n_predictions
        return "the noise precision" + (f" of output {output}" if n_outputs > 1 else "")
    group = index - n_predictions - n_outputs
    name = layout.group_names()[group]
    if name.startswith("W1["):  # one group per input (ARD): group = input
        feature = "" if feature_names is None else f" ({feature_names[group]!r})"
        what = f"the relevance precision of input {group}{feature}"
    else:
        governed = {
            "W1": "input-to-hidden weights",
            "b1": "hidden biases",
            "W2": "hidden-to-output weights",
            "b2": "output biases",
        }[name]
        what = f"the precision of the {governed}"
    return f"{what}, column {group} of precision_draws_"


def _convergence_remedy(draws, settings, rhat, *, large_data, continuation):
    """The one change the R-hat warning suggests, as a sentence.

    The first that applies, in this order: a sampler other than ``"chees"``
    (the adapted trajectories are what make chains of this network meet);
    adapted trajectory lengths within 10% of their bound (``max_leapfrog``);
    chains a continuation would have taken on (R-hat within
    ``continuation.max_rhat``) that ``max_samples`` did not let go on; a
    warm-up that annealed (one twice as long); ``large_data`` warmed up
    without annealing (the annealed warm-up); otherwise more draws of the
    same chains (``warm_start``).

    Parameters
    ----------
    draws : ChainDraws
    settings : ChainSettings
    rhat : float
        The largest split R-hat.
    large_data : bool
        The data are large enough for the annealed warm-up.
    continuation : Continuation or None
        How the fit may continue its chains; None is as ``max_samples=None``
        on more than ``SMALL_DATA_ROWS`` rows.

    Returns
    -------
    remedy : str
    """
    if settings.sampler != "chees":
        return (
            "Use sampler='chees', whose longer adapted trajectories help the "
            "chains meet."
        )
    max_leapfrog = settings.max_leapfrog
    if np.any(draws.trajectory_length >= 0.9 * max_leapfrog * draws.step_size / 2):
        return (
            f"Increase max_leapfrog: the adapted trajectory lengths reached "
            f"its bound ({max_leapfrog} steps)."
        )
    if continuation is None:
        may_continue, max_rhat = False, CONTINUE_MAX_RHAT
    else:
        may_continue = continuation.max_draws > continuation.step
        max_rhat = continuation.max_rhat
    if not may_continue and rhat <= max_rhat:
        return "Set max_samples='auto' to continue the chains until they agree."
    if settings.anneal:
        return (
            f"Set n_warmup={2 * settings.n_warmup}: an annealed warm-up twice "
            "as long cools the chains more slowly."
        )
    if large_data:
        return (
            "Set anneal_warmup=True: on data this large, annealing lets the "
            "chains settle into the same configurations."
        )
    return "Refit with warm_start=True and a larger n_samples to continue these chains."


def _check_convergence(
    draws,
    diagnostics,
    settings,
    *,
    layout,
    large_data=False,
    continuation=None,
    note="",
    feature_names=None,
):
    """Largest split R-hat and smallest bulk ESS; warn about poor mixing.

    ``diagnostics`` is ``rhat_and_bulk_ess(_monitored(draws))``, per
    quantity: the predictions at the training points and the log
    precisions.  Warns (``ConvergenceWarning``) when a callback stopped the
    chains in warm-up, when trajectories diverged after warm-up (naming the
    fit's ``target_accept``), and when R-hat exceeds ``CONVERGED_RHAT``: one
    line that names the worst quantity (:func:`_describe_quantity`, given the
    ``layout`` and the ``feature_names``: users act differently on a
    prediction than on a prior precision that mixes slowly), ``note`` and one
    remedy (:func:`_convergence_remedy`).

    Parameters
    ----------
    draws : ChainDraws
    diagnostics : tuple of ndarray
        Split R-hat and bulk ESS per monitored quantity.
    settings : ChainSettings
        How the chains ran: their sampler, ``max_leapfrog``,
        ``target_accept`` and warm-up (annealed or not).
    layout : NetworkLayout
    large_data : bool, default=False
        The data are large enough for the annealed warm-up
        (``ANNEAL_AUTO_ROWS``, counting ``sample_weight``).
    continuation : Continuation or None, default=None
        How the fit may continue its chains (``max_samples``).
    note : str, default=""
        How far the chains were continued, put before the remedy.
    feature_names : ndarray of str or None, default=None

    Returns
    -------
    rhat, ess : float
    """
    if draws.stopped_in_warmup:
        warnings.warn(
            f"A callback stopped the sampling during warm-up: each chain "
            f"keeps its last {MIN_DRAWS} warm-up states as draws, from "
            "chains that were still adapting. Predictions are usable but "
            "rough; allow more time for a converged fit.",
            ConvergenceWarning,
        )
    outputs = draws.train_outputs
    n_chains = outputs.shape[1]
    rhat_all, ess_all = diagnostics
    rhat, ess = float(np.max(rhat_all)), float(np.min(ess_all))
    if rhat > CONVERGED_RHAT:
        n_samples, n_outputs = outputs.shape[2], outputs.shape[3]
        worst = int(np.argmax(rhat_all))
        what = _describe_quantity(worst, n_samples, n_outputs, layout, feature_names)
        remedy = _convergence_remedy(
            draws,
            settings,
            rhat,
            large_data=large_data,
            continuation=continuation,
        )
        warnings.warn(
            f"The {n_chains} chains disagree: R-hat {rhat:.3f} > "
            f"{CONVERGED_RHAT}, for {what}.{note} {remedy}",
            ConvergenceWarning,
        )
    n_divergent = int(np.sum(draws.n_divergent))
    if n_divergent:
        warnings.warn(
            f"{n_divergent} divergent trajectories after warm-up (energy "
            "error above 1000): the step size is too large for part of the "
            f"posterior. Increase target_accept (it is "
            f"{settings.target_accept:g}).",
            ConvergenceWarning,
        )
    return rhat, ess


class Continuation(NamedTuple):
    """How a fit continues chains that have not converged (``max_samples``)."""

    step: int
    """Draws per chain added at a time (the fit's ``n_samples``)."""
    max_draws: int
    """Most draws per chain in all."""
    memory_check: object
    """``n_draws -> bool``: whether that many draws per chain fit in memory."""
    max_rhat: float
    """Chains whose largest split R-hat is above this are not continued
    (``CONTINUE_MAX_RHAT``, or ``SMALL_DATA_CONTINUE_MAX_RHAT`` on small
    data)."""


def continue_until_mixed(draws, posterior, seeds, settings, continuation, **sampling):
    """Continue chains that disagree, a little, until they agree.

    While the largest split R-hat of the monitored quantities
    (:func:`_monitored`) is above ``CONVERGED_RHAT`` but at most
    ``continuation.max_rhat``, the chains go on from their checkpoint for
    ``continuation.step`` more draws each (at most ``max_draws`` in all, and
    only as many as fit in memory).  Continued chains make the same draws a
    single longer run would have made, so the result is that of a fit with
    the final number of draws, for any ``n_jobs``.  Chains a callback stopped
    are left as they are.

    Parameters
    ----------
    draws : ChainDraws
        The draws so far.
    posterior : NetworkPosterior
    seeds : ndarray of int
    settings : ChainSettings
        The settings the draws were made with.
    continuation : Continuation
    **sampling
        ``n_jobs`` and ``reporter``, passed to
        :func:`~sklearn_meanfield.hmc._chains.sample_chains`.

    Returns
    -------
    draws : ChainDraws
        All the draws, continued or not.
    diagnostics : tuple of ndarray
        Split R-hat and bulk ESS of every monitored quantity of ``draws``
        (:func:`rhat_and_bulk_ess`), computed once per run of the chains:
        the rule reads the one, the convergence check both.
    note : str
        A sentence for the convergence warning on how far the chains were
        continued, and why not further (empty when they were not).
    """
    reporter = sampling.get("reporter")
    n_initial, note = len(draws.theta), ""
    diagnostics = rhat_and_bulk_ess(_monitored(draws))
    while draws.checkpoint is not None:
        n_drawn = len(draws.theta)
        if n_drawn >= continuation.max_draws:
            break
        rhat = float(np.max(diagnostics[0]))
        if not CONVERGED_RHAT < rhat <= continuation.max_rhat:
            break
        n_draws = min(n_drawn + continuation.step, continuation.max_draws)
        if not continuation.memory_check(n_draws):
            note = f" Continuing to {n_draws} draws per chain would not fit in memory."
            break
        if reporter is not None:
            reporter(
                1,
                "R-hat %.3f > %g: continuing the chains to %d draws",
                rhat,
                CONVERGED_RHAT,
                n_draws,
            )
        more = sample_chains(
            posterior,
            seeds,
            replace(settings, n_samples=n_draws),
            resume=draws.checkpoint,
            **sampling,
        )
        draws = join_draws(draws, more)
        diagnostics = rhat_and_bulk_ess(_monitored(draws))
    n_kept = len(draws.theta)
    if n_kept > n_initial:
        note = (
            f" The chains were continued to {n_kept} draws each "
            f"(max_samples allows {continuation.max_draws}).{note}"
        )
    return draws, diagnostics, note


class LeaveOneOut(NamedTuple):
    """PSIS leave-one-out results, in target units."""

    prediction: np.ndarray
    """Leave-one-out predictive means, shaped like ``y``."""
    error: float
    """Mean squared error, averaged over outputs (weighted by sample_weight)."""
    log_density: np.ndarray
    """Log predictive density of each training point, (n_samples,)."""
    pareto_k: np.ndarray
    """PSIS shape estimate per training point, (n_samples,)."""


def _leave_one_out(draws, Ys, y, sample_weight, y_scaler, constant):
    """Pareto-smoothed importance-sampling leave-one-out from the draws.

    Parameters
    ----------
    draws : ChainDraws
    Ys : ndarray of shape (n_samples, n_outputs)
        Standardised targets.
    y : ndarray
        Targets as given (their shape is the prediction's).
    sample_weight : ndarray of shape (n_samples,) or None
    y_scaler : Standardizer
    constant : ndarray of shape (n_outputs,), bool
        Outputs without spread, predicted exactly.

    Returns
    -------
    loo : LeaveOneOut
    """
    outputs, noise_precision = draws.train_outputs, draws.noise_precision
    n_kept, n_chains, n_train, n_outputs = outputs.shape
    n_draws = n_kept * n_chains
    # (draw, point): the log likelihood of all outputs of a point jointly,
    # in standardised units (a constant per point, which PSIS ignores).
    residual = Ys[None, None] - outputs
    loglik = 0.5 * np.sum(
        np.log(noise_precision / (2 * np.pi))[:, :, None, :]
        - noise_precision[:, :, None, :] * residual**2,
        axis=3,
    )
    del residual
    # Leaving a row of weight w out divides the posterior by its
    # likelihood to the power w (all w copies of a repeated row).
    if sample_weight is None:
        row_loglik, weighted = loglik, np.arange(n_train)
    else:
        row_loglik = loglik * sample_weight
        weighted = np.flatnonzero(sample_weight > 0)
    # Rows of zero weight: the posterior is their leave-one-out posterior.
    log_weights = np.full((n_draws, n_train), -np.log(n_draws))
    pareto_k = np.zeros(n_train)
    part = row_loglik[:, :, weighted]
    # Relative efficiency of the likelihood draws sets the PSIS tail length.
    lik = np.exp(part - part.max(axis=(0, 1)))
    ess = effective_sample_size(lik.transpose(1, 0, 2), method="basic")
    r_eff = np.clip(ess / n_draws, 1e-3, 1.0)
    log_weights[:, weighted], pareto_k[weighted] = psis_smooth(
        -part.reshape(n_draws, -1), r_eff=r_eff
    )
    loglik = loglik.reshape(n_draws, n_train)
    log_density = log_sum_exp(log_weights + loglik, axis=0)
    prediction = np.einsum(
        "sn,snm->nm",
        np.exp(log_weights),
        outputs.reshape(n_draws, n_train, n_outputs),
    )
    # A constant output: the leave-one-out posterior is symmetric too.
    prediction[:, constant] = 0.0
    prediction = y_scaler.inverse_mean(prediction)
    row_error = np.mean((y.reshape(n_train, -1) - prediction) ** 2, axis=1)
    n_bad = int(np.sum(pareto_k > 0.7))
    if n_bad > max(0.05 * n_train, 1):
        warnings.warn(
            f"{n_bad} of {n_train} training points have a Pareto k-hat above "
            "0.7: their leave-one-out estimates are unreliable. More draws "
            "(n_samples, n_chains) or a simpler model may help.",
            ConvergenceWarning,
        )
    return LeaveOneOut(
        prediction=prediction.reshape(y.shape),
        error=float(np.average(row_error, weights=sample_weight)),
        log_density=log_density - np.sum(np.log(y_scaler.scale)),
        pareto_k=pareto_k,
    )


class HMCNetworkRegressor(
    CallbackSupportMixin, StandardizedRegressorMixin, RegressorMixin, BaseEstimator
):
    """Bayesian one-hidden-layer tanh network, posterior sampled by Hybrid Monte Carlo.

    The network ``f(x) = tanh(x W1 + b1) W2 + b2`` gets Gaussian priors whose
    precisions are themselves given Gamma priors: one per input for the
    input-to-hidden weights (automatic relevance determination), one each for
    hidden biases, hidden-to-output weights and output biases, and one noise
    precision per output.  The weights are sampled by Hybrid Monte Carlo with
    per-weight step sizes set from the hyperparameters, which are updated by
    Gibbs steps between trajectories (Neal 1993, 1996).  Each Gibbs step is
    followed by a joint rescaling of every weight group and its precision
    (an interweaving of the centred and non-centred parameterisations, which
    mixes the groups the prior rather than the data determines) and by
    redraws of every hidden unit from its prior with its outgoing weights
    integrated out (independence Metropolis-Hastings proposals, which move a
    unit to another role in one step).  Inputs and targets are standardised
    internally.  Predictions average the network over the posterior draws of
    all chains.

    Leave-one-out predictions come from the same draws by Pareto-smoothed
    importance sampling, with no refitting; ``pareto_k_`` says which of them
    are reliable (below about 0.7).  Chains run in parallel with ``n_jobs``,
    several of them advanced together as one array in each worker.

    Parameters
    ----------
    hidden_layer_size : int, default=10
        Number of tanh hidden units.
    n_samples : int, default=1000
        Draws kept per chain after warm-up (at least 4, for split R-hat).
        More draws make the predictive mean and spread and the diagnostics
        more precise, at a cost in time and memory proportional to them; the
        weight-group precisions mix more slowly than the predictions.
    max_samples : int, "auto" or None, default=None
        Most draws kept per chain when chains that disagree are continued.
        None keeps exactly ``n_samples``.  Otherwise chains whose ``rhat_`` is
        above 1.05 but at most 1.3 (1.4 on at most 500 rows, counting
        ``sample_weight``) go on by ``n_samples`` draws at a time until it is
        at most 1.05 or they reach ``max_samples``; ``"auto"`` is 4 times
        ``n_samples`` (8 times on at most 500 rows).  The continued draws are
        those of a fit with a larger ``n_samples``.
    n_warmup : int, default=500
        Warm-up iterations per chain, discarded.  The hyperparameters are held
        at their prior means for the first fifth of them, and the step size
        (and trajectory length) adapt throughout, then are frozen so the
        chain is exact.  A longer annealed warm-up cools more slowly, which
        the convergence warning suggests when annealed chains disagree.
    sampler : {"chees", "hmc"}, default="chees"
        How long the trajectories are.  ``"chees"`` adapts each chain's mean
        trajectory length in warm-up by the ChEES criterion (Hoffman, Radul
        and Sountsov 2021), from its own trajectories only, and jitters every
        trajectory's length.  ``"hmc"`` (Neal's method) runs ``n_leapfrog``
        steps per trajectory: about twice as fast per draw, but its chains
        stay apart on posteriors where the longer adapted trajectories let
        them meet.  See the user guide.
    n_leapfrog : int, default=100
        Leapfrog steps per trajectory with ``sampler="hmc"``; the initial
        mean length with ``"chees"``.
    max_leapfrog : int, default=1000
        Most leapfrog steps of one trajectory with ``sampler="chees"`` (the
        adapted mean length is at most half of it): bounds the cost of a
        draw.  Ignored by ``"hmc"``.
    anneal_warmup : bool or "auto", default="auto"
        Temper the likelihood during warm-up: through the two fifths of
        warm-up after the iterations with fixed precisions, every row's log
        likelihood is raised to a power rising geometrically from ``10 / n``
        to 1; the rest of warm-up and all draws use the posterior itself, so
        the draws stay exact.  The slow cooling lets the chains settle into
        the network configurations the data favour (simulated annealing).
        ``"auto"`` anneals on 2000 rows or more (the sum of
        ``sample_weight``).  It costs no gradient evaluations.
    gradient_dtype : {"float32", "float64"}, default="float32"
        Precision of the gradient that drives the leapfrog steps.
        ``"float32"`` is about twice as fast; the Metropolis test uses the
        log posterior in double precision, so the chain samples the same
        posterior exactly either way (Neal 2011, section 5.5.5).
        ``"float64"`` makes draws agree to rounding between fits of the same
        model in other units (integer weights against repeated rows).
    target_accept : float in (0, 1), default=0.8
        Acceptance probability the step size is adapted to.  Raise it (to
        0.85 or 0.9) when a fit warns of divergent trajectories: a smaller
        step avoids most of them, but the chains then move between the
        network's configurations more slowly.
    ard : bool, default=True
        One prior precision per input (automatic relevance determination);
        otherwise one for all input-to-hidden weights.
    n_chains : int, default=4
        Independent chains, run in parallel with ``n_jobs``.
    n_jobs : int, default=None
        Parallel workers for the chains; None defers to
        :func:`joblib.parallel_config`.
    random_state : int, RandomState instance or None, default=None
        Seeds of the chains, drawn up front: the same value gives the same
        model for any ``n_jobs``.
    verbose : int, default=0
        Progress per batch of chains (iteration, acceptance, noise sd) when
        >= 1.  With scikit-learn >= 1.9, ``set_callbacks`` also follows the
        fit, one subtask per chain; a callback that asks to stop ends the
        sampling early with the draws made so far (at least four per chain;
        during warm-up, the last four warm-up states, with a
        ``ConvergenceWarning``).
    warm_start : bool, default=False
        When True, the next :meth:`fit` on the same data continues the
        chains of the previous fit to ``n_samples`` draws per chain (raise
        ``n_samples`` first), keeping its draws and adapted settings: the
        draws are exactly those of one fit with the larger ``n_samples``.
        Only ``n_samples``, ``max_samples``, ``n_jobs``, ``verbose`` and
        ``random_state`` may change.

    Attributes
    ----------
    loo_error_ : float
        PSIS leave-one-out mean squared error, averaged over outputs (and
        weighted by ``sample_weight`` when given).
    loo_prediction_ : ndarray, shaped like ``y``
        Leave-one-out predictive means.  A row of weight ``w`` is left out
        whole, as leaving out all ``w`` copies of a repeated row would.
    loo_log_density_ : ndarray of shape (n_samples,)
        Leave-one-out log predictive density of each training point (of all
        its outputs jointly).
    pareto_k_ : ndarray of shape (n_samples,)
        PSIS shape estimate per training point; above 0.7 the point's
        leave-one-out estimate is unreliable (``inf`` when too few distinct
        draws fall in the tail; 0 for rows of zero weight).
    acceptance_rate_ : ndarray of shape (n_chains,)
        Fraction of trajectories accepted after warm-up.
    step_size_ : ndarray of shape (n_chains,)
        The adapted step-size multiplier of each chain.
    trajectory_length_ : ndarray of shape (n_chains,)
        Mean trajectory duration of each chain (leapfrog steps times the
        step-size multiplier).
    n_divergent_ : ndarray of shape (n_chains,)
        Divergent trajectories after warm-up.
    rhat_ : float
        Largest rank-normalised split R-hat over the predictions at the
        training points and the log precisions.
    ess_ : float
        Smallest bulk effective sample size over the same quantities.
    n_draws_ : int
        Draws kept per chain (``n_kept``): ``n_samples``, more when chains
        were continued (``max_samples``), fewer when a callback stopped the
        sampling.
    noise_std_ : ndarray of shape (n_outputs,)
        Posterior mean noise standard deviation, per output, in target units.
    parameter_draws_ : ndarray of shape (n_chains * n_kept, n_params)
        Network weights (for standardised data), chain after chain.
        :meth:`chain_draws` gives the draws with a chain axis, and
        :meth:`to_inference_data` as an ArviZ ``InferenceData``.
    noise_precision_draws_ : ndarray of shape (n_chains * n_kept, n_outputs)
        Noise precisions (for standardised targets).
    precision_draws_ : ndarray of shape (n_chains * n_kept, n_groups)
        Weight-group precisions: one per input (or one) for the input weights,
        then hidden biases, hidden-to-output weights, output biases.
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Defined only when ``X`` has string feature names.

    See Also
    --------
    sklearn.neural_network.MLPRegressor : The same network fitted by
        optimisation, without uncertainty.
    sklearn.linear_model.BayesianRidge : Bayesian linear regression.

    References
    ----------
    Neal, R. M. (1993). Bayesian learning via stochastic dynamics. Advances in
    Neural Information Processing Systems 5, 475-482.

    Neal, R. M. (1996). Bayesian Learning for Neural Networks. Lecture Notes in
    Statistics 118, Springer.

    Neal, R. M. (2011). MCMC using Hamiltonian dynamics. In Handbook of
    Markov Chain Monte Carlo, chapter 5, Chapman & Hall/CRC.

    Hoffman, M. D. and Gelman, A. (2014). The No-U-Turn sampler: adaptively
    setting path lengths in Hamiltonian Monte Carlo. Journal of Machine
    Learning Research, 15, 1593-1623.

    Hoffman, M. D., Radul, A. and Sountsov, P. (2021). An adaptive MCMC
    scheme for setting trajectory lengths in Hamiltonian Monte Carlo.
    Proceedings of AISTATS, PMLR 130, 3907-3915.

    Kirkpatrick, S., Gelatt, C. D. and Vecchi, M. P. (1983). Optimization by
    simulated annealing. Science, 220(4598), 671-680.

    Yu, Y. and Meng, X.-L. (2011). To center or not to center: that is not the
    question. Journal of Computational and Graphical Statistics, 20(3),
    531-570.

    Vehtari, A., Gelman, A. and Gabry, J. (2017). Practical Bayesian model
    evaluation using leave-one-out cross-validation and WAIC. Statistics and
    Computing, 27, 1413-1432.

    Vehtari, A., Gelman, A., Simpson, D., Carpenter, B. and Burkner, P.-C.
    (2021). Rank-normalization, folding, and localization: an improved R-hat
    for assessing convergence of MCMC. Bayesian Analysis, 16(2), 667-718.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield import HMCNetworkRegressor
    >>> rng = np.random.RandomState(0)
    >>> X = rng.uniform(-2, 2, size=(60, 1))
    >>> y = np.tanh(2 * X[:, 0]) + rng.normal(0, 0.1, size=60)
    >>> # One tanh unit fits this curve, and its posterior mixes in a few
    >>> # hundred iterations; several units trade their scales slowly and need
    >>> # chains of the default lengths.
    >>> model = HMCNetworkRegressor(hidden_layer_size=1, n_samples=200,
    ...     n_warmup=100, n_leapfrog=10, n_chains=2, random_state=0)
    >>> mean, std = model.fit(X, y).predict(np.array([[0.5]]), return_std=True)
    >>> bool(abs(mean[0] - np.tanh(1.0)) < 0.05), bool(0.05 < std[0] < 0.2)
    (True, True)
    >>> bool(model.rhat_ < 1.05)  # the chains agree: no ConvergenceWarning
    True
    """

    _parameter_constraints: dict = {
        "hidden_layer_size": [Interval(Integral, 1, None, closed="left")],
        "n_samples": [Interval(Integral, 4, None, closed="left")],
        "max_samples": [
            Interval(Integral, 4, None, closed="left"),
            StrOptions({"auto"}),
            None,
        ],
        "n_warmup": [Interval(Integral, 0, None, closed="left")],
        "sampler": [StrOptions({"chees", "hmc"})],
        "n_leapfrog": [Interval(Integral, 1, None, closed="left")],
        "max_leapfrog": [Interval(Integral, 1, None, closed="left")],
        "anneal_warmup": ["boolean", StrOptions({"auto"})],
        "gradient_dtype": [StrOptions({"float32", "float64"})],
        "target_accept": [Interval(Real, 0, 1, closed="neither")],
        "ard": ["boolean"],
        "n_chains": [Interval(Integral, 1, None, closed="left")],
        "n_jobs": N_JOBS_CONSTRAINT,
        "random_state": ["random_state"],
        "verbose": ["verbose"],
        "warm_start": ["boolean"],
    }

    def __init__(
        self,
        hidden_layer_size=10,
        *,
        n_samples=1000,
        max_samples=None,
        n_warmup=500,
        sampler="chees",
        n_leapfrog=100,
        max_leapfrog=1000,
        anneal_warmup="auto",
        gradient_dtype="float32",
        target_accept=0.8,
        ard=True,
        n_chains=4,
        n_jobs=None,
        random_state=None,
        verbose=0,
        warm_start=False,
    ):
        self.hidden_layer_size = hidden_layer_size
        self.n_samples = n_samples
        self.max_samples = max_samples
        self.n_warmup = n_warmup
        self.sampler = sampler
        self.n_leapfrog = n_leapfrog
        self.max_leapfrog = max_leapfrog
        self.anneal_warmup = anneal_warmup
        self.gradient_dtype = gradient_dtype
        self.target_accept = target_accept
        self.ard = ard
        self.n_chains = n_chains
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose
        self.warm_start = warm_start

    @_fit_context(prefer_skip_nested_validation=True)
    @atomic_fit
    def fit(self, X, y, sample_weight=None):
        """Sample the posterior of the network weights given the data.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training inputs (standardised internally; a constant column is
            scaled by its magnitude).
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
            Targets (numbers, or strings of numbers).  A constant target is
            a well-defined model: the estimator then predicts the constant
            exactly (the posterior given a constant target is symmetric about
            it), with a predictive standard deviation proportional to its
            magnitude and a leave-one-out error of zero.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weights, scikit-learn's meaning: an integer weight is
            the same model as the row repeated that many times, a zero weight
            as the row left out.  Each row's log likelihood is multiplied by
            its weight (in the potential energy and its gradient, and in the
            Gibbs step of the noise precision, which counts the sum of the
            weights as the number of points); the standardisation is weighted
            alike.

        Returns
        -------
        self : HMCNetworkRegressor

        Raises
        ------
        ValueError
            With fewer than two samples (nothing to standardise with, nothing
            to leave out), invalid ``X``, ``y`` or ``sample_weight`` (NaN,
            infinity, shape, non-numeric ``y``, negative weights), or a target
            column whose spread exceeds 1e150 (its squared errors overflow).
        MemoryError
            When the draws and the leave-one-out arrays (``n_samples *
            n_chains * n_samples_train * n_outputs`` floats, several times)
            would not fit in the memory this process may use; raised before
            any sampling.
        """
        X, y, Xs, Ys, sample_weight = self._validate_weighted_training_data(
            X, y, sample_weight
        )
        layout = NetworkLayout(
            Xs.shape[1], self.hidden_layer_size, Ys.shape[1], self.ard
        )
        _check_sampling_memory(self.n_samples, self.n_chains, Xs.shape[0], layout)
        posterior = NetworkPosterior(
            Xs,
            Ys,
            layout,
            HyperPrior(),
            sample_weight,
            gradient_dtype=np.dtype(self.gradient_dtype),
        )
        large = posterior.n_weighted >= ANNEAL_AUTO_ROWS
        anneal = large if self.anneal_warmup == "auto" else bool(self.anneal_warmup)
        settings = ChainSettings(
            n_samples=self.n_samples,
            n_warmup=self.n_warmup,
            n_leapfrog=self.n_leapfrog,
            target_accept=self.target_accept,
            sampler=self.sampler,
            max_leapfrog=self.max_leapfrog,
            anneal=anneal,
        )
        data_hash = joblib.hash((X, y, sample_weight))
        resume = self._continued_chains(data_hash) if self.warm_start else None
        if resume is not None and resume.n_iterations == self.n_warmup + self.n_samples:
            warnings.warn(
                f"warm_start=True continues the chains to n_samples draws, "
                f"and they have {self.n_samples} already: nothing was sampled. "
                "Increase n_samples to draw more.",
                UserWarning,
            )
            return self
        if resume is None:
            seeds = draw_seeds(check_random_state(self.random_state), self.n_chains)
        else:
            seeds = self._chain_seeds
        # Outputs without spread: the posterior is symmetric about them.
        constant = self._y_scaler.constant.copy()
        continuation = self._continuation(posterior)
        # With scikit-learn callbacks, every chain is a subtask of the fit (of
        # each run of the chains, when they may be continued).
        max_steps = self.n_chains if continuation.max_draws <= self.n_samples else None
        with fit_progress(self, self.verbose, max_steps=max_steps, X=X, y=y) as (
            reporter
        ):
            sampling = dict(n_jobs=self.n_jobs, reporter=reporter)
            draws = sample_chains(posterior, seeds, settings, resume=resume, **sampling)
            if resume is not None:
                draws = self._after_previous_draws(draws, posterior)
            draws, diagnostics, continued = continue_until_mixed(
                draws, posterior, seeds, settings, continuation, **sampling
            )
            rhat, ess = _check_convergence(
                draws,
                diagnostics,
                settings,
                layout=layout,
                large_data=large,
                continuation=continuation,
                note=continued,
                feature_names=getattr(self, "feature_names_in_", None),
            )
            loo = _leave_one_out(draws, Ys, y, sample_weight, self._y_scaler, constant)
            reporter(
                1,
                "done: acceptance %s, R-hat %.3f, LOO MSE %.4g",
                np.array2string(draws.accept_rate, precision=2),
                rhat,
                loo.error,
            )
        self._layout, self._constant_outputs = layout, constant
        self._store_draws(draws)
        self.rhat_, self.ess_ = rhat, ess
        self.loo_prediction_, self.loo_error_ = loo.prediction, loo.error
        self.loo_log_density_, self.pareto_k_ = loo.log_density, loo.pareto_k
        # What warm_start needs to continue these chains.
        self._chain_seeds, self._chain_checkpoint = seeds, draws.checkpoint
        self._chain_params, self._data_hash = self._chain_shaping_params(), data_hash
        return self

    def _continuation(self, posterior):
        """How this fit may continue chains that disagree (``max_samples``)."""
        small = posterior.n_weighted <= SMALL_DATA_ROWS
        n_train, layout = posterior.X.shape[0], posterior.layout
        return Continuation(
            self.n_samples,
            self._max_draws(small),
            lambda n_draws: _fits_in_memory(n_draws, self.n_chains, n_train, layout),
            SMALL_DATA_CONTINUE_MAX_RHAT if small else CONTINUE_MAX_RHAT,
        )

    def _store_draws(self, draws):
        """The fitted attributes that come from the draws themselves."""
        self.acceptance_rate_ = draws.accept_rate
        self.n_divergent_ = draws.n_divergent
        self.step_size_ = draws.step_size
        self._trajectory_length = draws.trajectory_length
        # Per-draw statistics of every chain, (n_chains, n_kept).
        self._sample_stats = {
            "acceptance_rate": draws.accept_prob.T.copy(),
            "diverging": draws.divergent.T.copy(),
            "n_steps": draws.n_leapfrog.T.copy(),
            "energy_error": draws.energy_error.T.copy(),
        }
        # Draws arrive as (n_kept, n_chains, ...): chain after chain instead.
        self.parameter_draws_, self.noise_precision_draws_, self.precision_draws_ = (
            _chain_after_chain(values) for values in draws[:3]
        )
        self.noise_std_ = self._y_scaler.inverse_scale(
            np.mean(1.0 / np.sqrt(self.noise_precision_draws_), axis=0)
        )
        self.n_draws_ = len(draws.theta)

    def _max_draws(self, small_data):
        """Most draws per chain a fit may make (``max_samples``)."""
        if self.max_samples is None:
            return self.n_samples
        if self.max_samples == "auto":
            factor = (
                SMALL_DATA_MAX_SAMPLES_FACTOR if small_data else AUTO_MAX_SAMPLES_FACTOR
            )
            return factor * self.n_samples
        return max(self.max_samples, self.n_samples)

    def _chain_shaping_params(self):
        """The parameters the chains' draws depend on, save their seeds."""
        params = self.get_params(deep=False)
        for name in _CONTINUABLE_PARAMS:
            params.pop(name)
        return params

    def _continued_chains(self, data_hash):
        """The checkpoint of the chains a warm-started fit continues.

        None when there is no previous fit (the fit then starts anew);
        ``ValueError`` when the previous fit's chains cannot be continued
        into the one asked for.
        """
        if not hasattr(self, "_chain_checkpoint"):
            return None
        changed = sorted(
            name
            for name, value in self._chain_shaping_params().items()
            if not _same_value(value, self._chain_params[name])
        )
        if changed:
            raise ValueError(
                f"warm_start=True continues the chains of the previous fit, "
                f"which had other values of {', '.join(changed)}: restore them "
                "(only n_samples, n_jobs, verbose and random_state may "
                "change), or set warm_start=False to sample anew."
            )
        if data_hash != self._data_hash:
            raise ValueError(
                "warm_start=True continues the chains of the previous fit, "
                "which sampled the posterior given other data (X, y or "
                "sample_weight differ): set warm_start=False to sample anew."
            )
        checkpoint = self._chain_checkpoint
        if checkpoint is None:
            raise ValueError(
                "warm_start=True cannot continue the chains of the previous "
                "fit: a callback stopped them early. Set warm_start=False to "
                "sample anew."
            )
        n_drawn = checkpoint.n_iterations - self.n_warmup
        if self.n_samples < n_drawn:
            raise ValueError(
                f"n_samples={self.n_samples} must be at least the {n_drawn} "
                "draws per chain of the previous fit when warm_start=True."
            )
        return checkpoint

    def _after_previous_draws(self, draws, posterior):
        """The previous fit's draws followed by ``draws``, those of a
        continuation of its chains, as one :class:`ChainDraws`."""
        previous = self.chain_draws()
        n_previous = previous["parameters"].shape[1]

        def draw_axis_first(name):
            return np.swapaxes(previous[name], 0, 1)

        theta = draw_axis_first("parameters")
        # The network outputs at the training inputs that the sampler
        # computed for the earlier draws, recomputed (one draw at a time, as
        # the sampler does: the same numbers) into the array of all draws.
        outputs = np.empty(
            (n_previous + len(draws.theta), *draws.train_outputs.shape[1:])
        )
        for row, chains_theta in enumerate(theta):
            outputs[row] = posterior.train_outputs(chains_theta)
        outputs[n_previous:] = draws.train_outputs
        earlier = draws._replace(
            theta=theta,
            noise_precision=draw_axis_first("noise_precision"),
            group_precision=draw_axis_first("precision"),
            train_outputs=None,
            accepted=None,
            divergent=draw_axis_first("diverging"),
            accept_rate=self.acceptance_rate_,
            accept_prob=draw_axis_first("acceptance_rate"),
            n_leapfrog=draw_axis_first("n_steps"),
            energy_error=draw_axis_first("energy_error"),
        )
        return join_draws(earlier, draws, train_outputs=outputs)

    def _validate_rows(self, X):
        """``X`` validated against the fit, C-ordered: the network's matrix
        products then round as they do on row-major data."""
        return validate_data(self, X, reset=False, order="C")

    def _standardised_outputs(self, X):
        """Network outputs of every draw, (n_draws, n_rows, n_outputs), standardised."""
        Xs = self._x_scaler.transform(X)
        return network_outputs(self.parameter_draws_, Xs, self._layout)

    def _draw_outputs(self, X):
        """Network outputs of every draw, (n_draws, n_rows, n_outputs), target units."""
        return self._y_scaler.inverse_mean(self._standardised_outputs(X))

    def _check_draws_memory(self, n_rows, method, n_draws=None):
        """Refuse a ``(n_draws, n_rows, n_outputs)`` result that would not fit.

        The result plus one block of activations (:func:`_row_block`).
        """
        layout = self._layout
        n_draws = len(self.parameter_draws_) if n_draws is None else n_draws
        block = _row_block(n_draws, layout)
        needed = (
            8.0
            * n_draws
            * (
                n_rows * layout.n_outputs
                + block * (2 * layout.n_hidden + 3 * layout.n_outputs)
            )
        )
        check_memory(
            needed,
            f"HMCNetworkRegressor.{method} of {n_draws} draws at {n_rows} rows",
            "Pass the rows in smaller batches (each row's draws do not depend on "
            "the other rows), or use predict(X, return_std=True) for the mean "
            "and standard deviation, which works in bounded memory.",
        )

    def predict_draws(self, X):
        """Network output of every posterior draw (no noise), in target units.

        The rows go through the network in blocks (a bounded amount of
        activations at a time); only the result itself grows with the rows.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        draws : ndarray of shape (n_draws, n_samples) or \
                (n_draws, n_samples, n_outputs)
            The output axis is dropped for a single output (``y`` of shape
            (n_samples,) or (n_samples, 1)), as in :meth:`predict`.
            ``n_draws = n_chains * n_kept`` (``n_kept`` is the estimator's
            ``n_samples`` unless a callback stopped the sampling), chain by
            chain: rows ``c * n_kept`` to ``(c + 1) * n_kept - 1`` are chain
            ``c`` in order.

        Raises
        ------
        MemoryError
            When the result (``n_draws * n_samples * n_outputs`` floats) would
            not fit in the memory this process may use; raised before any
            work.  Pass fewer rows at a time, or use :meth:`predict`.
        """
        check_is_fitted(self)
        X = self._validate_rows(X)
        n_rows, n_draws = X.shape[0], len(self.parameter_draws_)
        self._check_draws_memory(n_rows, "predict_draws")
        draws = np.empty((n_draws, n_rows, self._layout.n_outputs))
        block = _row_block(n_draws, self._layout)
        for start in range(0, n_rows, block):
            rows = slice(start, start + block)
            draws[:, rows] = self._draw_outputs(X[rows])
        return draws[:, :, 0] if draws.shape[2] == 1 else draws

    def predict(self, X, return_std=False):
        """Posterior predictive mean (and standard deviation, noise included).

        For a constant target the mean is the constant exactly: the posterior
        given a target without spread is symmetric about it (negating the
        output weights of that output leaves it unchanged), so the average of
        the network over the draws, which differs from it by Monte Carlo
        error only, is replaced by its exact value, and the spread is taken
        about it.  The mean and spread are computed by blocks of rows, with
        a bounded amount of memory whatever the number of rows and draws.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_std : bool, default=False
            Also return the predictive standard deviation: the spread of the
            network over the posterior plus the noise.

        Returns
        -------
        y_mean : ndarray of shape (n_samples,) or (n_samples, n_outputs)
            1-D for a single output (``y`` of shape (n_samples,) or
            (n_samples, 1)), as in ``GaussianProcessRegressor``.
        y_std : ndarray, same shape, only when ``return_std``
        """
        check_is_fitted(self)
        X = self._validate_rows(X)
        noise_var = np.mean(1.0 / self.noise_precision_draws_, axis=0)
        constant = self._constant_outputs
        means, stds = [], []
        block = _row_block(len(self.parameter_draws_), self._layout)
        for start in range(0, X.shape[0], block):
            draws = self._standardised_outputs(X[start : start + block])
            mean = draws.mean(axis=0)
            mean[:, constant] = 0.0
            means.append(mean)
            if return_std:
                spread = np.mean((draws - mean) ** 2, axis=0)
                stds.append(np.sqrt(spread + noise_var))
        mean = self._y_scaler.inverse_mean(np.concatenate(means, axis=0))
        if not return_std:
            return self._like_y(mean)
        std = self._y_scaler.inverse_scale(np.concatenate(stds, axis=0))
        return self._like_y(mean), self._like_y(std)

    def sample_y(self, X, n_samples=1, random_state=None):
        """Draw targets from the posterior predictive distribution.

        Each sample takes a posterior draw of the weights and noise at random
        and adds Gaussian noise to the network output.

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int, default=1
            Draws per row, at least 1.
        random_state : int, RandomState instance or None, default=None

        Returns
        -------
        y_samples : ndarray of shape (n_samples_X, n_samples) or \
                (n_samples_X, n_outputs, n_samples)
            The output axis is dropped for a single output, as in
            ``GaussianProcessRegressor``.

        Raises
        ------
        ValueError
            When ``n_samples`` is not an integer of at least 1.
        MemoryError
            When the result (``n_samples * n_samples_X * n_outputs`` floats)
            would not fit in the memory this process may use; the network
            itself is evaluated in blocks of rows.
        """
        check_is_fitted(self)
        validate_parameter_constraints(
            {"n_samples": [Interval(Integral, 1, None, closed="left")]},
            {"n_samples": n_samples},
            caller_name=f"{type(self).__name__}.sample_y",
        )
        X = self._validate_rows(X)
        n_samples, n_rows = int(n_samples), X.shape[0]
        self._check_draws_memory(n_rows, "sample_y", n_draws=n_samples)
        rng = check_random_state(random_state)
        index = rng.randint(len(self.parameter_draws_), size=n_samples)
        noise_sd = 1.0 / np.sqrt(self.noise_precision_draws_[index])
        # The noise first, in one draw (the stream of the whole array), then
        # the network in blocks of rows added to it in place.
        samples = rng.standard_normal((n_samples, n_rows, self._layout.n_outputs))
        samples *= noise_sd[:, None, :]
        Xs = self._x_scaler.transform(X)
        theta = self.parameter_draws_[index]
        block = _row_block(n_samples, self._layout)
        for start in range(0, n_rows, block):
            rows = slice(start, start + block)
            samples[:, rows] += network_outputs(theta, Xs[rows], self._layout)
        samples = self._y_scaler.inverse_mean(samples)  # (n_samples, n_X, m)
        return self._like_y(samples.transpose(1, 2, 0))

    @property
    def trajectory_length_(self):
        """Mean trajectory duration of each chain, (n_chains,).

        Leapfrog steps times the step-size multiplier, on average over the
        jittered trajectories: adapted in warm-up with ``sampler="chees"``,
        ``n_leapfrog * step_size_`` with ``"hmc"``.
        """
        check_is_fitted(self)
        return self._trajectory_length

    def chain_draws(self):
        """The posterior draws of every chain, chains first.

        Returns
        -------
        draws : dict of ndarray
            ``"parameters"`` (n_chains, n_kept, n_params), ``"noise_precision"``
            (n_chains, n_kept, n_outputs) and ``"precision"`` (n_chains,
            n_kept, n_groups): the flattened ``parameter_draws_``,
            ``noise_precision_draws_`` and ``precision_draws_`` (views of
            them) with a chain axis; and per draw (n_chains, n_kept) the
            trajectory's Metropolis ``"acceptance_rate"`` (its acceptance
            probability), ``"diverging"``, ``"n_steps"`` (leapfrog steps) and
            ``"energy_error"``.
        """
        check_is_fitted(self)
        n_chains = len(self.step_size_)

        def per_chain(values):
            return values.reshape(n_chains, -1, *values.shape[1:])

        draws = {
            "parameters": per_chain(self.parameter_draws_),
            "noise_precision": per_chain(self.noise_precision_draws_),
            "precision": per_chain(self.precision_draws_),
        }
        draws.update(self._sample_stats)
        return draws

    def to_inference_data(self, X=None, y=None, random_state=None):
        """The draws as ArviZ data, for its plots and diagnostics.

        Requires ArviZ (the package's ``arviz`` extra): with ArviZ 1 the
        result is an xarray ``DataTree``, with ArviZ 0.x an
        ``InferenceData``; both hold the same groups and variables.

        Parameters
        ----------
        X, y : array-like, default=None
            Data (the training data, or held-out data) for the
            ``observed_data``, ``log_likelihood`` (Gaussian log density of
            every entry of ``y`` given each draw, shaped like ``y``; sum over
            the outputs for a row's joint density) and
            ``posterior_predictive`` (a draw of ``y`` per posterior draw,
            noise included) groups; without them only ``posterior`` and
            ``sample_stats`` are filled.
        random_state : int, RandomState instance or None, default=None
            Noise of the ``posterior_predictive`` draws.

        Returns
        -------
        idata : xarray.DataTree or arviz.InferenceData
            ``posterior``: ``W1`` (chain, draw, input, hidden), ``b1``
            (chain, draw, hidden), ``W2`` (chain, draw, hidden, output),
            ``b2`` (chain, draw, output), weights of the network on the
            standardised data; ``precision`` (chain, draw, group) with the
            groups named ``W1``, ``W1[j]`` under ARD, ``b1``, ``W2``, ``b2``;
            ``noise_precision`` (standardised) and ``noise_std`` (target
            units) per output.  ``sample_stats`` (chain, draw):
            ``acceptance_rate``, ``diverging``, ``n_steps``,
            ``energy_error``, and the frozen ``step_size`` and mean
            ``trajectory_length`` of each chain repeated over its draws.

        Raises
        ------
        ImportError
            When ArviZ is not installed.
        """
        try:
            import arviz
        except ImportError as exc:
            raise ImportError(
                "HMCNetworkRegressor.to_inference_data needs ArviZ: "
                "pip install arviz. The draws are available without it "
                "from chain_draws()."
            ) from exc
        draws = self.chain_draws()
        n_chains, n_kept = draws["parameters"].shape[:2]
        layout = self._layout
        W1, b1, W2, b2 = layout.unpack(
            draws["parameters"].reshape(n_chains * n_kept, -1)
        )

        def per_chain(values):
            return np.asarray(values).reshape(n_chains, n_kept, *values.shape[1:])

        noise_std = self._y_scaler.inverse_scale(
            1.0 / np.sqrt(draws["noise_precision"])
        )
        posterior = {
            "W1": per_chain(W1),
            "b1": per_chain(b1),
            "W2": per_chain(W2),
            "b2": per_chain(b2),
            "precision": draws["precision"],
            "noise_precision": draws["noise_precision"],
            "noise_std": noise_std,
        }
        coords = {
            "input": np.arange(layout.n_features),
            "hidden": np.arange(layout.n_hidden),
            "output": np.arange(layout.n_outputs),
            "group": layout.group_names(),
        }
        dims = {
            "W1": ["input", "hidden"],
            "b1": ["hidden"],
            "W2": ["hidden", "output"],
            "b2": ["output"],
            "precision": ["group"],
            "noise_precision": ["output"],
            "noise_std": ["output"],
        }
        repeat = np.ones((1, n_kept))
        sample_stats = {
            name: draws[name]
            for name in ("acceptance_rate", "diverging", "n_steps", "energy_error")
        }
        sample_stats["step_size"] = self.step_size_[:, None] * repeat
        sample_stats["trajectory_length"] = self.trajectory_length_[:, None] * repeat
        groups_data = {}
        if X is not None and y is not None:
            groups_data = self._observation_groups(X, y, random_state, per_chain)
            coords["obs"] = np.arange(len(groups_data["observed_data"]["y"]))
            dims["y"] = ["obs"] + (
                ["output"] if groups_data["observed_data"]["y"].ndim == 2 else []
            )
        groups = {"posterior": posterior, "sample_stats": sample_stats, **groups_data}
        if int(str(arviz.__version__).split(".")[0]) >= 1:
            # ArviZ 1's from_dict takes the groups as one mapping.
            return arviz.from_dict(groups, coords=coords, dims=dims)
        return arviz.from_dict(**groups, coords=coords, dims=dims)

    def _observation_groups(self, X, y, random_state, per_chain):
        """The ``observed_data``, ``log_likelihood`` and ``posterior_predictive``."""
        check_is_fitted(self)
        X = self._validate_rows(X)
        y = np.asarray(y, dtype=float)
        outputs = self._draw_outputs(X)  # (n_draws, n_rows, n_outputs)
        noise_sd = self._y_scaler.inverse_scale(
            1.0 / np.sqrt(self.noise_precision_draws_)
        )[:, None, :]
        Y = y.reshape(len(X), -1)
        log_lik = (
            -0.5 * ((Y - outputs) / noise_sd) ** 2
            - np.log(noise_sd)
            - 0.5 * np.log(2 * np.pi)
        )
        rng = check_random_state(random_state)
        predictive = outputs + noise_sd * rng.standard_normal(outputs.shape)
        if y.ndim == 1:
            predictive, log_lik = predictive[:, :, 0], log_lik[:, :, 0]
        return {
            "observed_data": {"y": y},
            "log_likelihood": {"y": per_chain(log_lik)},
            "posterior_predictive": {"y": per_chain(predictive)},
        }

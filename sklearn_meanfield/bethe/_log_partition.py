"""The log partition function and log-likelihood of a binary RBM.

Public through :mod:`sklearn_meanfield.diagnostics`: ``log Z`` exact by
enumeration of the smaller layer, by the Bethe approximation (one fixed point,
or several with their loop corrections and a few hidden units clamped), or by
annealed importance sampling; the exact free energy ``F(v)``; and
``log p(v) = -F(v) - log Z`` of data.  They accept a fitted
:class:`~sklearn_meanfield.BetheRBM`, a fitted
:class:`sklearn.neural_network.BernoulliRBM` or the tuple of its three
parameter arrays, so that the two estimators are scored the same way.
"""

import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state

from ._ais import ais_log_partition, base_rate_visible_bias
from ._exact import exact_log_partition, free_energy
from ._inputs import (
    check_bethe_form,
    check_count,
    check_enumerable,
    check_visible,
    rbm_parameters,
)
from ._moments import rbm_bethe_solve
from ._multistate import clamped_log_partition, model_seeds

__all__ = ["rbm_free_energy", "rbm_log_likelihood", "rbm_log_partition"]

METHODS = ("exact", "bethe", "bethe-multi", "ais")

# Starts of method="bethe-multi" drawn from the model: short block-Gibbs chains
# from uniform random states, long enough to fall into a mode, too short to
# mix between modes (20 sweeps reached the same fixed points as seeds taken
# from training data).
_SEED_SWEEPS = 20


def rbm_log_partition(
    rbm,
    method="exact",
    *,
    bethe_form="bipartite",
    base_rates=None,
    n_chains=100,
    n_temperatures=10000,
    random_state=None,
    n_jobs=None,
    seeds=None,
    n_starts=30,
    n_clamped=3,
    return_std=False,
):
    """Log partition function ``log Z`` of a binary RBM.

    ``Z = sum_{v, h} exp(-E(v, h))`` with ``E(v, h) = -b.v - c.h - h.W.v``
    over all {0, 1} states: BernoulliRBM's model, in nats.

    Parameters
    ----------
    rbm : BetheRBM, BernoulliRBM or tuple of three arrays
        A fitted :class:`~sklearn_meanfield.BetheRBM` or
        :class:`sklearn.neural_network.BernoulliRBM` (any object with
        ``components_``, ``intercept_visible_`` and ``intercept_hidden_``), or
        ``(components, intercept_visible, intercept_hidden)`` of shapes
        ``(n_hidden, n_visible)``, ``(n_visible,)``, ``(n_hidden,)``.
    method : {"exact", "bethe", "bethe-multi", "ais"}, default="exact"
        ``"exact"``: enumeration of the ``2**n`` states of the smaller layer,
        the other summed in closed form; refused when that layer has more than
        :data:`MAX_ENUMERATED_UNITS` units.  ``"bethe"``: the Bethe estimate
        of one fixed point, :func:`rbm_bethe_solve` with its defaults
        (deterministic and cheap, exact on trees and without couplings, low
        on a multimodal model).  ``"bethe-multi"``: the Bethe estimates of
        the distinct fixed points reached from ``n_starts`` starts, each with
        its loop correction ``-1/2 log det(I - B)`` (Watanabe and Fukumizu
        2009), summed, for each state of ``n_clamped`` clamped hidden units;
        it costs about ``2**n_clamped`` times the fixed points' solves.
        ``"ais"``: annealed importance sampling (Salakhutdinov and Murray
        2008), for any size; ``Z`` is unbiased, so ``log Z`` is low by about
        half its variance.  The user guide (:ref:`bethe_rbm`) compares them.
    bethe_form : {"bipartite", "gaussian", "relaxed"}, default="bipartite"
        Form of message passing for ``method="bethe"`` and ``"bethe-multi"``,
        as :class:`~sklearn_meanfield.BetheRBM`'s ``method``.  With
        ``"bethe-multi"``, ``"gaussian"`` means ``"bipartite"``, and
        ``"relaxed"`` runs the TAP equations from all starts at once with the
        large-N loop correction: cheaper on large models, and the estimate of
        BetheRBM's ``log_partition="auto"``.  Ignored by the other methods.
    base_rates : {array-like, sparse matrix} of shape (n_samples, n_visible), \
            default=None
        ``method="ais"`` only: data (typically the training set) whose
        visible means define the independent-unit model the annealing starts
        from, Salakhutdinov and Murray's choice; the closer it is to the RBM,
        the smaller the variance.  None starts from uniform visible units.
    n_chains : int, default=100
        ``method="ais"`` only: independent annealing runs; the standard error
        falls as ``1 / sqrt(n_chains)``.
    n_temperatures : int or array-like, default=10000
        ``method="ais"`` only: annealing steps, equally spaced in inverse
        temperature, or the inverse temperatures themselves (non-decreasing
        from 0 to 1).  More steps lower both the variance
        and the bias, at proportional cost.
    random_state : int, RandomState instance or None, default=None
        ``method="ais"``: source of the chains' seeds.
        ``method="bethe-multi"``: source of the starts (the rows drawn from
        ``seeds``, or the model samples).
    n_jobs : int or None, default=None
        ``method="ais"`` only: joblib workers running the chains; the result
        is the same for every value.
    seeds : {array-like, sparse matrix} of shape (n_seeds, n_visible), \
            default=None
        ``method="bethe-multi"`` only: visible states (values in [0, 1]) at
        which message passing starts, e.g. the training data; ``n_starts``
        rows are drawn at random when there are more.  None starts from
        ``n_starts`` samples of the model (short block-Gibbs chains from
        uniform random states).  Cold messages are always one more start.
    n_starts : int, default=30
        ``method="bethe-multi"`` only: number of seeded starts.  More starts
        find more of the fixed points (modes) at the cost of one solve each.
    n_clamped : int, default=3
        ``method="bethe-multi"`` only: hidden units clamped, ``Z`` being the
        sum of the ``2**n_clamped`` estimates with these units fixed (those
        of largest variance at the fixed points, the units that switch
        between modes; Weller and Jebara 2014), each started from the fixed
        points of the full model.  0 sums the fixed points of the full model
        only; each more unit doubles the cost.
    return_std : bool, default=False
        Also return the standard error of ``log Z``.

    Returns
    -------
    log_z : float
        ``log Z`` in nats (exact, or the Bethe or AIS estimate).
    std_error : float
        Only when ``return_std`` is True: the Monte Carlo standard error of
        ``log_z`` for ``method="ais"`` (the delta method over the chains'
        importance weights: their standard deviation over their mean, over
        ``sqrt(n_chains)``), 0.0 for ``"exact"``, and NaN for the Bethe
        methods, deterministic approximations whose error is a bias that no
        standard error measures.

    Raises
    ------
    ValueError
        If ``method="exact"`` and both layers have more than
        :data:`MAX_ENUMERATED_UNITS` units.

    See Also
    --------
    rbm_log_likelihood : ``log p(v)`` of data.

    References
    ----------
    Huang, H. and Toyoizumi, T. (2015). Advanced mean field theory of the
    restricted Boltzmann machine. Physical Review E, 91, 050101(R).

    Salakhutdinov, R. and Murray, I. (2008). On the quantitative analysis of
    deep belief networks. Proceedings of the 25th International Conference
    on Machine Learning, 872-879.

    Chertkov, M. and Chernyak, V. Y. (2006). Loop series for discrete
    statistical models on graphs. Journal of Statistical Mechanics, P06009.

    Watanabe, Y. and Fukumizu, K. (2009). Graph zeta function in the Bethe
    free energy and loopy belief propagation. Advances in Neural Information
    Processing Systems 22.

    Weller, A. and Jebara, T. (2014). Clamping variables and approximate
    inference. Advances in Neural Information Processing Systems 27.

    Examples
    --------
    Without couplings the units are independent and ``log Z`` is a sum of
    ``log(1 + e^bias)`` over all units.

    >>> import numpy as np
    >>> from sklearn_meanfield.diagnostics import rbm_log_partition
    >>> W, b, c = np.zeros((2, 3)), np.array([0.5, -1.0, 2.0]), np.array([1.0, 0.0])
    >>> independent = np.logaddexp(0, b).sum() + np.logaddexp(0, c).sum()
    >>> bool(np.isclose(rbm_log_partition((W, b, c)), independent))
    True
    >>> bool(np.isclose(rbm_log_partition((W, b, c), method="bethe"), independent))
    True

    With couplings, AIS (1000 temperatures) against enumeration:

    >>> rng = np.random.RandomState(0)
    >>> params = rng.normal(size=(4, 6)), rng.normal(size=6), rng.normal(size=4)
    >>> ais, std_error = rbm_log_partition(params, method="ais",
    ...                                    n_temperatures=1000, random_state=0,
    ...                                    return_std=True)
    >>> bool(abs(ais - rbm_log_partition(params)) < 0.05), bool(std_error < 0.05)
    (True, True)
    """
    params = rbm_parameters(rbm)
    if method == "exact":
        check_enumerable(params[0])
        log_z, std_error = exact_log_partition(*params), 0.0
    elif method == "bethe":
        log_z, std_error = rbm_bethe_solve(params, bethe_form=bethe_form).log_z, np.nan
    elif method == "bethe-multi":
        log_z = _multistate(
            params, bethe_form, seeds, n_starts, n_clamped, random_state
        )
        std_error = np.nan
    elif method == "ais":
        base = None
        if base_rates is not None:
            base = base_rate_visible_bias(check_visible(base_rates, params[0].shape[1]))
        result = ais_log_partition(
            *params,
            base_visible_bias=base,
            n_chains=n_chains,
            n_temperatures=n_temperatures,
            random_state=random_state,
            n_jobs=n_jobs,
        )
        log_z, std_error = result.log_z, result.std_error
    else:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}.")
    if return_std:
        return float(log_z), float(std_error)
    return float(log_z)


def _multistate(params, bethe_form, seeds, n_starts, n_clamped, random_state):
    """``log Z`` of ``method="bethe-multi"``: starts at ``seeds`` (or at model
    samples), loop-corrected fixed points summed over the clamped states."""
    n_starts = check_count(n_starts, "n_starts")
    n_clamped = check_count(n_clamped, "n_clamped", minimum=0)
    check_bethe_form(bethe_form)
    rng = check_random_state(random_state)
    if seeds is None:
        seeds = model_seeds(*params, n_starts, _SEED_SWEEPS, rng)
    else:
        seeds = check_visible(seeds, params[0].shape[1])
        if sp.issparse(seeds):
            seeds = seeds.toarray()
        if seeds.shape[0] > n_starts:
            seeds = seeds[rng.choice(seeds.shape[0], n_starts, replace=False)]
    # The relaxed (TAP) form on request; "gaussian" has no multi-state form.
    form = "relaxed" if bethe_form == "relaxed" else "bipartite"
    try:
        return clamped_log_partition(*params, seeds, n_clamped, form=form)[0]
    except RuntimeError:
        warnings.warn(
            "No Bethe message-passing start converged; method='bethe-multi' "
            "falls back to the single Bethe estimate of method='bethe'.",
            ConvergenceWarning,
        )
        return rbm_bethe_solve(params).log_z


def rbm_free_energy(rbm, X):
    """Free energy ``F(v) = -log sum_h exp(-E(v, h))`` of each row of ``X``.

    ``F(v) = -b.v - sum_a log(1 + exp(c_a + W_a.v))``, the hidden units
    summed out in closed form: exact for any size, the unnormalised part of
    ``log p(v) = -F(v) - log Z``.  BernoulliRBM's convention (its private
    ``_free_energy``).

    Parameters
    ----------
    rbm : BetheRBM, BernoulliRBM or tuple of three arrays
        A fitted :class:`~sklearn_meanfield.BetheRBM` or
        :class:`sklearn.neural_network.BernoulliRBM` (any object with
        ``components_``, ``intercept_visible_`` and ``intercept_hidden_``), or
        ``(components, intercept_visible, intercept_hidden)``.
    X : {array-like, sparse matrix} of shape (n_samples, n_visible)
        Visible states, values in [0, 1].

    Returns
    -------
    free_energy : ndarray of shape (n_samples,)
        In nats.

    See Also
    --------
    rbm_log_likelihood : ``-F(v) - log Z``.

    References
    ----------
    Huang, H. and Toyoizumi, T. (2015). Advanced mean field theory of the
    restricted Boltzmann machine. Physical Review E, 91, 050101(R).

    Examples
    --------
    One visible and one hidden unit, coupled with weight 2: ``F(1) =
    -log(1 + e^2)``, ``F(0) = -log 2``.

    >>> import numpy as np
    >>> from sklearn_meanfield.diagnostics import rbm_free_energy
    >>> params = (np.array([[2.0]]), np.zeros(1), np.zeros(1))
    >>> F = rbm_free_energy(params, np.array([[1.0], [0.0]]))
    >>> bool(np.allclose(F, [-np.log1p(np.e**2), -np.log(2)]))
    True
    """
    params = rbm_parameters(rbm)
    return free_energy(check_visible(X, params[0].shape[1]), *params)


def rbm_log_likelihood(rbm, X, method="exact", *, return_std=False, **options):
    """Log-likelihood ``log p(v) = -F(v) - log Z`` of each row of ``X``.

    ``F(v) = -b.v - sum_a log(1 + exp(c_a + W_a.v))`` is the free energy
    (exact, as BernoulliRBM's); ``log Z`` is exact or the Bethe or AIS
    estimate (:func:`rbm_log_partition`), computed once for all rows, so its
    error is the same for every row.  Unlike
    BernoulliRBM's ``score_samples`` (a random pseudo-likelihood), this is
    the likelihood itself; with ``method="bethe"`` and the model's form as
    ``bethe_form`` it equals
    :meth:`BetheRBM.score_samples <sklearn_meanfield.BetheRBM.score_samples>`
    of a model fitted with ``log_partition="single"``, up to the
    message-passing tolerance, when the fixed point is unique.

    Parameters
    ----------
    rbm : BetheRBM, BernoulliRBM or tuple of three arrays
        A fitted :class:`~sklearn_meanfield.BetheRBM` or
        :class:`sklearn.neural_network.BernoulliRBM` (any object with
        ``components_``, ``intercept_visible_`` and ``intercept_hidden_``), or
        ``(components, intercept_visible, intercept_hidden)``.
    X : {array-like, sparse matrix} of shape (n_samples, n_visible)
        Visible states, values in [0, 1].
    method : {"exact", "bethe", "bethe-multi", "ais"}, default="exact"
        How ``log Z`` is computed, see :func:`rbm_log_partition`.
    return_std : bool, default=False
        Also return the standard error of ``log Z``, which every entry
        shares.
    **options
        The settings of ``method``, keywords of :func:`rbm_log_partition`:
        ``bethe_form`` (``"bethe"``, ``"bethe-multi"``), ``base_rates``,
        ``n_chains``, ``n_temperatures``, ``n_jobs`` (``"ais"``), ``seeds``,
        ``n_starts``, ``n_clamped`` (``"bethe-multi"``) and
        ``random_state`` (both); see there for their defaults and trade-offs.

    Returns
    -------
    log_likelihood : ndarray of shape (n_samples,)
        Per sample, in nats; take ``.mean()`` for the average log-likelihood.
    std_error : float
        Only when ``return_std`` is True: the standard error of every entry
        (and of their mean), that of ``log Z`` (see
        :func:`rbm_log_partition`): AIS's Monte Carlo error, 0.0 when exact,
        NaN for the Bethe estimates.

    See Also
    --------
    rbm_log_partition : ``log Z`` alone.

    References
    ----------
    Huang, H. and Toyoizumi, T. (2015). Advanced mean field theory of the
    restricted Boltzmann machine. Physical Review E, 91, 050101(R).

    Salakhutdinov, R. and Murray, I. (2008). On the quantitative analysis of
    deep belief networks. Proceedings of the 25th International Conference
    on Machine Learning, 872-879.

    Examples
    --------
    The probabilities of all visible states sum to one.

    >>> import numpy as np
    >>> from sklearn.neural_network import BernoulliRBM
    >>> from sklearn_meanfield.diagnostics import rbm_log_likelihood
    >>> X = np.array([[0, 0, 1], [1, 0, 1], [1, 1, 0], [0, 1, 1]])
    >>> rbm = BernoulliRBM(n_components=2, n_iter=5, random_state=0).fit(X)
    >>> states = np.array([[i >> k & 1 for k in range(3)] for i in range(8)])
    >>> round(float(np.exp(rbm_log_likelihood(rbm, states)).sum()), 10)
    1.0
    """
    params = rbm_parameters(rbm)
    X = check_visible(X, params[0].shape[1])
    log_z, std_error = rbm_log_partition(params, method, return_std=True, **options)
    log_likelihood = -free_energy(X, *params) - log_z
    if return_std:
        return log_likelihood, std_error
    return log_likelihood

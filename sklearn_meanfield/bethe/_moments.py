"""The moments and the Bethe solution of a binary RBM, for any fitted model.

Public through :mod:`sklearn_meanfield.diagnostics`: the model's ``<v>``,
``<h>`` and ``<h v^T>`` exact by enumeration (:func:`rbm_exact_moments`), by
Gibbs sampling (:func:`rbm_gibbs_moments`) or by belief propagation from cold
messages (:func:`rbm_bethe_solve`, which also gives the Bethe ``log Z`` and
the stability of its fixed point), the references against which the Bethe
negative phase of :class:`~sklearn_meanfield.BetheRBM` can be checked.
"""

import warnings
from functools import partial
from numbers import Real
from typing import NamedTuple

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ._exact import exact_moments
from ._inputs import (
    check_bethe_form,
    check_count,
    check_enumerable,
    rbm_parameters,
)
from ._message_passing import bethe_solve, stability
from ._relaxed import relaxed_solve, relaxed_stability
from ._sampling import gibbs_moments

__all__ = [
    "BetheResult",
    "RBMMoments",
    "rbm_bethe_solve",
    "rbm_exact_moments",
    "rbm_gibbs_moments",
]


class BetheResult(NamedTuple):
    """The Bethe solution of an RBM, as returned by :func:`rbm_bethe_solve`.

    A named tuple: the parameters below are also its fields.  Moments are in
    the {0, 1} units of the RBM.

    Parameters
    ----------
    log_z : float
        Bethe estimate of ``log Z``.
    mean_visible : ndarray of shape (n_visible,)
        ``<v_i>`` under the model.
    mean_hidden : ndarray of shape (n_hidden,)
        ``<h_a>`` under the model.
    mean_hidden_visible : ndarray of shape (n_hidden, n_visible)
        ``<h_a v_i>`` under the model.
    stability : float
        Growth factor of message perturbations per sweep at the fixed point
        (Huang and Toyoizumi's eq. 5): below 1 the fixed point is stable;
        above 1 the approximation is unreliable.
    n_sweeps : int
        Message-passing sweeps run.
    converged : bool
        Whether the messages converged to ``tol``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.diagnostics import BetheResult
    >>> result = BetheResult(0.0, np.zeros(2), np.zeros(1), np.zeros((1, 2)),
    ...                      0.1, 5, True)
    >>> result.mean_hidden_visible.shape, result.converged
    ((1, 2), True)
    """

    log_z: float
    mean_visible: np.ndarray
    mean_hidden: np.ndarray
    mean_hidden_visible: np.ndarray
    stability: float
    n_sweeps: int
    converged: bool


class RBMMoments(NamedTuple):
    """First and mixed second moments of an RBM's units.

    A named tuple: the parameters below are also its fields, in the {0, 1}
    units of the RBM.

    Parameters
    ----------
    mean_visible : ndarray of shape (n_visible,)
        ``<v_i>`` under the model.
    mean_hidden : ndarray of shape (n_hidden,)
        ``<h_a>`` under the model.
    mean_hidden_visible : ndarray of shape (n_hidden, n_visible)
        ``<h_a v_i>`` under the model (the negative phase of the weight
        gradient).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.diagnostics import RBMMoments
    >>> RBMMoments(np.zeros(3), np.zeros(2), np.zeros((2, 3))).mean_hidden.shape
    (2,)
    """

    mean_visible: np.ndarray
    mean_hidden: np.ndarray
    mean_hidden_visible: np.ndarray


def rbm_bethe_solve(
    rbm, *, bethe_form="bipartite", damping=0.5, tol=1e-7, max_sweeps=2000
):
    """Bethe approximation of an RBM by belief propagation, from cold messages.

    Messages are passed on the RBM's factor graph to a fixed point, which
    gives the Bethe estimate of ``log Z``, the moments the likelihood gradient
    needs, and the stability of the fixed point (Huang and Toyoizumi 2015).
    The approximation is exact when the graph is a tree (e.g. one hidden
    unit) and when the couplings vanish.

    Parameters
    ----------
    rbm : BetheRBM, BernoulliRBM or tuple of three arrays
        A fitted :class:`~sklearn_meanfield.BetheRBM` or
        :class:`sklearn.neural_network.BernoulliRBM` (any object with
        ``components_``, ``intercept_visible_`` and ``intercept_hidden_``), or
        ``(components, intercept_visible, intercept_hidden)`` of shapes
        ``(n_hidden, n_visible)``, ``(n_visible,)``, ``(n_hidden,)``.
    bethe_form : {"bipartite", "gaussian", "relaxed"}, default="bipartite"
        Form of message passing, as :class:`~sklearn_meanfield.BetheRBM`'s
        ``method``: ``"bipartite"`` passes messages both ways between the
        layers; ``"gaussian"`` is the paper's eq. (3), hidden units summed out
        with Gaussian cavity fields; ``"relaxed"`` is their large-N limit,
        the second-order TAP equations on node means (its ``stability`` is
        the growth factor of the linearised TAP iteration).
    damping : float in [0, 1), default=0.5
        Fraction of the old message kept at each update; damping helps
        convergence near the instability.
    tol : float, default=1e-7
        Stop when no message changes by more than ``tol`` in a sweep.
    max_sweeps : int, default=2000
        Most sweeps; a ConvergenceWarning is emitted if they run out.

    Returns
    -------
    result : BetheResult
        ``log_z``, ``mean_visible``, ``mean_hidden``, ``mean_hidden_visible``,
        ``stability``, ``n_sweeps`` and ``converged``.

    Warns
    -----
    ConvergenceWarning
        If the messages did not converge in ``max_sweeps`` sweeps.

    See Also
    --------
    rbm_log_partition : ``log Z`` alone, exact or Bethe.
    BetheRBM.log_partition_function : The same estimate with the fitted
        model's own message-passing settings, warm-started.

    References
    ----------
    Huang, H. and Toyoizumi, T. (2015). Advanced mean field theory of the
    restricted Boltzmann machine. Physical Review E, 91, 050101(R).

    Examples
    --------
    One hidden unit: the factor graph is a tree and the Bethe ``log Z`` is
    exact.

    >>> import numpy as np
    >>> from sklearn_meanfield.diagnostics import rbm_bethe_solve, rbm_log_partition
    >>> params = (np.array([[1.0, -2.0, 0.5]]), np.array([0.5, 0.0, -1.0]),
    ...           np.array([0.3]))
    >>> result = rbm_bethe_solve(params)
    >>> bool(abs(result.log_z - rbm_log_partition(params)) < 1e-8)
    True
    >>> result.converged, bool(result.stability < 1)
    (True, True)
    """
    weights, visible_bias, hidden_bias = rbm_parameters(rbm)
    check_bethe_form(bethe_form)
    if not (isinstance(damping, Real) and 0 <= damping < 1):
        raise ValueError(f"damping must be in [0, 1), got {damping!r}.")
    if not (isinstance(tol, Real) and tol > 0):
        raise ValueError(f"tol must be positive, got {tol!r}.")
    max_sweeps = check_count(max_sweeps, "max_sweeps")
    solve = (
        relaxed_solve
        if bethe_form == "relaxed"
        else partial(bethe_solve, method=bethe_form)
    )
    solution = solve(
        weights,
        visible_bias,
        hidden_bias,
        damping=float(damping),
        tol=float(tol),
        max_sweeps=max_sweeps,
    )
    if not solution.converged:
        warnings.warn(
            f"Bethe message passing did not converge in {max_sweeps} sweeps "
            f"(tol={tol}); the estimates are those of the last sweep. Raise "
            "damping or max_sweeps.",
            ConvergenceWarning,
        )
    if bethe_form == "relaxed":
        lam = relaxed_stability(weights, solution.messages)
    else:
        lam = stability(
            weights, visible_bias, hidden_bias, solution.messages, method=bethe_form
        )
    return BetheResult(
        float(solution.log_z),
        solution.mean_visible,
        solution.mean_hidden,
        solution.mean_hidden_visible,
        float(lam),
        int(solution.n_sweeps),
        bool(solution.converged),
    )


def rbm_exact_moments(rbm):
    """Exact ``<v>``, ``<h>`` and ``<h v^T>`` of a small RBM by enumeration.

    The ``2**n`` states of the smaller layer are enumerated with their exact
    probabilities; the other layer's moments given each state are in closed
    form (logistic functions), so the result is exact to rounding.

    Parameters
    ----------
    rbm : BetheRBM, BernoulliRBM or tuple of three arrays
        A fitted :class:`~sklearn_meanfield.BetheRBM` or
        :class:`sklearn.neural_network.BernoulliRBM` (any object with
        ``components_``, ``intercept_visible_`` and ``intercept_hidden_``), or
        ``(components, intercept_visible, intercept_hidden)``; its smaller
        layer may have at most :data:`MAX_ENUMERATED_UNITS` units.

    Returns
    -------
    moments : RBMMoments
        ``mean_visible``, ``mean_hidden`` and ``mean_hidden_visible``.

    See Also
    --------
    rbm_bethe_solve : The Bethe estimates of the same moments.
    rbm_gibbs_moments : Monte Carlo estimates, for any size.

    References
    ----------
    Huang, H. and Toyoizumi, T. (2015). Advanced mean field theory of the
    restricted Boltzmann machine. Physical Review E, 91, 050101(R).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.diagnostics import rbm_exact_moments
    >>> # One visible, one hidden unit, coupled: p(v=1, h=1) = e^2 / (3 + e^2).
    >>> moments = rbm_exact_moments((np.array([[2.0]]), np.zeros(1), np.zeros(1)))
    >>> bool(np.isclose(moments.mean_hidden_visible[0, 0], np.e**2 / (3 + np.e**2)))
    True
    """
    params = rbm_parameters(rbm)
    check_enumerable(params[0])
    _, mean_visible, mean_hidden, joint = exact_moments(*params)
    return RBMMoments(mean_visible, mean_hidden, joint)


def rbm_gibbs_moments(
    rbm, *, n_chains=200, n_burn_in=1000, n_samples=2000, random_state=None
):
    """Monte Carlo ``<v>``, ``<h>`` and ``<h v^T>`` of an RBM from Gibbs chains.

    ``n_chains`` independent block-Gibbs chains (``v -> h -> v``), started at
    uniformly random visible states, run side by side; after ``n_burn_in``
    sweeps each, the next ``n_samples`` sweeps are averaged, with the
    conditional probabilities ``p(h = 1 | v)`` in place of the sampled hidden
    states (Rao-Blackwellised, lower variance at no cost).  The sampling
    reference of Huang and Toyoizumi's Fig. 4.

    Parameters
    ----------
    rbm : BetheRBM, BernoulliRBM or tuple of three arrays
        A fitted :class:`~sklearn_meanfield.BetheRBM` or
        :class:`sklearn.neural_network.BernoulliRBM` (any object with
        ``components_``, ``intercept_visible_`` and ``intercept_hidden_``), or
        ``(components, intercept_visible, intercept_hidden)``.
    n_chains : int, default=200
        Independent chains.
    n_burn_in : int, default=1000
        Discarded sweeps per chain.
    n_samples : int, default=2000
        Averaged sweeps per chain.
    random_state : int, RandomState instance or None, default=None
        Initial states and the sampling.

    Returns
    -------
    moments : RBMMoments
        ``mean_visible``, ``mean_hidden`` and ``mean_hidden_visible``.

    See Also
    --------
    rbm_exact_moments : Exact moments of small RBMs.
    rbm_bethe_solve : The Bethe estimates.

    References
    ----------
    Huang, H. and Toyoizumi, T. (2015). Advanced mean field theory of the
    restricted Boltzmann machine. Physical Review E, 91, 050101(R).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.diagnostics import rbm_gibbs_moments
    >>> params = (np.array([[2.0]]), np.zeros(1), np.zeros(1))
    >>> moments = rbm_gibbs_moments(params, n_chains=100, n_burn_in=10,
    ...                             n_samples=500, random_state=0)
    >>> round(float(moments.mean_hidden_visible[0, 0]), 2)  # exact 0.711
    0.71
    """
    params = rbm_parameters(rbm)
    n_chains = check_count(n_chains, "n_chains")
    n_burn_in = check_count(n_burn_in, "n_burn_in", minimum=0)
    n_samples = check_count(n_samples, "n_samples")
    mean_visible, mean_hidden, joint = gibbs_moments(
        *params,
        n_chains=n_chains,
        n_burn_in=n_burn_in,
        n_samples=n_samples,
        random_state=random_state,
    )
    return RBMMoments(mean_visible, mean_hidden, joint)

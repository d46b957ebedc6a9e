"""Several Bethe states and their loop corrections: a better ``log Z`` estimate.

A trained RBM is multimodal (digits of different classes are different modes),
and belief propagation (BP) has several fixed points, each describing part of
the distribution.  One BP solution counts the states near its own fixed point
only, so its ``log Z`` is too low; which fixed point a solve reaches depends
on where the messages start (cold messages, or the persistent messages of
training).  Each fixed point is in addition a tree-like approximation of a
graph full of short loops, which misses the loops' contribution.

This module estimates

    ``log Z ~ logsumexp_k (log Z_Bethe^(k) + Delta_k)``

over the distinct fixed points ``k`` that BP reaches from starts seeded at
visible states (training data, or samples of the model), each fixed point
counted once, where ``Delta_k`` is the loop correction of fixed point ``k``:

    ``Delta = -1/2 log det(I - B)``,

``B`` the non-backtracking (Hashimoto) matrix of the bipartite graph whose
directed edge ``a -> i`` carries the correlation coefficient ``rho_ai`` of the
edge belief (the loop series of Chertkov and Chernyak [1]_ keeps, for every
simple cycle ``C``, a term ``prod_{e in C} rho_e``; ``1/2 log`` of the Ihara
zeta function, ``1/2 sum_k tr(B^k) / k``, sums these terms over all cycles,
both orientations halved, and exponentiates their sum).  The determinant of the
``2 |E|``-square matrix is reduced to one of size ``n_hidden + n_visible`` by
the Ihara-Bass formula in Watanabe and Fukumizu's weighted form [2]_:

    ``det(I - B) = det(I + D - A) prod_e (1 - rho_e^2)``,

``A`` the bipartite matrix of ``rho_e / (1 - rho_e^2)`` and ``D`` the diagonal
of ``sum_e rho_e^2 / (1 - rho_e^2)`` over the edges of each unit.  The same
matrix ``I + D - A`` is, up to positive diagonal factors, the Hessian of the
Bethe free energy at the fixed point [2]_: a non-positive determinant marks a
saddle, which is not counted.

References
----------
.. [1] M. Chertkov and V. Y. Chernyak, "Loop series for discrete statistical
   models on graphs", J. Stat. Mech. P06009 (2006).
.. [2] Y. Watanabe and K. Fukumizu, "Graph zeta function in the Bethe free
   energy and loopy belief propagation", Advances in Neural Information
   Processing Systems 22 (2009).
.. [3] H. Huang and T. Toyoizumi, "Advanced mean field theory of the
   restricted Boltzmann machine", Phys. Rev. E 91, 050101(R) (2015).
"""

import itertools
from typing import NamedTuple

import numpy as np
from scipy.special import expit, logsumexp

from ._exact import exact_log_partition
from ._message_passing import (
    _bipartite_hidden_cavity,
    _bipartite_visible_cavity,
    _cavity_bias,
    _log2cosh,
    bethe_solve,
    stability,
    to_spin,
)
from ._relaxed import relaxed_log_z, relaxed_stability

# Starts that the undamped TAP iteration leaves unconverged are run again with
# this damping (as BetheRBM's own solves), for at most this many sweeps.
_FALLBACK_DAMPING = 0.5
_FALLBACK_SWEEPS = 2000
# relaxed_solve_batch gives up on a start whose step has not shrunk by a
# tenth over this many sweeps.
_STALL_SWEEPS = 100

__all__ = [
    "BetheState",
    "MultistateResult",
    "clamped_log_partition",
    "edge_correlations",
    "estimate_log_partition",
    "loop_correction",
    "model_seeds",
    "multistate_log_partition",
    "relaxed_loop_correction",
    "relaxed_multistate_log_partition",
    "relaxed_solve_batch",
    "seeded_messages",
]


class BetheState(NamedTuple):
    """One distinct BP fixed point found by :func:`multistate_log_partition`.

    Attributes
    ----------
    log_z : float
        ``log_z_bethe + loop_correction`` (NaN when the correction is).
    log_z_bethe : float
        Bethe ``log Z`` of the fixed point (BernoulliRBM's convention).
    loop_correction : float
        ``-1/2 log det(I - B)`` at the fixed point; NaN at a saddle
        (non-positive determinant).
    mean_visible : ndarray of shape (n_visible,)
        ``<v>`` of the fixed point, in {0, 1} units.
    mean_hidden : ndarray of shape (n_hidden,)
        ``<h>`` of the fixed point.
    stability : float
        Growth factor of message perturbations (below 1: stable).
    n_starts : int
        How many of the starts converged to this fixed point.
    messages : tuple of two ndarrays
        The fixed point's messages (bipartite form).
    """

    log_z: float
    log_z_bethe: float
    loop_correction: float
    mean_visible: np.ndarray
    mean_hidden: np.ndarray
    stability: float
    n_starts: int
    messages: tuple


class MultistateResult(NamedTuple):
    """Result of :func:`multistate_log_partition`.

    Attributes
    ----------
    log_z : float
        ``logsumexp`` over the counted states of their loop-corrected
        ``log Z`` (with ``loop=False``, of their Bethe ``log Z``).
    log_z_bethe : float
        ``logsumexp`` of the Bethe ``log Z`` of every distinct fixed point, no
        loop correction.
    states : list of BetheState
        The distinct fixed points, highest ``log_z_bethe`` first.
    n_starts : int
        Starts run.
    n_converged : int
        Starts whose messages converged (the others are ignored).
    """

    log_z: float
    log_z_bethe: float
    states: list
    n_starts: int
    n_converged: int


def edge_correlations(weights, visible_bias, hidden_bias, messages):
    """Correlation coefficients of the edge beliefs at bipartite messages.

    The belief of edge ``(a, i)`` is ``b(sigma, s) propto exp(J sigma s +
    H_{i->a} sigma + H_{a->i} s)`` (spins, cavity fields ``H``); its
    correlation coefficient, the same in {0, 1} and in +-1 units, is

        ``rho = 2 sinh(2 J) / sqrt(prod_{x = H_{i->a}, H_{a->i}}
        2 cosh(x + J) 2 cosh(x - J))``,

    computed in logarithms (no cancellation when the units are nearly
    frozen).

    Parameters
    ----------
    weights, visible_bias, hidden_bias : ndarray
        {0, 1} parameters, shapes ``(n_hidden, n_visible)``, ``(n_visible,)``,
        ``(n_hidden,)``.
    messages : tuple of two ndarrays of shape (n_hidden, n_visible)
        Bipartite messages ``(u_hv, u_vh)``, e.g. ``BetheSolution.messages``.

    Returns
    -------
    ndarray of shape (n_hidden, n_visible)
        ``rho_ai`` in (-1, 1).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.bethe._multistate import edge_correlations
    >>> # One edge, biases that cancel the spin fields W / 4, zero messages:
    >>> # two spins coupled by J = W / 4 and nothing else, rho = tanh(J).
    >>> W = np.array([[0.8]])
    >>> rho = edge_correlations(W, -W[0] / 2, -W[:, 0] / 2, (np.zeros((1, 1)),) * 2)
    >>> bool(np.isclose(rho[0, 0], np.tanh(0.2)))
    True
    """
    J, phi, theta, _ = to_spin(weights, visible_bias, hidden_bias)
    u_hv, u_vh = messages
    field_v = _bipartite_visible_cavity(J, phi, u_hv)
    field_h = _bipartite_hidden_cavity(J, theta, u_vh)
    log_norm = 0.5 * (
        _log2cosh(field_v + J)
        + _log2cosh(field_v - J)
        + _log2cosh(field_h + J)
        + _log2cosh(field_h - J)
    )
    # 2 sinh(2J) = e^{2|J|} (1 - e^{-4|J|}) sign(J)
    two_j = 2.0 * np.abs(J)
    return np.sign(J) * np.exp(two_j - log_norm) * -np.expm1(-2.0 * two_j)


def loop_correction(weights, visible_bias, hidden_bias, messages):
    """Loop correction ``-1/2 log det(I - B)`` of a Bethe fixed point.

    ``B`` is the non-backtracking matrix of the bipartite graph weighted by
    the edge correlations (:func:`edge_correlations`); the determinant is
    computed by the weighted Ihara-Bass formula as one of size ``n_hidden +
    n_visible`` (module docstring).

    Parameters
    ----------
    weights, visible_bias, hidden_bias : ndarray
        {0, 1} parameters.
    messages : tuple of two ndarrays of shape (n_hidden, n_visible)
        Bipartite messages at a fixed point.

    Returns
    -------
    float
        The correction to add to the Bethe ``log Z``; NaN when the
        determinant is not positive (a saddle of the Bethe free energy).

    Examples
    --------
    On a tree (one hidden unit) there is no cycle and the correction is 0.

    >>> import numpy as np
    >>> from sklearn_meanfield.bethe._message_passing import bethe_solve
    >>> from sklearn_meanfield.bethe._multistate import loop_correction
    >>> W, b, c = np.array([[1.0, -2.0, 0.5]]), np.zeros(3), np.zeros(1)
    >>> sol = bethe_solve(W, b, c)
    >>> abs(loop_correction(W, b, c, sol.messages)) < 1e-12
    True
    """
    rho = edge_correlations(weights, visible_bias, hidden_bias, messages)
    return -0.5 * _ihara_bass_log_det(rho)


def _ihara_bass_log_det(rho):
    """``log det(I - B)`` of the non-backtracking matrix weighted by ``rho``.

    The weighted Ihara-Bass formula (module docstring) with the block of the
    larger layer eliminated by its Schur complement: one determinant of the
    size of the smaller layer.  NaN when ``I + D - A`` is not positive
    definite (a saddle).
    """
    if rho.shape[0] > rho.shape[1]:
        rho = rho.T
    one_minus = (1.0 - rho) * (1.0 + rho)
    off = rho / one_minus
    diag = rho * off  # rho^2 / (1 - rho^2)
    inner = 1.0 + diag.sum(axis=0)  # the larger layer, diagonal
    schur = -(off / inner) @ off.T
    schur[np.diag_indices_from(schur)] += 1.0 + diag.sum(axis=1)
    sign, log_det = np.linalg.slogdet(schur)
    if not sign > 0:
        return float("nan")
    return float(log_det + np.log(inner).sum() + np.log(one_minus).sum())


def relaxed_loop_correction(weights, mean_visible, mean_hidden):
    """Loop correction ``-1/2 log det(I - B)`` at a relaxed (TAP) fixed point.

    The relaxed form keeps node means, not edge messages, so the edge
    correlations of :func:`edge_correlations` are taken in the same large-N
    limit: ``rho_ai = tanh(J_ai) sqrt((1 - s_a^2)(1 - s_i^2))`` with ``J =
    W / 4`` and ``s = 2 m - 1`` the spin means, i.e. ``tanh(W / 4) * 4
    sqrt(var_h var_v)`` in {0, 1} units (first order in the coupling as the
    relaxed equations, exact for two spins without fields, and always in
    (-1, 1)).  The determinant is then that of :func:`loop_correction`, which
    it approaches at the bipartite fixed point that the same means start.

    Parameters
    ----------
    weights : ndarray of shape (n_hidden, n_visible)
        BernoulliRBM's ``components_``.
    mean_visible : ndarray of shape (n_visible,)
    mean_hidden : ndarray of shape (n_hidden,)
        The fixed point's means, in {0, 1} units.

    Returns
    -------
    float
        The correction to add to the TAP ``log Z``; NaN at a saddle.

    Examples
    --------
    One hidden unit: a tree, no cycle, no correction.

    >>> import numpy as np
    >>> from sklearn_meanfield.bethe._multistate import relaxed_loop_correction
    >>> W = np.array([[1.0, -2.0, 0.5]])
    >>> abs(relaxed_loop_correction(W, np.full(3, 0.4), np.full(1, 0.6))) < 1e-12
    True
    """
    var_v = mean_visible * (1.0 - mean_visible)
    var_h = mean_hidden * (1.0 - mean_hidden)
    rho = (
        np.tanh(0.25 * np.asarray(weights, dtype=float))
        * 4.0
        * np.sqrt(np.outer(var_h, var_v))
    )
    return -0.5 * _ihara_bass_log_det(rho)


def relaxed_solve_batch(
    weights,
    visible_bias,
    hidden_bias,
    mean_visible,
    mean_hidden,
    *,
    damping=0.0,
    tol=1e-7,
    max_sweeps=300,
):
    """The TAP iteration of :func:`~._relaxed.relaxed_iterate` from many starts.

    Each row is one start; the rows advance together (matrix products instead
    of matrix-vector ones), and a row stops as soon as none of its means moves
    by ``tol``.  Rows still moving after ``max_sweeps``, or whose largest step
    has not shrunk by a tenth over 100 sweeps (on trained models, undamped
    updates sometimes settle in a 2-cycle), are reported unconverged.

    Parameters
    ----------
    weights, visible_bias, hidden_bias : ndarray
        {0, 1} parameters.
    mean_visible : ndarray of shape (n_starts, n_visible)
    mean_hidden : ndarray of shape (n_starts, n_hidden)
        The starts (not modified).
    damping : float in [0, 1), default=0.0
        Fraction of the previous means kept.  On trained models undamped
        iteration converges in fewer sweeps, and from more starts, than
        damping 0.5.
    tol : float, default=1e-7
    max_sweeps : int, default=300

    Returns
    -------
    mean_visible : ndarray of shape (n_starts, n_visible)
    mean_hidden : ndarray of shape (n_starts, n_hidden)
    converged : ndarray of bool, shape (n_starts,)

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.bethe._relaxed import relaxed_solve
    >>> from sklearn_meanfield.bethe._multistate import relaxed_solve_batch
    >>> rng = np.random.RandomState(0)
    >>> W, b, c = rng.normal(0, 0.3, (3, 5)), rng.normal(size=5), rng.normal(size=3)
    >>> m_v, m_h, ok = relaxed_solve_batch(W, b, c, np.full((2, 5), 0.5),
    ...                                    np.full((2, 3), 0.5))
    >>> one = relaxed_solve(W, b, c, tol=1e-10)
    >>> bool(ok.all()), bool(np.allclose(m_v[1], one.mean_visible, atol=1e-6))
    (True, True)
    """
    weights = np.asarray(weights, dtype=float)
    weights_sq = weights * weights
    m_v = np.array(mean_visible, dtype=float, ndmin=2)
    m_h = np.array(mean_hidden, dtype=float, ndmin=2)
    active = np.ones(m_v.shape[0], dtype=bool)
    last = np.full(m_v.shape[0], np.inf)
    checkpoint = np.full(m_v.shape[0], np.inf)
    for sweep in range(1, max_sweeps + 1):
        rows = np.flatnonzero(active)
        if rows.size == 0:
            break
        old_v, old_h = m_v[rows], m_h[rows]
        new_h = expit(
            hidden_bias
            + old_v @ weights.T
            - (old_h - 0.5) * ((old_v - old_v * old_v) @ weights_sq.T)
        )
        if damping:
            new_h = (1.0 - damping) * new_h + damping * old_h
        new_v = expit(
            visible_bias
            + new_h @ weights
            - (old_v - 0.5) * ((new_h - new_h * new_h) @ weights_sq)
        )
        if damping:
            new_v = (1.0 - damping) * new_v + damping * old_v
        delta = np.maximum(
            np.abs(new_h - old_h).max(axis=1), np.abs(new_v - old_v).max(axis=1)
        )
        m_v[rows], m_h[rows] = new_v, new_h
        last[rows] = delta
        active[rows[delta < tol]] = False
        if sweep % _STALL_SWEEPS == 0:
            # A row whose step has not shrunk by a tenth in this many sweeps
            # is in a cycle (or converges too slowly to finish): give up.
            stalled = active & (last > 0.9 * checkpoint)
            active &= ~stalled
            checkpoint = last.copy()
    converged = last < tol
    return m_v, m_h, converged


def seeded_messages(weights, visible_bias, hidden_bias, visible, strength=2.0):
    """Bipartite messages that start BP near a visible state.

    Every visible unit sends its hidden units the message of a cavity field
    ``strength * (2 v_i - 1)`` (a spin pointing as ``v_i``, for ``v`` in
    {0, 1}; values in between point less), and the hidden units answer with
    their cavity fields; BP run from there falls into the fixed point whose
    basin holds ``v``.

    Parameters
    ----------
    weights, visible_bias, hidden_bias : ndarray
        {0, 1} parameters.
    visible : ndarray of shape (n_visible,)
        A visible state in [0, 1].
    strength : float, default=2.0
        Cavity field of a fully on (or off) unit, in spin units.

    Returns
    -------
    tuple of two ndarrays of shape (n_hidden, n_visible)
        ``(u_hv, u_vh)``, to pass as ``messages`` to
        :func:`~sklearn_meanfield.bethe._message_passing.bethe_solve`.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.bethe._multistate import seeded_messages
    >>> u_hv, u_vh = seeded_messages(np.ones((2, 3)), np.zeros(3), np.zeros(2),
    ...                              np.array([1.0, 0.0, 1.0]))
    >>> u_hv.shape, bool(u_vh[0, 0] > 0 > u_vh[0, 1])
    ((2, 3), True)
    """
    J, _, theta, _ = to_spin(weights, visible_bias, hidden_bias)
    field = np.broadcast_to(strength * (2.0 * np.asarray(visible) - 1.0), J.shape)
    u_vh = _cavity_bias(field, J)
    u_hv = _cavity_bias(_bipartite_hidden_cavity(J, theta, u_vh), J)
    return u_hv, u_vh


def model_seeds(weights, visible_bias, hidden_bias, n_seeds, n_sweeps, rng):
    """Visible states from short block-Gibbs chains started at random states.

    Parameters
    ----------
    weights, visible_bias, hidden_bias : ndarray
        {0, 1} parameters.
    n_seeds : int
        Number of chains (one state each).
    n_sweeps : int
        Sweeps ``v -> h -> v`` per chain: enough to fall into a mode, not to
        mix between modes (which is the point: the seeds spread over modes).
    rng : numpy.random.RandomState
        Source of the chains.

    Returns
    -------
    ndarray of shape (n_seeds, n_visible)

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.bethe._multistate import model_seeds
    >>> W = np.zeros((2, 3))
    >>> v = model_seeds(W, np.array([-20.0, 20.0, 0.0]), np.zeros(2), 5, 3,
    ...                 np.random.RandomState(0))
    >>> v[:, :2].tolist()
    [[0.0, 1.0], [0.0, 1.0], [0.0, 1.0], [0.0, 1.0], [0.0, 1.0]]
    """
    n_visible = weights.shape[1]
    v = (rng.uniform(size=(n_seeds, n_visible)) < 0.5).astype(float)
    for _ in range(n_sweeps):
        p_h = expit(v @ weights.T + hidden_bias)
        h = (rng.uniform(size=p_h.shape) < p_h).astype(float)
        p_v = expit(h @ weights + visible_bias)
        v = (rng.uniform(size=p_v.shape) < p_v).astype(float)
    return v


def _same_state(a, b, tol):
    return (
        np.max(np.abs(a.mean_visible - b.mean_visible)) < tol
        and np.max(np.abs(a.mean_hidden - b.mean_hidden)) < tol
    )


def multistate_log_partition(
    weights,
    visible_bias,
    hidden_bias,
    seeds,
    *,
    messages=None,
    loop=True,
    strength=2.0,
    damping=0.5,
    tol=1e-7,
    max_sweeps=2000,
    distinct_tol=1e-3,
):
    """``log Z`` summed over the distinct Bethe fixed points, loop-corrected.

    BP (bipartite form) runs from cold messages, from ``messages`` if given,
    and from messages seeded at each row of ``seeds``
    (:func:`seeded_messages`); the converged fixed points are grouped (two
    are the same when their ``<v>`` and ``<h>`` agree within
    ``distinct_tol``), and

        ``log Z ~ logsumexp_k (log Z_Bethe^(k) + Delta_k)``

    over the distinct fixed points ``k``, ``Delta_k`` their
    :func:`loop_correction` (fixed points at a saddle, NaN correction, are not
    counted).  Each fixed point stands for the states in its basin, which the
    single-solution Bethe estimate leaves out when the model is multimodal;
    the correction adds the short loops of the dense bipartite graph that the
    Bethe approximation of each state misses.

    Parameters
    ----------
    weights : ndarray of shape (n_hidden, n_visible)
    visible_bias : ndarray of shape (n_visible,)
    hidden_bias : ndarray of shape (n_hidden,)
    seeds : ndarray of shape (n_seeds, n_visible)
        Visible states in [0, 1] to start from: training data, or samples
        of the model (:func:`model_seeds`).
    messages : tuple of two ndarrays or None, default=None
        An extra start, e.g. a fitted BetheRBM's persistent messages.
    loop : bool, default=True
        Add the loop correction; False sums the plain Bethe ``log Z``.
    strength : float, default=2.0
        Cavity field of the seeded starts (:func:`seeded_messages`).
    damping, tol, max_sweeps
        Message passing settings of
        :func:`~sklearn_meanfield.bethe._message_passing.bethe_solve`.
    distinct_tol : float, default=1e-3
        Fixed points whose moments agree within this are one.

    Returns
    -------
    MultistateResult

    Raises
    ------
    RuntimeError
        If no start converged (raise ``max_sweeps`` or ``damping``).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.bethe._exact import exact_log_partition
    >>> from sklearn_meanfield.bethe._multistate import multistate_log_partition
    >>> from sklearn_meanfield.bethe._message_passing import bethe_solve
    >>> # Two hidden units that each prefer one of two opposite patterns.
    >>> pattern = np.array([1.0] * 4 + [-1.0] * 4)
    >>> W = 3.0 * np.vstack([pattern, -pattern])
    >>> b, c = np.zeros(8), -6.0 * np.ones(2)
    >>> seeds = np.vstack([(pattern + 1) / 2, (1 - pattern) / 2])
    >>> result = multistate_log_partition(W, b, c, seeds)
    >>> len(result.states)
    3
    >>> exact = exact_log_partition(W, b, c)
    >>> single = bethe_solve(W, b, c).log_z
    >>> bool(abs(result.log_z - exact) < abs(single - exact))
    True
    """
    starts = [None]
    if messages is not None:
        starts.append(messages)
    seeds = np.asarray(seeds, dtype=float)
    starts += list(seeds)
    states = []
    n_converged = 0
    for start in starts:
        if start is None or isinstance(start, tuple):
            init = start
        else:
            init = seeded_messages(weights, visible_bias, hidden_bias, start, strength)
        solution = bethe_solve(
            weights,
            visible_bias,
            hidden_bias,
            messages=init,
            damping=damping,
            tol=tol,
            max_sweeps=max_sweeps,
        )
        if not solution.converged:
            continue
        n_converged += 1
        for k, state in enumerate(states):
            if _same_state(state, solution, distinct_tol):
                states[k] = state._replace(n_starts=state.n_starts + 1)
                break
        else:
            correction = (
                loop_correction(weights, visible_bias, hidden_bias, solution.messages)
                if loop
                else 0.0
            )
            states.append(
                BetheState(
                    solution.log_z + correction,
                    solution.log_z,
                    correction,
                    solution.mean_visible,
                    solution.mean_hidden,
                    stability(weights, visible_bias, hidden_bias, solution.messages),
                    1,
                    solution.messages,
                )
            )
    if not states:
        raise RuntimeError(
            f"None of the {len(starts)} message-passing starts converged in "
            f"{max_sweeps} sweeps; raise max_sweeps or damping."
        )
    states.sort(key=lambda s: -s.log_z_bethe)
    counted = [s.log_z for s in states if np.isfinite(s.log_z)]
    log_z = float(logsumexp(counted)) if counted else float("nan")
    log_z_bethe = float(logsumexp([s.log_z_bethe for s in states]))
    return MultistateResult(log_z, log_z_bethe, states, len(starts), n_converged)


def relaxed_multistate_log_partition(
    weights,
    visible_bias,
    hidden_bias,
    seeds,
    *,
    loop=True,
    damping=0.0,
    tol=1e-7,
    max_sweeps=300,
    distinct_tol=1e-3,
):
    """:func:`multistate_log_partition` with the relaxed (TAP) equations.

    The TAP iteration (:func:`relaxed_solve_batch`) runs from means 1/2 and
    from every row ``v`` of ``seeds`` (visible means ``v``, hidden means
    ``sigmoid(c + W v)``), all starts at once; the converged fixed points are
    grouped as in :func:`multistate_log_partition`, and

        ``log Z ~ logsumexp_k (log Z_TAP^(k) + Delta_k)``

    with ``Delta_k`` the :func:`relaxed_loop_correction` of fixed point ``k``
    (a fixed point whose correction is NaN counts without it).
    A sweep costs four matrix products with ``W`` and ``W**2`` for all starts,
    against per-edge transcendental functions of the bipartite messages of
    :func:`multistate_log_partition`, whose loop-corrected sum it
    approximates to ``O(1 / n)`` per unit.

    Parameters
    ----------
    weights : ndarray of shape (n_hidden, n_visible)
    visible_bias : ndarray of shape (n_visible,)
    hidden_bias : ndarray of shape (n_hidden,)
    seeds : ndarray of shape (n_seeds, n_visible)
        Visible states in [0, 1] to start from (training data, the visible
        means of a persistent state, samples of the model).
    loop : bool, default=True
        Add the loop correction; False sums the plain TAP ``log Z``.
    damping, tol, max_sweeps
        Settings of :func:`relaxed_solve_batch`; the starts that do not
        converge are run again with damping 0.5, for up to 2000 sweeps.
    distinct_tol : float, default=1e-3
        Fixed points whose means agree within this are one.

    Returns
    -------
    MultistateResult
        Its states' ``log_z_bethe`` are TAP ``log Z`` and their ``messages``
        the means ``(mean_visible, mean_hidden)``.

    Raises
    ------
    RuntimeError
        If no start converged.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.bethe._exact import exact_log_partition
    >>> from sklearn_meanfield.bethe._multistate import (
    ...     relaxed_multistate_log_partition)
    >>> rng = np.random.RandomState(1)
    >>> W, b, c = rng.normal(0, 0.5, (6, 20)), rng.normal(size=20), rng.normal(size=6)
    >>> seeds = (rng.uniform(size=(5, 20)) < 0.5).astype(float)
    >>> result = relaxed_multistate_log_partition(W, b, c, seeds)
    >>> len(result.states), result.n_starts
    (1, 6)
    >>> bool(abs(result.log_z - exact_log_partition(W, b, c)) < 0.01)
    True
    """
    weights = np.asarray(weights, dtype=float)
    visible_bias = np.asarray(visible_bias, dtype=float)
    hidden_bias = np.asarray(hidden_bias, dtype=float)
    n_hidden, n_visible = weights.shape
    seeds = np.asarray(seeds, dtype=float).reshape(-1, n_visible)
    start_v = np.vstack([np.full(n_visible, 0.5), seeds])
    start_h = expit(hidden_bias + start_v @ weights.T)
    start_h[0] = 0.5
    m_v, m_h, converged = relaxed_solve_batch(
        weights,
        visible_bias,
        hidden_bias,
        start_v,
        start_h,
        damping=damping,
        tol=tol,
        max_sweeps=max_sweeps,
    )
    retry = np.flatnonzero(~converged)
    if retry.size and damping < _FALLBACK_DAMPING:
        # Parallel updates can settle in a 2-cycle; damping breaks it.
        m_v[retry], m_h[retry], converged[retry] = relaxed_solve_batch(
            weights,
            visible_bias,
            hidden_bias,
            start_v[retry],
            start_h[retry],
            damping=_FALLBACK_DAMPING,
            tol=tol,
            max_sweeps=max(max_sweeps, _FALLBACK_SWEEPS),
        )
    states = []
    for row in np.flatnonzero(converged):
        means = (m_v[row], m_h[row])
        for k, state in enumerate(states):
            if (
                np.max(np.abs(state.mean_visible - means[0])) < distinct_tol
                and np.max(np.abs(state.mean_hidden - means[1])) < distinct_tol
            ):
                states[k] = state._replace(n_starts=state.n_starts + 1)
                break
        else:
            log_z = relaxed_log_z(weights, visible_bias, hidden_bias, means)
            correction = relaxed_loop_correction(weights, *means) if loop else 0.0
            states.append(
                BetheState(
                    log_z + correction,
                    log_z,
                    correction,
                    means[0],
                    means[1],
                    relaxed_stability(weights, means),
                    1,
                    means,
                )
            )
    if not states:
        raise RuntimeError(
            f"None of the {len(start_v)} TAP starts converged in {max_sweeps} "
            "sweeps; raise max_sweeps or damping."
        )
    states.sort(key=lambda s: -s.log_z_bethe)
    # The iteration converges to attractors, not saddles: a non-positive
    # determinant marks where the weak-coupling edge correlations fail (strong
    # couplings on few units), and such a state counts uncorrected.
    counted = [s.log_z if np.isfinite(s.log_z) else s.log_z_bethe for s in states]
    log_z_bethe = float(logsumexp([s.log_z_bethe for s in states]))
    return MultistateResult(
        float(logsumexp(counted)),
        log_z_bethe,
        states,
        len(start_v),
        int(converged.sum()),
    )


def clamped_log_partition(
    weights, visible_bias, hidden_bias, seeds, n_clamped, *, form="bipartite", **options
):
    """:func:`multistate_log_partition` with ``n_clamped`` hidden units clamped.

    ``Z = sum_s Z(h_C = s)`` over the ``2**n_clamped`` states ``s`` of a set
    ``C`` of hidden units; each term is the partition function of the RBM
    without those units, whose visible biases absorb ``s W_C`` (and the
    constant ``s . c_C``), estimated by :func:`multistate_log_partition`
    started from the visible magnetisations of the fixed points of the full
    model (which clamping splits) and from cold messages.  Clamping variables
    conditions away part of the multimodality that one fixed point cannot
    describe (for attractive models it provably raises the Bethe partition
    function towards ``Z``, Weller and Jebara [1]_).  ``C`` holds the hidden
    units of largest variance ``<h>(1 - <h>)`` averaged over the fixed points
    of the unclamped model (weights ``Z_Bethe^(k)``): the units that switch
    between modes.

    Parameters
    ----------
    weights, visible_bias, hidden_bias : ndarray
        {0, 1} parameters.
    seeds : ndarray of shape (n_seeds, n_visible)
        Starts, as in :func:`multistate_log_partition`.
    n_clamped : int
        Number of hidden units clamped (at most ``n_hidden``); 0 is
        :func:`multistate_log_partition` itself.
    form : {"bipartite", "relaxed"}, default="bipartite"
        ``"bipartite"``: every term by :func:`multistate_log_partition`;
        ``"relaxed"``: by :func:`relaxed_multistate_log_partition` (the TAP
        equations, much cheaper on large models).
    **options
        Keywords of :func:`multistate_log_partition` (``loop``, ``damping``,
        ...), or of :func:`relaxed_multistate_log_partition`, for every term.

    Returns
    -------
    log_z : float
        The estimate of ``log Z``.
    clamped : ndarray of int
        Indices of the clamped hidden units.

    References
    ----------
    .. [1] A. Weller and T. Jebara, "Clamping variables and approximate
       inference", Advances in Neural Information Processing Systems 27
       (2014).

    Examples
    --------
    Clamping every hidden unit leaves independent visible units: exact.

    >>> import numpy as np
    >>> from sklearn_meanfield.bethe._exact import exact_log_partition
    >>> from sklearn_meanfield.bethe._multistate import clamped_log_partition
    >>> rng = np.random.RandomState(0)
    >>> W, b, c = rng.normal(0, 2, (3, 6)), rng.normal(size=6), rng.normal(size=3)
    >>> log_z, clamped = clamped_log_partition(W, b, c, np.zeros((1, 6)), 3)
    >>> bool(np.isclose(log_z, exact_log_partition(W, b, c))), sorted(clamped.tolist())
    (True, [0, 1, 2])
    """
    weights = np.asarray(weights, dtype=float)
    visible_bias = np.asarray(visible_bias, dtype=float)
    hidden_bias = np.asarray(hidden_bias, dtype=float)
    n_clamped = min(int(n_clamped), weights.shape[0])
    forms = {
        "bipartite": multistate_log_partition,
        "relaxed": relaxed_multistate_log_partition,
    }
    if form not in forms:
        raise ValueError(f"form must be one of {tuple(forms)}, got {form!r}.")
    multistate = forms[form]
    base = multistate(weights, visible_bias, hidden_bias, seeds, **options)
    if n_clamped == 0:
        return base.log_z, np.array([], dtype=int)
    log_mass = np.array([state.log_z_bethe for state in base.states])
    mass = np.exp(log_mass - logsumexp(log_mass))
    variance = sum(
        w * state.mean_hidden * (1.0 - state.mean_hidden)
        for w, state in zip(mass, base.states)
    )
    clamped = np.argsort(-variance, kind="stable")[:n_clamped]
    kept = np.setdiff1d(np.arange(weights.shape[0]), clamped)
    # Clamping splits the fixed points of the full model rather than creating
    # new ones: the clamped models start from their visible magnetisations
    # (and cold messages), fewer starts than the seeds and reaching the same
    # fixed points.
    state_seeds = np.array([state.mean_visible for state in base.states])
    terms = []
    for assignment in itertools.product((0.0, 1.0), repeat=n_clamped):
        assignment = np.array(assignment)
        bias = visible_bias + assignment @ weights[clamped]
        if kept.size:
            log_z = multistate(
                weights[kept], bias, hidden_bias[kept], state_seeds, **options
            ).log_z
        else:  # no hidden unit left: independent visible units
            log_z = float(np.logaddexp(0.0, bias).sum())
        terms.append(assignment @ hidden_bias[clamped] + log_z)
    return float(logsumexp(terms)), clamped


# estimate_log_partition: enumerate when 2**(smaller layer) * (larger layer)
# is at most this (16 x 64 or 12 x 784 units, tens of milliseconds) ...
EXACT_MAX_TERMS = 1 << 22
# ... else the relaxed multi-state sum, with this many hidden units clamped
# when there are at most CLAMP_MAX_HIDDEN: on digits models of 12-20 hidden
# units clamping 3 brought the largest error against enumeration from 0.94 to
# 0.21 nat; on more hidden units the 2**3 clamped models cost more than they
# correct.
CLAMP_MAX_HIDDEN = 32
N_CLAMPED = 3


def estimate_log_partition(weights, visible_bias, hidden_bias, seeds):
    """BetheRBM's default ``log Z``: exact when cheap, else multi-state TAP.

    When ``2**min(n_hidden, n_visible) * max(n_hidden, n_visible)`` is at
    most :data:`EXACT_MAX_TERMS` the smaller layer is enumerated
    (:func:`~._exact.exact_log_partition`), which is then as fast as the
    approximation.  Otherwise the distinct relaxed (TAP) fixed points reached
    from ``seeds`` and from means 1/2, each with its loop correction, are
    summed (:func:`relaxed_multistate_log_partition`), with
    :data:`N_CLAMPED` hidden units clamped when there are at most
    :data:`CLAMP_MAX_HIDDEN` (:func:`clamped_log_partition`; without
    clamping if a clamped model converges from no start).  The result is a
    deterministic function of the parameters and the seeds.

    Parameters
    ----------
    weights : ndarray of shape (n_hidden, n_visible)
    visible_bias : ndarray of shape (n_visible,)
    hidden_bias : ndarray of shape (n_hidden,)
    seeds : ndarray of shape (n_seeds, n_visible)
        Visible states in [0, 1] to start the TAP iteration from: rows of the
        training data, the visible means of the persistent fixed point,
        visible means of samples of the model.

    Returns
    -------
    float

    Raises
    ------
    RuntimeError
        If no TAP start converged.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.bethe._exact import exact_log_partition
    >>> from sklearn_meanfield.bethe._multistate import estimate_log_partition
    >>> rng = np.random.RandomState(0)
    >>> W, b, c = rng.normal(0, 0.1, (4, 30)), rng.normal(size=30), np.zeros(4)
    >>> bool(estimate_log_partition(W, b, c, np.zeros((0, 30)))
    ...      == exact_log_partition(W, b, c))
    True
    """
    weights = np.asarray(weights, dtype=float)
    n_hidden, n_visible = weights.shape
    small, large = sorted((n_hidden, n_visible))
    if small < 64 and (1 << small) * large <= EXACT_MAX_TERMS:
        return float(exact_log_partition(weights, visible_bias, hidden_bias))
    n_clamped = N_CLAMPED if n_hidden <= CLAMP_MAX_HIDDEN else 0
    try:
        log_z, _ = clamped_log_partition(
            weights, visible_bias, hidden_bias, seeds, n_clamped, form="relaxed"
        )
    except RuntimeError:
        if not n_clamped:
            raise
        # A clamped model whose TAP iteration converges from no start.
        log_z, _ = clamped_log_partition(
            weights, visible_bias, hidden_bias, seeds, 0, form="relaxed"
        )
    return float(log_z)

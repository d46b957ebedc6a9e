"""Relaxed belief propagation for the RBM: the second-order TAP equations.

On the RBM's dense bipartite graph every coupling is weak (of order
``1 / sqrt(n)``) and each message of the bipartite belief propagation
(:mod:`._message_passing`) differs from its node's belief by one coupling's
worth.  Expanding the messages to second order in the couplings (Mezard's
relaxed BP) leaves one magnetisation per node instead of one message per
edge, with an Onsager reaction term in place of the excluded edge; the fixed
points are those of the second-order TAP (Plefka) equations of the EMF-RBM of
Gabrie, Tramel and Krzakala (2015), and the Bethe free energy becomes the
TAP free energy.  The state is ``O(n_visible + n_hidden)`` and a sweep is four
matrix-vector products, with ``W`` and ``W**2`` (computed once per set of
parameters).  The results agree with full message passing up to ``O(1 / n)``
per unit (``tests/test_bethe_relaxed.py``).

Units are BernoulliRBM's {0, 1}; ``m`` are the means of the units,
``var = m (1 - m)`` their variances.  With ``W`` of shape
``(n_hidden, n_visible)``, visible biases ``b`` and hidden biases ``c``:

* fixed point (Onsager term: the node's own contribution, reflected back
  through its neighbours)::

    m_h = sigmoid(c + W m_v   - (m_h - 1/2) * (W**2 var_v))
    m_v = sigmoid(b + W^T m_h - (m_v - 1/2) * (W**2^T var_h))

* free energy at the fixed point::

    log Z_TAP = sum S(m) + b.m_v + c.m_h + m_h^T W m_v
                + 1/2 var_h^T W**2 var_v,

  with ``S(m) = -m log m - (1 - m) log(1 - m)``;

* moments: the fixed point is a stationary point of the right-hand side, so
  ``d log Z_TAP / d b = m_v``, ``d log Z_TAP / d c = m_h`` and
  ``d log Z_TAP / d W = m_h m_v^T + W * (var_h var_v^T)``, the model's
  ``<h v^T>`` to second order (the negative phase of the weight gradient).

The iteration is the EMF-RBM's: hidden means from the current visible ones,
then visible means from the new hidden ones, each Onsager term with the
node's own previous mean; damping mixes in the previous means.

References
----------
.. [1] M. Gabrie, E. W. Tramel and F. Krzakala, "Training restricted
   Boltzmann machines via the Thouless-Anderson-Palmer free energy",
   Advances in Neural Information Processing Systems 28 (2015).
.. [2] M. Mezard, "Mean-field message-passing equations in the Hopfield
   model and its generalizations", Phys. Rev. E 95, 022117 (2017).
.. [3] T. Plefka, "Convergence condition of the TAP equation for the
   infinite-ranged Ising spin glass model", J. Phys. A 15, 1971 (1982).
"""

import numpy as np
from scipy.special import entr, expit

from ._message_passing import BetheSolution

__all__ = [
    "augmented_sweeps",
    "cold_state",
    "relaxed_iterate",
    "relaxed_log_z",
    "relaxed_moments",
    "relaxed_solve",
    "relaxed_stability",
    "sweep_workspace",
]


def cold_state(n_hidden, n_visible):
    """Means 1/2 (no information yet), the start of a cold solve.

    Returns
    -------
    mean_visible : ndarray of shape (n_visible,)
    mean_hidden : ndarray of shape (n_hidden,)
    """
    return np.full(n_visible, 0.5), np.full(n_hidden, 0.5)


def relaxed_iterate(
    weights,
    weights_sq,
    visible_bias,
    hidden_bias,
    state,
    *,
    damping,
    tol,
    max_sweeps,
    check_last_only=False,
):
    """Sweeps of the TAP iteration until no mean moves by ``tol``.

    A sweep updates the hidden means from the visible ones, then the visible
    means from the new hidden ones (the fixed-point equations of the module
    docstring), each mixed with ``damping`` times its previous value.  It is
    written with in-place operations: on small models a sweep costs mostly
    numpy calls, so this loop makes as few as it can.

    Parameters
    ----------
    weights : ndarray of shape (n_hidden, n_visible)
    weights_sq : ndarray of shape (n_hidden, n_visible)
        ``weights ** 2``.
    visible_bias : ndarray of shape (n_visible,)
    hidden_bias : ndarray of shape (n_hidden,)
    state : tuple of two ndarrays
        ``(mean_visible, mean_hidden)`` to start from, not modified.
    damping : float in [0, 1)
        Fraction of the previous means kept.
    tol : float
        Stop after the first sweep in which no mean changes by more than
        ``tol``.
    max_sweeps : int
        Most sweeps.
    check_last_only : bool, default=False
        Test ``tol`` only after the last sweep (run all ``max_sweeps``):
        in training the test rarely passes and costs a third of a sweep.

    Returns
    -------
    state : tuple of two ndarrays
        ``(mean_visible, mean_hidden)`` after the last sweep.
    n_sweeps : int
    converged : bool
    """
    m_v, m_h = state
    keep = 1.0 - damping
    for n_sweeps in range(1, max_sweeps + 1):
        onsager = weights_sq @ (m_v - m_v * m_v)
        onsager *= m_h - 0.5
        field = weights @ m_v
        field += hidden_bias
        field -= onsager
        new_h = expit(field, out=field)
        if damping:
            new_h *= keep
            new_h += damping * m_h
        onsager = (new_h - new_h * new_h) @ weights_sq
        onsager *= m_v - 0.5
        field = new_h @ weights
        field += visible_bias
        field -= onsager
        new_v = expit(field, out=field)
        if damping:
            new_v *= keep
            new_v += damping * m_v
        if check_last_only and n_sweeps < max_sweeps:
            m_v, m_h = new_v, new_h
            continue
        delta = max(np.abs(new_h - m_h).max(), np.abs(new_v - m_v).max())
        m_v, m_h = new_v, new_h
        if delta < tol:
            return (m_v, m_h), n_sweeps, True
    return (m_v, m_h), max_sweeps, False


def sweep_workspace(n_hidden, n_visible, dtype=np.float64):
    """Work arrays of :func:`augmented_sweeps`, allocated once per training epoch.

    Parameters
    ----------
    n_hidden, n_visible : int
    dtype : {np.float64, np.float32}, default=np.float64
        The dtype of the sweeps (that of the augmented matrix).

    Returns
    -------
    tuple of ndarrays
        Onsager terms and fields of each layer, arrays of 1/2 (subtracting an
        array is cheaper than a Python float) and the last sweep's changes.
    """
    return (
        np.empty(n_hidden, dtype),
        np.empty(n_hidden, dtype),
        np.empty(n_visible, dtype),
        np.empty(n_visible, dtype),
        np.full(n_hidden, 0.5, dtype),
        np.full(n_visible, 0.5, dtype),
        np.empty(n_hidden + n_visible, dtype),
    )


def augmented_sweeps(
    augmented,
    weights_sq,
    visible,
    hidden,
    n_sweeps,
    damping,
    *,
    variances=None,
    workspace=None,
    track_change=True,
):
    """The sweeps of :func:`relaxed_iterate` on bias-augmented arrays, in place.

    The training loop's kernel.  ``augmented`` is
    ``[[W, c], [b^T, 0]]`` of shape ``(n_hidden + 1, n_visible + 1)`` and the
    means carry a trailing 1, so that ``W m_v + c`` and ``W^T m_h + b`` are one
    matrix-vector product each: on small models a sweep's cost is the number
    of numpy calls, which this cuts (preallocated work arrays, products written
    in place, the variances shared with the caller's gradient step).

    The sweeps run in the dtype of ``augmented`` (float64 or float32); every
    array passed must have that dtype, so that no product or ufunc upcasts.
    float32 halves the memory read per sweep (two passes over ``W``-sized
    arrays, memory-bound), and its rounding (``~1e-7`` relative per
    operation, sums over at most ``n_visible`` terms) stays far below the
    staleness of a few sweeps per update (``tests/test_bethe_float32.py``).

    Parameters
    ----------
    augmented : ndarray of shape (n_hidden + 1, n_visible + 1)
    weights_sq : ndarray of shape (n_hidden, n_visible)
        ``W ** 2``.
    visible : ndarray of shape (n_visible + 1,)
        ``[m_v, 1]``, overwritten with the new means.
    hidden : ndarray of shape (n_hidden + 1,)
        ``[m_h, 1]``, overwritten with the new means.
    n_sweeps : int
        Sweeps to run (at least 1).
    damping : float in [0, 1)
    variances : tuple of two ndarrays or None, default=None
        Work arrays ``(var_v, var_h)`` of shapes ``(n_visible,)`` and
        ``(n_hidden,)``; ``var_v`` must hold ``m_v (1 - m_v)`` on entry.  On
        return they hold the variances of the new means (the gradient step
        needs them).  None computes ``var_v`` here.
    workspace : tuple of ndarrays or None, default=None
        From :func:`sweep_workspace`, to reuse across calls; None allocates
        one.
    track_change : bool, default=True
        Measure the last sweep's change; False skips it (six numpy calls, a
        few per cent of a small model's training step) and returns None.

    Returns
    -------
    delta : float or None
        Largest change of a mean in the last sweep (None when not
        ``track_change``).
    """
    n_hidden, n_visible = weights_sq.shape
    rows_hidden = augmented[:n_hidden]
    columns_visible = augmented[:, :n_visible]
    m_v, m_h = visible[:n_visible], hidden[:n_hidden]
    dtype = augmented.dtype
    if variances is None:
        var_v, var_h = np.empty(n_visible, dtype), np.empty(n_hidden, dtype)
        np.multiply(m_v, m_v, out=var_v)
        np.subtract(m_v, var_v, out=var_v)
    else:
        var_v, var_h = variances
    if workspace is None:
        workspace = sweep_workspace(n_hidden, n_visible, dtype)
    onsager_h, field_h, onsager_v, field_v, half_h, half_v, change = workspace
    keep = 1.0 - damping
    # Local names and positional outputs: each call's overhead is most of its
    # cost at 64 x 64.
    dot, matmul, multiply, subtract = np.dot, np.matmul, np.multiply, np.subtract
    for sweep in range(n_sweeps):
        last = track_change and sweep == n_sweeps - 1
        # Hidden layer: sigmoid(W m_v + c - (m_h - 1/2) W**2 var_v).
        dot(weights_sq, var_v, onsager_h)
        subtract(m_h, half_h, field_h)
        multiply(onsager_h, field_h, onsager_h)
        # Undamped, all but the last sweep write the means directly; the
        # last keeps the old ones for its change.
        target = field_h if damping or last else m_h
        dot(rows_hidden, visible, target)
        subtract(target, onsager_h, target)
        expit(target, target)
        if damping:
            field_h -= m_h
            field_h *= keep
            if last:
                change[:n_hidden] = field_h
            m_h += field_h
        elif last:
            subtract(field_h, m_h, change[:n_hidden])
            m_h[...] = field_h
        multiply(m_h, m_h, var_h)
        subtract(m_h, var_h, var_h)
        # Visible layer: sigmoid(W^T m_h + b - (m_v - 1/2) W**2^T var_h).
        dot(var_h, weights_sq, onsager_v)
        subtract(m_v, half_v, field_v)
        multiply(onsager_v, field_v, onsager_v)
        target = field_v if damping or last else m_v
        # matmul, not dot: dot would copy the strided columns first.
        matmul(hidden, columns_visible, target)
        subtract(target, onsager_v, target)
        expit(target, target)
        if damping:
            field_v -= m_v
            field_v *= keep
            if last:
                change[n_hidden:] = field_v
            m_v += field_v
        elif last:
            subtract(field_v, m_v, change[n_hidden:])
            m_v[...] = field_v
        multiply(m_v, m_v, var_v)
        subtract(m_v, var_v, var_v)
    if not track_change:
        return None
    return float(np.abs(change, out=change).max())


def relaxed_log_z(weights, visible_bias, hidden_bias, state):
    """TAP (second-order Plefka) ``log Z`` at the means ``state``.

    At a fixed point of :func:`relaxed_iterate` this is the relaxed-BP (large-N)
    form of the Bethe ``log Z``; away from one it is the TAP functional, whose
    stationary points are the fixed points.

    Parameters
    ----------
    weights : ndarray of shape (n_hidden, n_visible)
    visible_bias : ndarray of shape (n_visible,)
    hidden_bias : ndarray of shape (n_hidden,)
    state : tuple of two ndarrays
        ``(mean_visible, mean_hidden)``.

    Returns
    -------
    float
    """
    m_v, m_h = state
    entropy = (entr(m_v) + entr(1.0 - m_v)).sum() + (entr(m_h) + entr(1.0 - m_h)).sum()
    var_v = m_v * (1.0 - m_v)
    var_h = m_h * (1.0 - m_h)
    energy = visible_bias @ m_v + hidden_bias @ m_h + m_h @ (weights @ m_v)
    onsager = 0.5 * (var_h @ (weights**2 @ var_v))
    return float(entropy + energy + onsager)


def relaxed_moments(weights, state):
    """``<v>``, ``<h>`` and ``<h v^T>`` at the means ``state``.

    ``<h v^T> = m_h m_v^T + W * (var_h var_v^T)``, the gradient of
    :func:`relaxed_log_z` with respect to ``W`` at a fixed point.

    Parameters
    ----------
    weights : ndarray of shape (n_hidden, n_visible)
    state : tuple of two ndarrays
        ``(mean_visible, mean_hidden)``.

    Returns
    -------
    mean_visible, mean_hidden, mean_hidden_visible : ndarray
    """
    m_v, m_h = state
    var_v = m_v * (1.0 - m_v)
    var_h = m_h * (1.0 - m_h)
    joint = np.outer(m_h, m_v) + weights * np.outer(var_h, var_v)
    return m_v, m_h, joint


def relaxed_solve(
    weights,
    visible_bias,
    hidden_bias,
    *,
    state=None,
    damping=0.5,
    tol=1e-6,
    max_sweeps=500,
    compute_log_z=True,
):
    """Iterate the TAP equations to a fixed point; return log Z and moments.

    The counterpart of :func:`~._message_passing.bethe_solve` for the relaxed
    form, with the same result type: its ``messages`` are the means
    ``(mean_visible, mean_hidden)``.

    Parameters
    ----------
    weights : ndarray of shape (n_hidden, n_visible)
        BernoulliRBM's ``components_``.
    visible_bias : ndarray of shape (n_visible,)
    hidden_bias : ndarray of shape (n_hidden,)
    state : tuple of two ndarrays or None, default=None
        Warm start, ``(mean_visible, mean_hidden)``; None starts at 1/2.
    damping : float in [0, 1), default=0.5
        Fraction of the previous means kept at each update.
    tol : float, default=1e-6
        Stop when no mean changes by more than ``tol`` in a sweep.
    max_sweeps : int, default=500
        Upper bound on sweeps.
    compute_log_z : bool, default=True
        Skip the free energy (NaN is returned) when only moments are needed.

    Returns
    -------
    BetheSolution

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.bethe._relaxed import relaxed_solve
    >>> # Without couplings the units are independent and log Z is exact.
    >>> W, b, c = np.zeros((1, 2)), np.array([0.5, -1.0]), np.array([0.3])
    >>> sol = relaxed_solve(W, b, c)
    >>> exact = np.logaddexp(0, b).sum() + np.logaddexp(0, c).sum()
    >>> bool(abs(sol.log_z - exact) < 1e-10), sol.converged
    (True, True)
    """
    weights = np.asarray(weights, dtype=float)
    visible_bias = np.asarray(visible_bias, dtype=float)
    hidden_bias = np.asarray(hidden_bias, dtype=float)
    if state is None:
        state = cold_state(*weights.shape)
    state, n_sweeps, converged = relaxed_iterate(
        weights,
        weights**2,
        visible_bias,
        hidden_bias,
        tuple(np.asarray(m, dtype=float) for m in state),
        damping=damping,
        tol=tol,
        max_sweeps=max_sweeps,
    )
    log_z = (
        relaxed_log_z(weights, visible_bias, hidden_bias, state)
        if compute_log_z
        else np.nan
    )
    mean_visible, mean_hidden, joint = relaxed_moments(weights, state)
    return BetheSolution(
        log_z, mean_visible, mean_hidden, joint, state, n_sweeps, converged
    )


def relaxed_stability(weights, state):
    """Growth factor per sweep of perturbation variances (the AT condition).

    A perturbation of the visible means reaches hidden unit ``a`` as
    ``sum_i W_ai var_i dH_i``; with independent signs its variance grows by
    ``B = diag(var_h) W**2 diag(var_v)`` twice per sweep, so the factor is the
    largest eigenvalue of ``W**2^T var_h**2 W**2 var_v**2``, i.e. the squared
    largest singular value of ``B``.  This is the large-N limit of the
    bipartite form's :func:`~._message_passing.stability` and Plefka's
    convergence condition of the TAP equations (the de Almeida-Thouless line
    for the SK model): below 1 the fixed point is stable, above 1 the
    spin-glass susceptibility diverges and the TAP estimates are unreliable.

    Parameters
    ----------
    weights : ndarray of shape (n_hidden, n_visible)
    state : tuple of two ndarrays
        The fixed point ``(mean_visible, mean_hidden)``.

    Returns
    -------
    float
    """
    m_v, m_h = state
    var_v = m_v * (1.0 - m_v)
    var_h = m_h * (1.0 - m_h)
    scaled = var_h[:, np.newaxis] * np.asarray(weights, dtype=float) ** 2 * var_v
    # The largest eigenvalue of the smaller Gram matrix: one product and a
    # symmetric eigensolver, no SVD of the full matrix.
    if scaled.shape[0] > scaled.shape[1]:
        scaled = scaled.T
    gram = scaled @ scaled.T
    return float(max(np.linalg.eigvalsh(gram)[-1], 0.0))

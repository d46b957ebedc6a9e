"""Likelihood gradient steps for the RBM with a Bethe negative phase.

Pure functions on arrays in BernoulliRBM's {0, 1} parametrisation.  The
positive phase is exact (hidden units are independent given the data); the
negative phase is read off the Bethe fixed point, reached from the previous
step's messages in a few sweeps (persistent messages): full message passing
(:func:`bethe_training_epoch`) or its relaxed, second-order TAP form
(:func:`relaxed_training_epoch`, whose update is a few BLAS calls).

References
----------
.. [1] H. Huang and T. Toyoizumi, "Advanced mean field theory of the
   restricted Boltzmann machine", Phys. Rev. E 91, 050101(R) (2015).
.. [2] M. Gabrie, E. W. Tramel and F. Krzakala, "Training restricted
   Boltzmann machines via the Thouless-Anderson-Palmer free energy",
   Advances in Neural Information Processing Systems 28 (2015).
"""

import numpy as np
import scipy.sparse as sp
from scipy.linalg.blas import dgemm, sgemm
from scipy.special import expit
from sklearn.utils.extmath import safe_sparse_dot

from ._message_passing import bethe_solve
from ._relaxed import augmented_sweeps, sweep_workspace
from ._sampling import augmented_gibbs_step, gibbs_hidden_step, uniform_rows

__all__ = ["bethe_training_epoch", "positive_phase", "relaxed_training_epoch"]


def positive_phase(X, weights, hidden_bias):
    """Data averages ``<v>``, ``<h>`` and ``<h v^T>`` with ``h ~ p(h | v)``.

    Parameters
    ----------
    X : ndarray or sparse matrix of shape (n_samples, n_visible)
    weights : ndarray of shape (n_hidden, n_visible)
    hidden_bias : ndarray of shape (n_hidden,)

    Returns
    -------
    mean_visible, mean_hidden, mean_hidden_visible : ndarray
        In float64 whatever the dtype of ``X`` (float32 data are summed in
        float64 too, so they give the float64 data's gradient).
    """
    n_samples = X.shape[0]
    hidden = expit(safe_sparse_dot(X, weights.T, dense_output=True) + hidden_bias)
    joint = safe_sparse_dot(X.T, hidden, dense_output=True).T / n_samples
    mean_visible = np.asarray(X.sum(axis=0, dtype=np.float64)).ravel() / n_samples
    return mean_visible, hidden.mean(axis=0), joint


def bethe_training_epoch(
    X,
    batch_slices,
    weights,
    visible_bias,
    hidden_bias,
    messages,
    *,
    learning_rate,
    method,
    damping,
    tol,
    sweeps_per_update,
    hidden_chain=None,
    random_state=None,
):
    """One pass of minibatch gradient ascent over ``X``, parameters in place.

    For each batch: message passing from the persistent ``messages`` (at most
    ``sweeps_per_update`` sweeps), then
    ``W += learning_rate * (<h v^T>_data - <h v^T>_Bethe)`` and likewise for
    the biases (the gradient of the Bethe approximation of the
    log-likelihood, eq. (6) of [1]_).  When ``hidden_chain`` is given, those
    persistent Gibbs chains then take one sweep ``h -> v -> h`` at the updated
    parameters; they do not enter the gradient.

    Parameters
    ----------
    X : ndarray or sparse matrix of shape (n_samples, n_visible)
    batch_slices : list of slice
        The minibatches, in order.
    weights, visible_bias, hidden_bias : ndarray of float64
        Parameters, updated in place (pass copies to keep the originals).
    messages : tuple of two ndarrays
        Persistent messages (never modified in place).
    learning_rate, method, damping, tol, sweeps_per_update
        As in :class:`~sklearn_meanfield.BetheRBM`.
    hidden_chain : ndarray of shape (n_chains, n_hidden) or None, default=None
        Hidden states of persistent Gibbs chains (not modified in place).
    random_state : RandomState or None, default=None
        Drives the chains; needed when ``hidden_chain`` is given.

    Returns
    -------
    messages : tuple of two ndarrays
        The messages after the last step.
    hidden_chain : ndarray or None
        The chains' hidden states after the last step.
    n_unconverged : int
        Steps whose message passing did not settle within the sweeps allowed.
    """
    n_unconverged = 0
    for batch in batch_slices:
        solution = bethe_solve(
            weights,
            visible_bias,
            hidden_bias,
            method=method,
            messages=messages,
            damping=damping,
            tol=tol,
            max_sweeps=sweeps_per_update,
            compute_log_z=False,
        )
        messages = solution.messages
        n_unconverged += not solution.converged
        pos_v, pos_h, pos_joint = positive_phase(X[batch], weights, hidden_bias)
        weights += learning_rate * (pos_joint - solution.mean_hidden_visible)
        visible_bias += learning_rate * (pos_v - solution.mean_visible)
        hidden_bias += learning_rate * (pos_h - solution.mean_hidden)
        if hidden_chain is not None:
            hidden_chain = gibbs_hidden_step(
                hidden_chain, weights, visible_bias, hidden_bias, random_state
            )
    return messages, hidden_chain, n_unconverged


def relaxed_training_epoch(
    X,
    batch_slices,
    weights,
    visible_bias,
    hidden_bias,
    state,
    *,
    learning_rate,
    damping,
    tol,
    sweeps_per_update,
    hidden_chain=None,
    random_state=None,
    count_unconverged=True,
    dtype=None,
):
    """:func:`bethe_training_epoch` with the relaxed (TAP) negative phase.

    Per batch: at most ``sweeps_per_update`` sweeps of the TAP iteration from
    the persistent means ``state`` (:func:`~._relaxed.augmented_sweeps`), then
    ``W += learning_rate * (<h v^T>_data - m_h m_v^T - W * var_h var_v^T)``
    and the bias steps.  The update is arranged for BLAS: the parameters
    live in one bias-augmented matrix ``[[W, c], [b^T, 0]]`` for the epoch,
    so the sweeps (:func:`~._relaxed.augmented_sweeps`) and the positive
    phase need no bias additions, and the data term, the rank-one
    ``m_h m_v^T`` and both bias steps are one matrix product accumulated into
    it in place (``beta = 1``); the Onsager term is one elementwise product.
    An update costs a few passes over ``W``, as a PCD update does.  The
    chains step on the augmented matrix too
    (:func:`~._sampling.augmented_gibbs_step`), with their uniforms drawn in
    blocks (:func:`~._sampling.uniform_rows`): the same draws, in the same
    order, as :func:`~._sampling.gibbs_hidden_step` after every update, with
    fewer generator calls.  At 64 x 64 numpy's per-call overhead is most of
    the cost, hence the work arrays made once per epoch and the positional
    outputs.

    The epoch computes in ``dtype`` (by default that of ``weights``): with
    float32 (data in float32, as BernoulliRBM computes) every work array,
    sweep, product and step is float32, with no upcast; float64 keeps the
    float64 arithmetic.  The parameters enter the work matrix at the start
    and leave it at the end, so float64 parameters trained in float32 hold
    float32 values exactly.  The data are cast to that dtype batch by
    batch, the chains' uniforms stay the generator's doubles (compared with
    the float32 probabilities exactly), and ``state`` and ``hidden_chain`` may
    come in either dtype.  Nothing here sums more than ``n_visible + 1``
    terms (the data enter a batch at a time, the update is applied per
    batch), so float32 rounding stays near ``1e-7`` relative per step; the
    TAP ``log Z`` and the final solve are not part of the epoch and stay
    float64 (:func:`~._relaxed.relaxed_solve`).

    Parameters
    ----------
    X : ndarray or sparse matrix of shape (n_samples, n_visible)
    batch_slices : list of slice
    weights, visible_bias, hidden_bias : ndarray of float64 or float32
        Parameters, updated in place (at the end of the epoch).
    state : tuple of two ndarrays
        Persistent means ``(mean_visible, mean_hidden)`` (not modified).
    learning_rate, damping, tol, sweeps_per_update
        As in :class:`~sklearn_meanfield.BetheRBM`.
    hidden_chain : ndarray of shape (n_chains, n_hidden) or None, default=None
    random_state : RandomState or None, default=None
    count_unconverged : bool, default=True
        Measure each update's last sweep for ``n_unconverged``; False saves
        that work (a few per cent at 64 x 64) and returns None for it.
    dtype : {np.float64, np.float32} or None, default=None
        dtype of the computation; None takes that of ``weights``.

    Returns
    -------
    state : tuple of two ndarrays
        The means after the last step, in ``dtype``.
    hidden_chain : ndarray or None
        In ``dtype``.
    n_unconverged : int or None
        Steps whose TAP iteration did not settle within the sweeps allowed.
    """
    lr = float(learning_rate)
    n_unconverged = 0
    n_hidden, n_visible = weights.shape
    if dtype is None:
        dtype = weights.dtype
    dtype = np.float32 if np.dtype(dtype) == np.float32 else np.float64
    augmented = _augmented_matrix(weights, visible_bias, hidden_bias, dtype)
    W = augmented[:n_hidden, :n_visible]
    weights_sq = np.multiply(W, W)
    onsager = np.empty_like(weights_sq)
    visible, hidden_state = np.ones(n_visible + 1, dtype), np.ones(n_hidden + 1, dtype)
    visible[:n_visible], hidden_state[:n_hidden] = state
    m_v, m_h = visible[:n_visible], hidden_state[:n_hidden]
    # The means' variances, kept up to date by the sweeps and shared with the
    # Onsager part of the step (the means do not move in the step).
    var_v = m_v - m_v * m_v
    variances = (var_v, np.empty(n_hidden, dtype))
    workspace = sweep_workspace(n_hidden, n_visible, dtype)
    # One set of work arrays of the step per batch size, made once.
    work = {}
    if hidden_chain is not None:
        # The chains on augmented arrays too, [v, 1] and [h, 1], with their
        # uniforms drawn in blocks (the same stream as two draws per step).
        chain_visible, chain_hidden = _augmented_chains(hidden_chain, n_visible, dtype)
        uniforms = uniform_rows(
            random_state,
            len(batch_slices),
            hidden_chain.shape[0] * (n_visible + n_hidden),
        )
    for batch in batch_slices:
        delta = augmented_sweeps(
            augmented,
            weights_sq,
            visible,
            hidden_state,
            sweeps_per_update,
            damping,
            variances=variances,
            workspace=workspace,
            track_change=count_unconverged,
        )
        if count_unconverged:
            n_unconverged += not delta < tol
        n_batch = batch.stop - batch.start
        if n_batch not in work:
            work[n_batch] = _step_arrays(n_batch, n_hidden, n_visible, lr, dtype)
        data = X[batch].toarray() if sp.issparse(X) else X[batch]
        _relaxed_step(
            augmented,
            weights_sq,
            onsager,
            data,
            (m_v, hidden_state),
            variances,
            lr,
            work[n_batch],
        )
        if hidden_chain is not None:
            augmented_gibbs_step(chain_visible, chain_hidden, augmented, next(uniforms))
    if hidden_chain is not None:
        hidden_chain = chain_hidden[:, :n_hidden].copy()
    weights[...] = W
    visible_bias[...] = augmented[n_hidden, :n_visible]
    hidden_bias[...] = augmented[:n_hidden, n_visible]
    return (
        (m_v.copy(), m_h.copy()),
        hidden_chain,
        n_unconverged if count_unconverged else None,
    )


def _augmented_matrix(weights, visible_bias, hidden_bias, dtype):
    """``[[W, c], [b^T, 0]]`` in ``dtype``, C-contiguous.

    With the means and data rows carrying a trailing 1, the biases ride
    along in every product: the sweeps, the positive phase and the update.
    """
    n_hidden, n_visible = weights.shape
    augmented = np.zeros((n_hidden + 1, n_visible + 1), dtype)
    augmented[:n_hidden, :n_visible] = weights
    augmented[:n_hidden, n_visible] = hidden_bias
    augmented[n_hidden, :n_visible] = visible_bias
    return augmented


def _augmented_chains(hidden_chain, n_visible, dtype):
    """Work arrays ``[v, 1]`` and ``[h, 1]`` of the persistent chains."""
    n_chains, n_hidden = hidden_chain.shape
    chain_visible = np.ones((n_chains, n_visible + 1), dtype)
    chain_hidden = np.ones((n_chains, n_hidden + 1), dtype)
    chain_hidden[:, :n_hidden] = hidden_chain
    return chain_visible, chain_hidden


def _relaxed_step(augmented, weights_sq, onsager, data, means, variances, lr, work):
    """One gradient step on ``augmented`` in place, at the means of the sweeps.

    ``W += lr (<h v^T>_data - m_h m_v^T - W * var_h var_v^T)`` and the bias
    steps: rows ``[data, 1]`` and one row ``[m_v, 1]`` on the right; on the
    left the data rows' hidden probabilities weighted ``lr / n`` and the
    model row ``[m_h, 1]`` weighted ``-lr``, so that one product adds the
    data and model terms to ``W``, ``b`` and ``c`` together; the Onsager
    term scales ``W`` first.  ``weights_sq`` is brought up to date;
    ``means`` are ``m_v`` and ``[m_h, 1]``; ``onsager`` is a work array of
    the shape of ``W``; ``work`` comes from :func:`_step_arrays` for this
    batch size.
    """
    n_hidden = weights_sq.shape[0]
    mean_visible, hidden_state = means
    var_v, var_h = variances
    left_t, right_t, right_batch, right_data, right_model, data_hidden, left_model = (
        work
    )
    n_batch = right_batch.shape[0]
    right_data[...] = data
    right_model[...] = mean_visible
    np.matmul(right_batch, augmented[:n_hidden].T, data_hidden)
    expit(data_hidden, data_hidden)
    np.multiply(data_hidden, lr / n_batch, data_hidden)
    np.multiply(hidden_state, -lr, left_model)
    # W *= 1 - lr var_h var_v^T (the Onsager part of the negative phase)
    np.multiply.outer(-lr * var_h, var_v, out=onsager)
    onsager += 1.0
    W = augmented[:n_hidden, : weights_sq.shape[1]]
    W *= onsager
    # The augmented matrix is C-contiguous: its transpose is F-contiguous
    # and dgemm accumulates into it without a copy.
    _gemm_accumulate(right_t, left_t, augmented.T)
    np.multiply(W, W, weights_sq)


def _step_arrays(n_batch, n_hidden, n_visible, learning_rate, dtype=np.float64):
    """Work arrays of the relaxed step for batches of ``n_batch`` rows.

    Returns the transposes of ``left`` (``n_batch + 1`` rows of
    ``n_hidden + 1``) and ``right`` (``n_batch + 1`` rows of ``[x, 1]``),
    then views: the data rows of ``right``, their first ``n_visible``
    columns, the model row's ``n_visible`` columns, the data block of
    ``left`` and the model row of ``left``.  The constant column of the
    data rows of ``left`` (``learning_rate / n_batch``) is set here.  All
    in ``dtype``.
    """
    left = np.empty((n_batch + 1, n_hidden + 1), dtype)
    left[:n_batch, n_hidden] = learning_rate / n_batch
    right = np.ones((n_batch + 1, n_visible + 1), dtype)
    return (
        left.T,
        right.T,
        right[:n_batch],
        right[:n_batch, :n_visible],
        right[n_batch, :n_visible],
        left[:n_batch, :n_hidden],
        left[n_batch],
    )


def _gemm_accumulate(a, b_t, c):
    """``c += a @ b_t.T`` in place (``c`` F-contiguous, float64 or float32 as
    ``a`` and ``b_t``)."""
    gemm = sgemm if c.dtype == np.float32 else dgemm
    out = gemm(1.0, a, b_t, beta=1.0, c=c, trans_b=1, overwrite_c=1)
    # f2py hands c back when it needed no copy.
    if out is not c and not np.may_share_memory(out, c):  # pragma: no cover
        c[...] = out

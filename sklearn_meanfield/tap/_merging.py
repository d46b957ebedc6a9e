"""Identical training points merged into one weighted site.

Both estimators fit a data set with repeated rows as its weighted form
(scikit-learn's sample-weight equivalence): identical (inputs, label) pairs
are found by an exact hash of their bits, merged into one site, and each
merged point's leave-one-out removes its own share of the site.
"""

from typing import NamedTuple

import numpy as np
from scipy import sparse

__all__ = ["MergedPoints", "merge_identical_points", "partial_cavities"]


class MergedPoints(NamedTuple):
    """Identical points merged into weighted sites
    (:func:`merge_identical_points`).

    Attributes
    ----------
    rows : ndarray of int
        One representative per group, into X, in order of first occurrence.
    site_weights : ndarray
        The groups' total weights.
    kept : ndarray of int
        The samples considered (``keep``).
    group : ndarray of int
        Each kept sample's group.
    share : ndarray
        Each kept sample's weight over its group's.
    """

    rows: np.ndarray
    site_weights: np.ndarray
    kept: np.ndarray
    group: np.ndarray
    share: np.ndarray


def merge_identical_points(X, y_index, keep, weights):
    """Identical points (same inputs, same label) as one weighted site.

    For the shells: both estimators' fits see a repeated data set as its
    weighted form (scikit-learn's sample-weight equivalence), and each
    merged point's leave-one-out removes only its own share of the site
    (:func:`partial_cavities`).

    ``k`` copies of a sample are one site of weight ``k`` at EP's symmetric
    fixed point (:func:`~sklearn_meanfield.tap._ep.expectation_propagation`),
    so merging them changes the fixed point not at all, and a repeated data
    set is then fitted exactly as its weighted form (parallel EP on the
    copies' strongly coupled sites needs more sweeps, and may stall where the
    weighted form converges).

    Parameters
    ----------
    X : ndarray or sparse matrix of shape (n_samples, n_features)
        Numeric inputs (for a kernel: the rows the kernel is computed from;
        other kinds of inputs are not merged by this function).
    y_index : ndarray of int of shape (n_samples,)
        Class index of each sample.
    keep : ndarray of int
        The samples to consider (positive weight), in order.
    weights : ndarray of shape (n_samples,) or None
        Sample weights (None: all one).

    Returns
    -------
    MergedPoints or None
        None when the kept samples ``keep`` are distinct.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield.tap._merging import merge_identical_points
    >>> X = np.array([[1.0, 2.0], [0.5, 0.0], [1.0, 2.0], [1.0, 2.0]])
    >>> merged = merge_identical_points(X, np.array([1, 0, 1, 0]), np.arange(4), None)
    >>> merged.rows.tolist(), merged.site_weights.tolist()
    ([0, 1, 3], [2.0, 1.0, 1.0])
    >>> merged.group.tolist(), merged.share.tolist()
    ([0, 1, 0, 2], [0.5, 1.0, 0.5, 1.0])
    """
    if len(keep) < 2:
        return None
    inverse = _identical_groups(X[keep], y_index[keep])
    if inverse is None:
        return None
    n_groups = int(inverse.max()) + 1
    kept_weights = np.ones(len(keep)) if weights is None else weights[keep]
    totals = np.bincount(inverse, weights=kept_weights, minlength=n_groups)
    first = np.full(n_groups, len(keep))
    np.minimum.at(first, inverse, np.arange(len(keep)))
    return MergedPoints(
        rows=keep[first],
        site_weights=totals,
        kept=keep,
        group=inverse,
        share=kept_weights / totals[inverse],
    )


def _identical_groups(rows, labels):
    """Each row's group of identical (rows, label), numbered in order of
    first occurrence, or None when all rows are distinct."""
    if sparse.issparse(rows):
        rows = sparse.csr_array(rows)
        rows.eliminate_zeros()
        rows.sort_indices()
    # Exact integer hashes of the rows' bits (+0.0 turns -0.0 into 0.0):
    # only rows whose hashes collide are compared.
    keys = _row_hashes(rows, labels)
    _, key_index, key_counts = np.unique(keys, return_inverse=True, return_counts=True)
    candidates = np.flatnonzero(key_counts[key_index] > 1)
    if len(candidates) == 0:
        return None
    inverse = np.arange(len(labels))  # each sample its own group ...
    if sparse.issparse(rows):
        seen = {}
        for j in candidates:
            part = slice(rows.indptr[j], rows.indptr[j + 1])
            key = (
                int(labels[j]),
                rows.indices[part].tobytes(),
                (rows.data[part] + 0.0).tobytes(),
            )
            inverse[j] = seen.setdefault(key, j)
    else:
        # ... except identical candidates, grouped under their first one.
        table = np.column_stack([rows[candidates], labels[candidates]]) + 0.0
        _, first, groups = np.unique(
            table, axis=0, return_index=True, return_inverse=True
        )
        inverse[candidates] = candidates[first[groups.ravel()]]
    # Groups numbered in order of their first sample.
    _, inverse = np.unique(inverse, return_inverse=True)
    if int(inverse.max()) + 1 == len(labels):
        return None
    return inverse


def _row_hashes(rows, labels):
    """A 64-bit integer hash of each row's float bits and label.

    Integer arithmetic (wrapping modulo 2**64) is exact in any order, so
    identical rows get identical hashes whatever the memory layout.
    """
    n_rows, n_cols = rows.shape
    multipliers = np.random.RandomState(0).randint(
        1, 2**62, size=n_cols + 1, dtype=np.uint64
    ) * np.uint64(2) + np.uint64(1)
    if sparse.issparse(rows):
        bits = (rows.data + 0.0).view(np.uint64)
        contributions = np.append(
            bits * multipliers[rows.indices] + multipliers[(rows.indices + 7) % n_cols],
            np.uint64(0),
        )
        starts = rows.indptr[:-1]
        sums = np.add.reduceat(contributions, starts)
        hashes = np.where(np.diff(rows.indptr) > 0, sums, np.uint64(0))
    else:
        bits = np.ascontiguousarray(rows + 0.0).view(np.uint64)
        hashes = (bits * multipliers[:n_cols]).sum(axis=1, dtype=np.uint64)
    return hashes + labels.astype(np.uint64) * multipliers[n_cols]


def partial_cavities(solution, group, share):
    """Cavity of each merged point: its share of its group's site removed.

    Parameters
    ----------
    solution : TAPSolution
        The solution of the merged points.
    group, share : ndarray of shape (n_kept,)
        From :func:`merge_identical_points`.

    Returns
    -------
    cavity_mean, cavity_var : ndarray of shape (n_kept,)
    """
    if solution.fixed_cavity_variance:
        # Mean-field closures: the reaction term of the point's share.
        reaction = solution.mean - solution.cavity_mean  # lambda * alpha
        return (
            solution.mean[group] - share * reaction[group],
            solution.cavity_var[group],
        )
    var = solution.var[group]
    cavity_tau = 1.0 / var - share * solution.tau[group]
    cavity_nu = solution.mean[group] / var - share * solution.nu[group]
    # A best iterate that did not converge may leave no proper cavity: the
    # posterior marginal then stands in (as in the core's whole-site case).
    valid = cavity_tau > 0
    cavity_var = np.where(valid, 1.0 / np.where(valid, cavity_tau, 1.0), var)
    cavity_mean = np.where(valid, cavity_nu * cavity_var, solution.mean[group])
    return cavity_mean, cavity_var

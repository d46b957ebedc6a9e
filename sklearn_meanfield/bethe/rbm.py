"""BetheRBM: a Bernoulli RBM trained and scored by the Bethe approximation."""

import hashlib
import warnings
from contextlib import contextmanager
from numbers import Integral, Real
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from scipy.special import expit
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
    _fit_context,
)
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state, gen_even_slices
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.extmath import safe_sparse_dot
from sklearn.utils.validation import check_is_fitted, validate_data

from .._base import atomic_fit
from .._memory import check_memory
from .._progress import CallbackSupportMixin, fit_progress
from ._exact import free_energy
from ._learning import bethe_training_epoch, relaxed_training_epoch
from ._message_passing import METHODS as _MESSAGE_METHODS
from ._message_passing import bethe_solve, cold_messages, stability
from ._multistate import estimate_log_partition
from ._relaxed import cold_state, relaxed_solve, relaxed_stability
from ._sampling import sample_bernoulli

__all__ = ["BetheRBM"]

_FALLBACK_DAMPING = 0.5
_DTYPES = (np.float64, np.float32)
_METHODS = ("relaxed", *_MESSAGE_METHODS)
# sweeps_per_update="auto": the relaxed iteration contracts by about 0.7 per
# sweep on trained models, so 6 sweeps shrink the staleness of the persistent
# means about tenfold per update; the factor-graph forms stop at tol sooner.
_AUTO_SWEEPS = {"relaxed": 6, "bipartite": 10, "gaussian": 10}
_LOG_PARTITION = ("auto", "single")
# Rows of the training data that start the multi-state log Z of fit: evenly
# spaced over the data (deterministic, no random draw).  More rows find no
# further modes: on digits models 20 rows gave log Z within 0.12 nat of 50.
_N_SEED_ROWS = 20


def _cold(method, n_hidden, n_visible):
    """The starting messages of ``method``: zero messages, or means 1/2."""
    if method == "relaxed":
        return cold_state(n_hidden, n_visible)
    return cold_messages(n_hidden, n_visible)


# Float64 arrays of the weights' shape a fit holds at once: (factor graph,
# relaxed).  Weights, gradient and two temporaries of the update; the factor
# graph adds two messages per edge and their two updates.
_EDGE_ARRAYS = (8, 4)


def _fits(method, messages, n_hidden, n_visible):
    """Whether ``messages`` have the shapes ``method`` needs (a model refitted
    or resumed with another ``method`` starts cold)."""
    shapes = [np.shape(m) for m in messages]
    if method == "relaxed":
        return shapes == [(n_visible,), (n_hidden,)]
    return shapes == [(n_hidden, n_visible)] * 2


def _stability(method, params, messages):
    """``stability_`` of the fixed point ``messages`` of ``method``."""
    if method == "relaxed":
        return relaxed_stability(params[0], messages)
    return stability(*params, messages, method=method)


class _FittedState(NamedTuple):
    """The fitted attributes, bound together at the end of fit and partial_fit."""

    components_: np.ndarray
    intercept_visible_: np.ndarray
    intercept_hidden_: np.ndarray
    messages_: tuple
    stability_: float
    h_samples_: np.ndarray
    log_partition_: float | None


_FITTED = _FittedState._fields
_PARAMETERS = ("components_", "intercept_visible_", "intercept_hidden_")


def _parameter_digest(params):
    """A digest of the parameter arrays (values, shapes and dtypes)."""
    digest = hashlib.blake2b(digest_size=16)
    for array in params:
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _check_unit_interval(X, method):
    """Raise a ValueError unless every value of ``X`` lies in [0, 1].

    Parameters
    ----------
    X : ndarray or sparse matrix
        Validated data.
    method : str
        The BetheRBM method that needs [0, 1], named in the message.
    """
    values = X.data if sp.issparse(X) else X
    if values.size == 0:
        return
    low, high = float(np.min(values)), float(np.max(values))
    if low < 0.0 or high > 1.0:
        what = "Negative values in data" if low < 0.0 else "Values above 1 in data"
        # Plain MinMaxScaler is the trap here: it maps the data it was fitted
        # on into [0, 1], but held-out data can land outside.
        raise ValueError(
            f"{what} passed to BetheRBM.{method}: it needs values in [0, 1] "
            f"(binary units or their probabilities), where the Bethe "
            f"log-likelihood is defined; got values in [{low:.4g}, {high:.4g}]. "
            "Binarise the data (sklearn.preprocessing.Binarizer) or rescale it "
            "with MinMaxScaler(clip=True): without clip=True, data the scaler "
            "was not fitted on (held-out folds, new samples) can fall outside "
            "[0, 1]. transform and gibbs accept any values."
        )


@contextmanager
def _rng_restored_on_error(rng):
    """Give ``rng`` back its state if the block raises (all-or-nothing fits)."""
    state = rng.get_state()
    try:
        yield
    except BaseException:
        rng.set_state(state)
        raise


class BetheRBM(
    CallbackSupportMixin,
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
    BaseEstimator,
):
    """Bernoulli RBM learned and scored with the Bethe approximation.

    A drop-in for :class:`sklearn.neural_network.BernoulliRBM` (same
    parameters, attributes and methods) whose negative phase comes from belief
    propagation instead of persistent Gibbs chains: gradients are
    deterministic, and the Bethe free energy gives an estimate of ``log Z`` and
    therefore of the log-likelihood itself (:meth:`score_samples`), not only a
    pseudo-likelihood.  The messages persist from one parameter update to the
    next, so an update costs a few sweeps.  With the default
    ``method="relaxed"`` (the large-N form of belief propagation on the dense
    RBM, i.e. the second-order TAP equations) a sweep is four matrix-vector
    products, and an update costs a few passes over the weights, as a
    persistent contrastive divergence update does.

    :meth:`transform` and :meth:`gibbs` accept any values, as BernoulliRBM's
    do (``p(h | v)`` is defined for any real ``v``), so held-out data scaled a
    little outside [0, 1] pass through a pipeline.  :meth:`fit`,
    :meth:`partial_fit` and :meth:`score_samples` need values in [0, 1], where
    the Bethe log-likelihood is defined, and raise ``ValueError`` otherwise.
    float32 data give float32 parameters and outputs, as in BernoulliRBM, and
    with ``method="relaxed"`` a float32 training (BernoulliRBM computes in
    float32 too); ``log Z``, :meth:`score_samples` and the final solve run in
    float64.

    Parameters
    ----------
    n_components : int, default=256
        Number of binary hidden units.
    learning_rate : float, default=0.1
        Step size of the gradient ascent on the Bethe log-likelihood.
    batch_size : int, default=10
        Number of examples per minibatch, and number of persistent chains in
        :attr:`h_samples_`.
    n_iter : int, default=10
        Number of passes (epochs) over the training data.
    verbose : int, default=0
        0 is silent; 1 prints, per epoch, the Bethe estimate of the mean
        log-likelihood of the training data and the stability factor.  With
        scikit-learn >= 1.9, ``set_callbacks`` (e.g. ``sklearn.callback.
        ProgressBar()``) also follows the epochs, and a callback may stop the
        training early: it ends after the epoch during which the stop was
        asked, with the model of that many epochs.
    random_state : int, RandomState instance or None, default=None
        Initial weights, the persistent chains of :attr:`h_samples_` and the
        sampling of :meth:`gibbs`.  The gradients themselves are
        deterministic.
    method : {"relaxed", "bipartite", "gaussian"}, default="relaxed"
        Form of message passing.  ``"relaxed"``: one mean per unit with an
        Onsager reaction term (the second-order TAP equations of Gabrie,
        Tramel and Krzakala, the large-N limit of ``"bipartite"``); a sweep is
        four matrix-vector products.  ``"bipartite"``: messages both ways on
        every edge (two arrays of the weights' shape), closer to exact at the
        large weights of trained RBMs.  ``"gaussian"``: eq. (3) of Huang and
        Toyoizumi.  See :ref:`bethe_rbm`.
    damping : float in [0, 1), default=0.0
        Fraction of the old message kept at each update.  Persistent messages
        track the slowly changing parameters without damping; a full solve
        that fails to converge is retried with damping 0.5, which restores
        convergence near the instability.
    sweeps_per_update : int or "auto", default="auto"
        Message-passing sweeps from the previous messages before each
        gradient step: exactly this many for ``"relaxed"``, at most this many
        for the others (they stop at ``tol``).  Fewer sweeps are cheaper but
        give a staler negative phase; too few make the training erratic.
        ``"auto"`` is 6 for ``"relaxed"`` and 10 for the others.
    tol : float, default=1e-7
        Message passing stops when no message changes by more than ``tol``.
    max_sweeps : int, default=1000
        Most sweeps of a full solve (end of fit, :meth:`log_partition_function`,
        :meth:`score_samples`).
    log_partition : {"auto", "single"}, default="auto"
        The ``log Z`` of :meth:`score_samples`.  ``"single"``: the Bethe (TAP
        for ``"relaxed"``) ``log Z`` of the one fixed point the persistent
        messages reach; cheap, but low on a trained RBM, which is multimodal.
        ``"auto"``: exact on small models, else summed over several fixed
        points with loop corrections (see Notes), computed once at the end
        of :meth:`fit` into :attr:`log_partition_`; it does not depend on
        ``method``.  The user guide (:ref:`bethe_rbm`) gives its accuracy.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        Weight matrix ``W``, in the dtype of the training data (float32 or
        float64).
    intercept_hidden_ : ndarray of shape (n_components,)
        Biases of the hidden units.
    intercept_visible_ : ndarray of shape (n_features,)
        Biases of the visible units.
    h_samples_ : ndarray of shape (batch_size, n_components)
        Hidden states (0.0 or 1.0, dtype of :attr:`components_`) of
        ``batch_size`` persistent Gibbs chains: samples of the hidden units
        under the model, as BernoulliRBM's.  The chains start at zero and take
        one sweep ``h -> v -> h`` after every parameter update, at the updated
        parameters (so one per minibatch in :meth:`fit`, one per
        :meth:`partial_fit` call).  Unlike BernoulliRBM's they do not drive
        the learning (the negative phase comes from the messages); they are
        kept for sampling, e.g. ``expit(h_samples_ @ components_ +
        intercept_visible_)`` gives visible probabilities of model samples.
    log_partition_ : float or None
        The ``log Z`` estimate of ``log_partition`` at the fitted parameters
        (float64), used by :meth:`score_samples`.  None after
        :meth:`partial_fit` with ``log_partition="auto"``: the multi-state
        estimate costs many parameter updates, so it is then computed on
        each call of :meth:`score_samples` or :meth:`log_partition_function`
        (deterministically, from the fitted state alone: the persistent
        state, the chains and 20 rows of the last batch), as it is when the
        parameters were changed by hand since.
    stability_ : float
        Growth factor of the message-variance iteration (eq. (5) of the paper)
        at the fixed point reached after the last fit step.  Below 1 the Bethe
        solution is stable; above 1 it is not, and the estimates are
        unreliable.  For ``"relaxed"`` its large-N limit, the squared largest
        singular value of ``diag(var_h) W**2 diag(var_v)`` (Plefka's
        convergence condition of the TAP equations, the de Almeida-Thouless
        line).
    messages_ : tuple of two ndarrays
        The persistent messages (float64), kept to warm-start later solves:
        two arrays of shape (n_components, n_features) for ``"bipartite"``
        and ``"gaussian"``; for ``"relaxed"`` the means ``(m_v, m_h)`` of
        shapes (n_features,) and (n_components,).
    random_state_ : RandomState
        The generator of the chains and of :meth:`gibbs`.
    n_features_in_ : int
        Number of features seen during :term:`fit`.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during :term:`fit`, when they are all strings.

    See Also
    --------
    sklearn.neural_network.BernoulliRBM : The same model, learned by
        persistent contrastive divergence.

    Notes
    -----
    :meth:`score_samples` differs from BernoulliRBM's on purpose.
    BernoulliRBM returns a pseudo-likelihood: ``n_features`` times the log
    conditional probability of one randomly chosen visible unit given the
    others, a random proxy that needs no ``log Z``.  BetheRBM returns the
    log-likelihood ``log p(v) = -F(v) - log Z``: the free energy ``F(v)`` is
    exact and ``log Z`` is :attr:`log_partition_` (see ``log_partition``:
    exact on small models, else the Bethe/TAP estimate summed over fixed
    points with loop corrections), so the error is the same constant for
    every sample and the result is deterministic.  The two numbers are on
    different scales and cannot be compared with each other.  Units are {0, 1} as in
    BernoulliRBM; internally messages use the paper's +-1 spins and the
    constant of the change of variables is carried into ``log Z``.

    ``log_partition="auto"`` enumerates the smaller layer when
    ``2**min(n_components, n_features) * max(n_components, n_features) <=
    2**22``.  Otherwise it sums, over the distinct TAP fixed points reached
    from the persistent fixed point, the persistent chains and 20 evenly
    spaced training rows, the TAP ``log Z`` of each with its loop correction
    ``-1/2 log det(I - B)`` (Watanabe and Fukumizu), with 3 hidden units
    clamped when there are at most 32 (Weller and Jebara):
    :func:`~sklearn_meanfield.diagnostics.rbm_log_partition` with
    ``method="bethe-multi"`` and ``bethe_form="relaxed"`` computes the same
    kind of estimate for any RBM.

    Every fit and partial_fit is all-or-nothing: an exception (an interrupt,
    a ``MemoryError``) leaves the estimator, and the state of
    :attr:`random_state_`, as they were.

    References
    ----------
    .. [1] H. Huang and T. Toyoizumi, "Advanced mean field theory of the
       restricted Boltzmann machine", Phys. Rev. E 91, 050101(R) (2015).
    .. [2] M. Gabrie, E. W. Tramel and F. Krzakala, "Training restricted
       Boltzmann machines via the Thouless-Anderson-Palmer free energy",
       Advances in Neural Information Processing Systems 28 (2015).
    .. [3] M. Mezard, "Mean-field message-passing equations in the Hopfield
       model and its generalizations", Phys. Rev. E 95, 022117 (2017).
    .. [4] Y. Watanabe and K. Fukumizu, "Graph zeta function in the Bethe free
       energy and loopy belief propagation", Advances in Neural Information
       Processing Systems 22 (2009).
    .. [5] A. Weller and T. Jebara, "Clamping variables and approximate
       inference", Advances in Neural Information Processing Systems 27
       (2014).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_meanfield import BetheRBM
    >>> X = np.array([[0, 0, 0], [0, 1, 1], [1, 0, 1], [1, 1, 1]])
    >>> model = BetheRBM(n_components=2, random_state=0).fit(X)
    >>> model.transform(X).shape
    (4, 2)
    >>> bool(model.stability_ < 1)
    True
    >>> # log p(v) sums to (nearly) one over all 8 states of 3 visible units.
    >>> states = np.array([[i >> k & 1 for k in range(3)] for i in range(8)])
    >>> round(float(np.exp(model.score_samples(states)).sum()), 2)
    1.0
    """

    _parameter_constraints: dict = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "n_iter": [Interval(Integral, 0, None, closed="left")],
        "verbose": ["verbose"],
        "random_state": ["random_state"],
        "method": [StrOptions(set(_METHODS))],
        "damping": [Interval(Real, 0, 1, closed="left")],
        "sweeps_per_update": [
            Interval(Integral, 1, None, closed="left"),
            StrOptions({"auto"}),
        ],
        "tol": [Interval(Real, 0, None, closed="left")],
        "max_sweeps": [Interval(Integral, 1, None, closed="left")],
        "log_partition": [StrOptions(set(_LOG_PARTITION))],
    }

    def __init__(
        self,
        n_components=256,
        *,
        learning_rate=0.1,
        batch_size=10,
        n_iter=10,
        verbose=0,
        random_state=None,
        method="relaxed",
        damping=0.0,
        sweeps_per_update="auto",
        tol=1e-7,
        max_sweeps=1000,
        log_partition="auto",
    ):
        self.n_components = n_components
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.n_iter = n_iter
        self.verbose = verbose
        self.random_state = random_state
        self.method = method
        self.damping = damping
        self.sweeps_per_update = sweeps_per_update
        self.tol = tol
        self.max_sweeps = max_sweeps
        self.log_partition = log_partition

    @property
    def _n_features_out(self):
        """Number of transformed output features (hidden units)."""
        return self.components_.shape[0]

    # ------------------------------------------------------------------ inference

    def _validate(self, X, reset, unit_interval=None):
        """Validate ``X`` (float64 or float32, CSR if sparse).

        ``unit_interval`` names the calling method when it needs values in
        [0, 1]; None accepts any values.
        """
        X = validate_data(self, X, accept_sparse="csr", dtype=_DTYPES, reset=reset)
        if unit_interval is not None:
            _check_unit_interval(X, unit_interval)
        return X

    def transform(self, X):
        """Hidden unit activation probabilities ``P(h = 1 | v = X)``.

        Defined for any real values, as in BernoulliRBM (data scaled on other
        samples may fall a little outside [0, 1]).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Values of the visible layer.

        Returns
        -------
        h : ndarray of shape (n_samples, n_components)
            float32 when both ``X`` and the fitted parameters are float32.
        """
        check_is_fitted(self)
        X = self._validate(X, reset=False)
        return self._mean_hiddens(X)

    def _mean_hiddens(self, v):
        """``P(h = 1 | v)`` for visible values ``v`` (no validation)."""
        p = safe_sparse_dot(v, self.components_.T, dense_output=True)
        return expit(p + self.intercept_hidden_)

    def _sample_hiddens(self, v, rng):
        """Boolean draws of ``h ~ p(h | v)`` (as BernoulliRBM's)."""
        return sample_bernoulli(self._mean_hiddens(v), rng)

    def _sample_visibles(self, h, rng):
        """Boolean draws of ``v ~ p(v | h)`` (as BernoulliRBM's)."""
        return sample_bernoulli(
            expit(h @ self.components_ + self.intercept_visible_), rng
        )

    def _free_energy(self, v):
        """``F(v) = -log sum_h exp(-E(v, h))``, as in BernoulliRBM."""
        return free_energy(
            v, self.components_, self.intercept_visible_, self.intercept_hidden_
        )

    def gibbs(self, v):
        """Perform one Gibbs sampling step from visible states ``v``.

        Draws ``h ~ p(h | v)`` then ``v' ~ p(v | h)`` with
        :attr:`random_state_`; defined for any real ``v``, as in
        BernoulliRBM.

        Parameters
        ----------
        v : {array-like, sparse matrix} of shape (n_samples, n_features)
            Values of the visible layer to start from.

        Returns
        -------
        v_new : ndarray of shape (n_samples, n_features), dtype bool
            Visible states after one step ``v -> h -> v``.
        """
        check_is_fitted(self)
        v = self._validate(v, reset=False)
        if not hasattr(self, "random_state_"):
            self.random_state_ = check_random_state(self.random_state)
        h = self._sample_hiddens(v, self.random_state_)
        return self._sample_visibles(h, self.random_state_)

    def _solve_at(self, params, messages):
        """Full message passing at ``params``, warm-started from ``messages``."""

        def solve(damping):
            if self.method == "relaxed":
                return relaxed_solve(
                    *params,
                    state=messages,
                    damping=damping,
                    tol=self.tol,
                    max_sweeps=self.max_sweeps,
                )
            return bethe_solve(
                *params,
                method=self.method,
                messages=messages,
                damping=damping,
                tol=self.tol,
                max_sweeps=self.max_sweeps,
            )

        solution = solve(self.damping)
        if not solution.converged and self.damping < _FALLBACK_DAMPING:
            # Plain iteration oscillates near the instability; damping
            # usually restores convergence (NOTES.md section 4).
            solution = solve(_FALLBACK_DAMPING)
        return solution

    def _params(self):
        return self.components_, self.intercept_visible_, self.intercept_hidden_

    @staticmethod
    def _seed_rows(X):
        """:data:`_N_SEED_ROWS` evenly spaced rows of ``X``, dense float64."""
        rows = X[np.unique(np.linspace(0, X.shape[0] - 1, _N_SEED_ROWS).astype(int))]
        return np.asarray(rows.toarray() if sp.issparse(rows) else rows, float)

    def _multistate_log_z(self, params, solution, chain, rows):
        """``log Z`` of ``log_partition="auto"`` (:func:`estimate_log_partition`).

        Seeds: the visible means of the persistent fixed point ``solution``,
        those of the persistent chains ``chain`` (model samples) and the
        training ``rows`` (:meth:`_seed_rows` of the data of the last
        :meth:`fit` or :meth:`partial_fit`).  Nothing random is drawn, so the
        value depends on the fitted state only.
        """
        params = [np.asarray(a, dtype=np.float64) for a in params]
        weights, visible_bias, _ = params
        seeds = [
            np.asarray(solution.mean_visible, dtype=np.float64)[np.newaxis],
            expit(np.asarray(chain, dtype=np.float64) @ weights + visible_bias),
        ]
        if rows is not None:
            seeds.append(rows)
        seeds = np.vstack(seeds).astype(np.float64)
        try:
            return estimate_log_partition(*params, seeds)
        except RuntimeError:
            warnings.warn(
                "BetheRBM: no start of the multi-state log Z converged; "
                "log_partition_ is the single fixed point's estimate "
                "(log_partition='single').",
                ConvergenceWarning,
            )
            return float(solution.log_z)

    def log_partition_function(self):
        """The estimate of ``log Z`` that :meth:`score_samples` uses.

        With ``log_partition="auto"``: :attr:`log_partition_`, computed at
        the end of :meth:`fit`; after :meth:`partial_fit` (or when the
        parameters were set by hand) it is computed here, on every call, from
        the fitted state (the last batch's rows as seeds).  With
        ``log_partition="single"``: the Bethe (or TAP) ``log Z`` of one fixed
        point, message passing warm-started from
        :attr:`messages_` and run to convergence.  The fitted state is not
        modified.

        Returns
        -------
        log_z : float
        """
        check_is_fitted(self)
        if self.log_partition == "single":
            return float(self._solve_at(self._params(), self.messages_).log_z)
        stored = getattr(self, "log_partition_", None)
        digest = getattr(self, "_log_partition_digest", None)
        if stored is not None and digest == _parameter_digest(self._params()):
            return float(stored)
        params = [np.asarray(a, dtype=np.float64) for a in self._params()]
        solution = self._solve_at(params, self.messages_)
        rows = getattr(self, "_log_partition_seeds", None)
        return self._multistate_log_z(params, solution, self.h_samples_, rows)

    def score_samples(self, X):
        """Approximate log-likelihood ``log p(v) = -F(v) - log Z``.

        Not BernoulliRBM's pseudo-likelihood (``n_features`` times the log
        probability of one randomly chosen unit given the others, random and
        free of ``log Z``): an estimate of the log-likelihood itself,
        deterministic, whose only approximation is ``log Z``
        (:meth:`log_partition_function`, i.e. :attr:`log_partition_` after
        :meth:`fit`), the same for all samples.  The two are on different
        scales.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Values in [0, 1] (binary units or their probabilities).

        Returns
        -------
        log_likelihood : ndarray of shape (n_samples,)
            Computed in float64; float32 when ``X`` and the fitted parameters
            are float32.

        Raises
        ------
        ValueError
            If ``X`` has values outside [0, 1].
        """
        check_is_fitted(self)
        X = self._validate(X, reset=False, unit_interval="score_samples")
        params64 = [np.asarray(a, dtype=np.float64) for a in self._params()]
        log_lik = -free_energy(X, *params64) - self.log_partition_function()
        return log_lik.astype(np.result_type(X.dtype, self.components_.dtype))

    # ------------------------------------------------------------------ learning

    def _initial_state(self, n_features, rng):
        """Float64 starting parameters, cold messages and chains at zero."""
        self._check_memory(n_features)
        weights = rng.normal(0, 0.01, (self.n_components, n_features))
        params = (weights, np.zeros(n_features), np.zeros(self.n_components))
        messages = _cold(self.method, self.n_components, n_features)
        return params, messages, self._chains()

    def _check_memory(self, n_features):
        """Refuse a model whose weight-shaped arrays would not fit in memory:
        the weights, their gradient and the update's temporaries, and for
        message passing on the factor graph two messages per edge and their
        updates (``_EDGE_ARRAYS``)."""
        arrays = _EDGE_ARRAYS[self.method == "relaxed"]
        check_memory(
            8.0 * arrays * self.n_components * n_features,
            f"BetheRBM(n_components={self.n_components}, method={self.method!r}) "
            f"on {n_features} features",
            "Use fewer hidden units"
            + (", or method='relaxed'" if self.method != "relaxed" else "")
            + ".",
        )

    def _chains(self):
        """Persistent chains at zero, one per row of a batch."""
        return np.zeros((self.batch_size, self.n_components))

    def _resumed_state(self):
        """Float64 copies of the fitted parameters, messages and chains.

        A model whose parameters were set by hand may lack the messages or
        chains: they start cold.
        """
        params = tuple(np.array(a, dtype=np.float64) for a in self._params())
        messages = getattr(self, "messages_", None)
        if messages is None or not _fits(
            self.method, messages, *self.components_.shape
        ):
            messages = _cold(self.method, *self.components_.shape)
        chain = getattr(self, "h_samples_", None)
        chain = self._chains() if chain is None else chain
        return params, messages, np.asarray(chain, dtype=np.float64)

    def _sweeps_per_update(self):
        if self.sweeps_per_update == "auto":
            return _AUTO_SWEEPS[self.method]
        return int(self.sweeps_per_update)

    def _train(self, X, batch_slices, params, messages, chain, rng):
        """One pass over ``batch_slices``; ``params`` (float64) change in place.

        The relaxed form computes in the dtype of ``X``: float32 data train in
        float32, and the float64 arrays then hold float32 values.
        """
        settings = dict(
            learning_rate=float(self.learning_rate),
            damping=float(self.damping),
            tol=float(self.tol),
            sweeps_per_update=self._sweeps_per_update(),
            hidden_chain=chain,
            random_state=rng,
        )
        if self.method == "relaxed":
            messages, chain, _ = relaxed_training_epoch(
                X,
                batch_slices,
                *params,
                messages,
                **settings,
                count_unconverged=False,
                dtype=X.dtype,
            )
        else:
            messages, chain, _ = bethe_training_epoch(
                X, batch_slices, *params, messages, method=self.method, **settings
            )
        return messages, chain

    def _final_state(self, params, messages, chain, dtype, X, lazy=False):
        """The fitted attributes at ``params``: solve, stability, warnings.

        The parameters are cast to ``dtype`` first, so that the messages,
        :attr:`stability_` and :attr:`log_partition_` belong to the stored
        parameters.  Rows of ``X`` (the training data) seed the multi-state
        ``log Z``; with ``lazy`` (:meth:`partial_fit`) that estimate is left
        to its first use.  Returns the state and the seed rows.
        """
        params = tuple(np.asarray(a, dtype=dtype) for a in params)
        solution = self._solve_at(params, messages)
        lam = _stability(self.method, params, solution.messages)
        problems = []
        if not solution.converged:
            problems.append(
                f"message passing did not converge within max_sweeps="
                f"{self.max_sweeps} sweeps at the final parameters"
            )
        if lam > 1.0:
            problems.append(
                f"the Bethe fixed point is unstable (stability_={lam:.3f} > 1)"
            )
        if problems:
            warnings.warn(
                "BetheRBM: "
                + "; ".join(problems)
                + ". The Bethe gradients and log-likelihood may be inaccurate: "
                "lower learning_rate, raise damping or sweeps_per_update, "
                "or use fewer hidden units.",
                ConvergenceWarning,
            )
        chain = chain.astype(dtype)
        rows = self._seed_rows(X)
        if self.log_partition == "single":
            log_z = float(solution.log_z)
        elif lazy:
            log_z = None
        else:
            log_z = self._multistate_log_z(params, solution, chain, rows)
        return _FittedState(*params, solution.messages, lam, chain, log_z), rows

    def _store(self, state, seed_rows):
        # The only place fitted attributes are bound: everything before works
        # on local copies, so an exception leaves the old fit whole (and
        # atomic_fit restores the bindings if one strikes in between).
        for name, value in state._asdict().items():
            setattr(self, name, value)
        # Training rows that seed the multi-state log Z when it is computed
        # on demand (after partial_fit, or parameters set by hand).
        self._log_partition_seeds = seed_rows
        # The parameters log_partition_ belongs to: parameters set by hand
        # after fitting must not be scored with a stale log Z.
        self._log_partition_digest = (
            None
            if state.log_partition_ is None
            else _parameter_digest(state[: len(_PARAMETERS)])
        )

    @_fit_context(prefer_skip_nested_validation=True)
    @atomic_fit
    def fit(self, X, y=None):
        """Fit the model to the data X.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data, values in [0, 1]; float32 data give float32
            parameters.
        y : None
            Ignored.

        Returns
        -------
        self : BetheRBM
            The fitted model.

        Raises
        ------
        ValueError
            If ``X`` has values outside [0, 1].
        """
        X = self._validate(X, reset=True, unit_interval="fit")
        n_samples = X.shape[0]
        rng = check_random_state(self.random_state)
        self.random_state_ = rng
        with _rng_restored_on_error(rng):
            params, messages, chain = self._initial_state(X.shape[1], rng)
            n_batches = int(np.ceil(n_samples / self.batch_size))
            batch_slices = list(
                gen_even_slices(
                    n_batches * self.batch_size, n_batches, n_samples=n_samples
                )
            )
            # With scikit-learn callbacks set (set_callbacks, sklearn >= 1.9)
            # every epoch is a subtask; a callback may stop the training after
            # any epoch.
            with fit_progress(
                self, self.verbose, max_steps=self.n_iter, X=X
            ) as reporter:
                for epoch in range(1, self.n_iter + 1):
                    messages, chain = self._train(
                        X, batch_slices, params, messages, chain, rng
                    )
                    if reporter.enabled(1):
                        message = "epoch %d, Bethe log-likelihood %.3f, stability %.3f"
                        args = (epoch, *self._report(X, params, messages))
                    else:
                        message, args = "epoch %d", (epoch,)
                    if reporter.step(1, message, *args, task_name="epoch"):
                        break
            state, seed_rows = self._final_state(params, messages, chain, X.dtype, X)
        self._store(state, seed_rows)
        return self

    def _report(self, X, params, messages):
        """Training log-likelihood and stability, for the progress line only.

        The full solve starts from the training messages but does not replace
        them, so printing leaves the fit unchanged.
        """
        solution = self._solve_at(params, messages)
        log_lik = -free_energy(X, *params).mean() - solution.log_z
        lam = _stability(self.method, params, solution.messages)
        return log_lik, lam

    @_fit_context(prefer_skip_nested_validation=True)
    @atomic_fit
    def partial_fit(self, X, y=None):
        """Take one gradient step on the batch X.

        The update is computed on copies of the fitted arrays and bound at
        the end, so an exception leaves the previous state intact.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data, values in [0, 1].  On the first call float32 data
            give float32 parameters; later calls keep the parameters' dtype.
        y : None
            Ignored.

        Returns
        -------
        self : BetheRBM
            The fitted model.

        Raises
        ------
        ValueError
            If ``X`` has values outside [0, 1].
        """
        first_pass = not hasattr(self, "components_")
        X = self._validate(X, reset=first_pass, unit_interval="partial_fit")
        if not hasattr(self, "random_state_"):
            self.random_state_ = check_random_state(self.random_state)
        rng = self.random_state_
        with _rng_restored_on_error(rng):
            if first_pass:
                dtype = X.dtype
                params, messages, chain = self._initial_state(X.shape[1], rng)
            else:
                dtype = self.components_.dtype
                params, messages, chain = self._resumed_state()
            messages, chain = self._train(
                X, [slice(0, X.shape[0])], params, messages, chain, rng
            )
            state, seed_rows = self._final_state(
                params, messages, chain, dtype, X, lazy=True
            )
        self._store(state, seed_rows)
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        # fit needs values in [0, 1]
        tags.input_tags.positive_only = True
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags

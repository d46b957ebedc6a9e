"""One small progress reporter shared by every estimator's ``verbose`` option.

It also speaks scikit-learn's callback API (:mod:`sklearn.callback`, added in
scikit-learn 1.9) when it is available: an estimator that inherits
``sklearn.callback.CallbackSupportMixin`` and opens its reporter with
:func:`fit_progress` gets ``set_callbacks`` support (progress bars, monitors)
for every step it reports with :meth:`ProgressReporter.step`.
"""

import sys
import time
from contextlib import contextmanager

try:  # scikit-learn >= 1.9
    from sklearn.callback import CallbackSupportMixin
    from sklearn.callback._callback_support import callback_management_context
except ImportError:  # pragma: no cover - older scikit-learn

    class CallbackSupportMixin:
        """Stand-in without callbacks for scikit-learn before 1.9."""

    callback_management_context = None

__all__ = ["ProgressReporter", "fit_progress"]


class ProgressReporter:
    """Print progress lines of long fits when ``verbose`` is high enough.

    Parameters
    ----------
    verbose : int
        The estimator's ``verbose`` parameter; a message of ``level`` is shown
        when ``verbose >= level``.
    prefix : str
        Shown at the start of every line (usually the estimator's name).
    stream : file-like or None, default=None
        Where to print; None means ``sys.stdout`` at the time of the call, so
        that pytest's ``capsys`` and notebooks capture it.
    estimator : estimator or None, default=None
        The estimator being fitted, passed to scikit-learn callbacks.
    callback_context : sklearn.callback.CallbackContext or None, default=None
        Context of the fit's task; each :meth:`step` becomes one of its
        subtasks.  Set by :func:`fit_progress`.

    Examples
    --------
    >>> from sklearn_meanfield._progress import ProgressReporter
    >>> reporter = ProgressReporter(verbose=1, prefix="Demo")
    >>> reporter(1, "epoch %d, log-likelihood %.2f", 3, -12.5)  # doctest: +ELLIPSIS
    [Demo] epoch 3, log-likelihood -12.50 (...s)
    >>> reporter(2, "not shown at verbose=1")
    """

    def __init__(
        self, verbose, prefix, stream=None, estimator=None, callback_context=None
    ):
        self.verbose = int(verbose or 0)
        self.prefix = prefix
        self.stream = stream
        self.estimator = estimator
        self.callback_context = callback_context
        self._start = time.perf_counter()

    def enabled(self, level=1):
        """Whether messages of ``level`` are shown.

        Parameters
        ----------
        level : int, default=1
            Verbosity level of the message.

        Returns
        -------
        shown : bool
            ``verbose >= level``.

        Examples
        --------
        >>> from sklearn_meanfield._progress import ProgressReporter
        >>> ProgressReporter(verbose=1, prefix="Demo").enabled(2)
        False
        """
        return self.verbose >= level

    def __call__(self, level, message, *args):
        """Print ``message % args`` when ``verbose >= level``."""
        if self.verbose < level:
            return
        text = message % args if args else message
        elapsed = time.perf_counter() - self._start
        stream = self.stream if self.stream is not None else sys.stdout
        print(f"[{self.prefix}] {text} ({elapsed:.1f}s)", file=stream, flush=True)

    def step(self, level, message, *args, task_name="step"):
        """Report one finished step (an epoch, a sweep, a chain iteration).

        The message is printed as by calling the reporter; when the fit has
        scikit-learn callbacks, the step is also a subtask of the fit's task,
        whose begin and end hooks run now.

        Parameters
        ----------
        level : int
            Verbosity level of the printed message.
        message : str
            ``%``-format string.
        *args : tuple
            Values for ``message``.
        task_name : str, default="step"
            Name of the subtask the callbacks see.

        Returns
        -------
        stop : bool
            True when a callback asks the fit to stop.

        Examples
        --------
        >>> from sklearn_meanfield._progress import ProgressReporter
        >>> reporter = ProgressReporter(verbose=0, prefix="Demo")
        >>> reporter.step(1, "epoch %d", 1)
        False
        """
        self(level, message, *args)
        if self.callback_context is None:
            return False
        context = self.callback_context.subcontext(task_name=task_name)
        context.call_on_fit_task_begin(estimator=self.estimator)
        return bool(context.call_on_fit_task_end(estimator=self.estimator))


def _has_callbacks(estimator):
    return callback_management_context is not None and (
        getattr(estimator, "_skl_callbacks", None)
        or hasattr(estimator, "_parent_callback_ctx")
    )


@contextmanager
def fit_progress(estimator, verbose, prefix=None, *, max_steps=None, X=None, y=None):
    """Open the progress reporter of one ``fit``, with callbacks if set.

    Without scikit-learn callbacks on ``estimator`` this yields a plain
    :class:`ProgressReporter`.  With them (``estimator.set_callbacks(...)``
    from ``sklearn.callback.CallbackSupportMixin``, or callbacks propagated by
    a meta-estimator) it opens the fit's callback context, runs the hooks of
    the fit task around the block and of every :meth:`ProgressReporter.step`
    inside it, and tears the callbacks down at the end, even on error.

    Parameters
    ----------
    estimator : estimator
        The estimator being fitted.
    verbose : int
        Its ``verbose`` parameter.
    prefix : str or None, default=None
        Line prefix; None means the estimator's class name.
    max_steps : int or None, default=None
        Number of steps the fit will report, if known (progress bars use it).
    X, y : array-like or None, default=None
        Training data, passed to the fit task's hooks.

    Yields
    ------
    reporter : ProgressReporter
        The reporter to use for the fit.

    Examples
    --------
    >>> from sklearn.base import BaseEstimator
    >>> from sklearn_meanfield._progress import fit_progress
    >>> with fit_progress(BaseEstimator(), verbose=1, prefix="Demo") as reporter:
    ...     stop = reporter.step(1, "epoch %d", 1)  # doctest: +ELLIPSIS
    [Demo] epoch 1 (...s)
    """
    prefix = type(estimator).__name__ if prefix is None else prefix
    if not _has_callbacks(estimator):
        yield ProgressReporter(verbose, prefix, estimator=estimator)
        return
    with callback_management_context(estimator):
        context = estimator._init_callback_context(max_subtasks=max_steps)
        context.call_on_fit_task_begin(estimator=estimator, X=X, y=y)
        yield ProgressReporter(
            verbose, prefix, estimator=estimator, callback_context=context
        )
        context.call_on_fit_task_end(estimator=estimator, X=X, y=y)

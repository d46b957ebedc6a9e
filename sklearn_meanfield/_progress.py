"""One small progress reporter shared by every estimator's ``verbose`` option.

It also speaks scikit-learn's callback API (:mod:`sklearn.callback`, added in
scikit-learn 1.9) when it is available: an estimator that inherits
``sklearn.callback.CallbackSupportMixin`` and opens its reporter with
:func:`fit_progress` gets ``set_callbacks`` support (progress bars, monitors)
for every step it reports with :meth:`ProgressReporter.step`.

Work that runs in joblib workers (chains, restarts, one-vs-rest problems)
reports through a :class:`CallbackTask`: the dispatcher creates one subtask
per unit of work with :meth:`CallbackTask.subtasks` and ships it with the work
(it pickles); the worker runs the hooks.  scikit-learn's own callbacks send
what they see in a worker back to the main process (``ProgressBar`` and
``ScoringMonitor`` do), so a progress bar follows chains running in other
processes.
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

__all__ = ["CallbackTask", "ProgressReporter", "fit_progress"]


def abandoned_on_dask():
    """Whether this code runs in a Dask task whose result nobody wants any more.

    A Dask client cancels the futures of a fit that was interrupted (Ctrl-C)
    or failed, but a task already running on a worker thread cannot be
    killed: it would hold the worker for as long as it runs (minutes for a
    long chain), and the cluster would not start the next fit until then.
    Every step a fit reports asks this question, so a cancelled task stops at
    its next step the way a callback's stop request stops it.

    Returns
    -------
    abandoned : bool
        False outside Dask workers.

    Examples
    --------
    >>> from sklearn_meanfield._progress import abandoned_on_dask
    >>> abandoned_on_dask()  # not on a Dask worker
    False
    """
    distributed = sys.modules.get("distributed")
    if distributed is None:  # Dask never imported: no worker here
        return False
    try:
        worker = distributed.get_worker()
    except ValueError:  # not inside a Dask task
        return False
    try:
        task = worker.state.tasks.get(worker.get_current_task())
    except Exception:  # pragma: no cover - another distributed version
        return False
    return task is None or task.state in ("cancelled", "released", "forgotten")


def _parameters_only(estimator):
    """A copy of ``estimator`` holding its parameters and callbacks, no fit.

    What a :class:`CallbackTask` ships to a worker: the hooks there get an
    estimator of the right class and parameters without the arrays of an
    earlier fit travelling with every task.
    """
    if estimator is None or not hasattr(estimator, "get_params"):
        return estimator
    light = type(estimator).__new__(type(estimator))
    light.__dict__.update(
        {name: getattr(estimator, name) for name in estimator.get_params(deep=False)}
    )
    if hasattr(estimator, "_skl_callbacks"):
        light._skl_callbacks = estimator._skl_callbacks
    return light


class CallbackTask:
    """One task of a fit's scikit-learn callback tree, or nothing.

    Without callbacks (``context`` None) every method does nothing and
    :meth:`step` returns False, so the fitting code calls them
    unconditionally.  A task pickles: the dispatcher creates the subtasks of
    its parallel units of work and passes them to the workers, which run the
    hooks (the estimator travels as a copy of its parameters and callbacks).

    Parameters
    ----------
    context : sklearn.callback.CallbackContext or None, default=None
        The task's context; None when the fit has no callbacks.
    estimator : estimator or None, default=None
        The estimator being fitted, passed to the hooks.

    Examples
    --------
    >>> from sklearn_meanfield._progress import CallbackTask
    >>> task = CallbackTask()  # a fit without callbacks
    >>> [bool(t) for t in task.subtasks(2, "chain")]
    [False, False]
    >>> task.step("iteration")
    False
    """

    def __init__(self, context=None, estimator=None):
        self.context = context
        self.estimator = estimator

    def __bool__(self):
        return self.context is not None

    def __getstate__(self):
        return {
            "context": self.context,
            "estimator": _parameters_only(self.estimator),
        }

    def subtask(self, task_name, max_steps=0):
        """Create one subtask of this task (its hooks are not run yet).

        Parameters
        ----------
        task_name : str
            Name the callbacks see.
        max_steps : int or None, default=0
            Subtasks it will have (None: unknown, 0: a leaf).

        Returns
        -------
        task : CallbackTask

        Examples
        --------
        >>> from sklearn_meanfield._progress import CallbackTask
        >>> bool(CallbackTask().subtask("restart", max_steps=10))
        False
        """
        if self.context is None:
            return self
        return CallbackTask(
            self.context.subcontext(task_name=task_name, max_subtasks=max_steps),
            self.estimator,
        )

    def subtasks(self, n_tasks, task_name, max_steps=0):
        """Create ``n_tasks`` subtasks at once, numbered 0, 1, ... in order.

        Parameters
        ----------
        n_tasks : int
            Number of subtasks (chains, restarts, problems).
        task_name : str
            Name the callbacks see.
        max_steps : int or None, default=0
            Subtasks each of them will have (None: unknown, 0: leaves).

        Returns
        -------
        tasks : list of CallbackTask

        Examples
        --------
        >>> from sklearn_meanfield._progress import CallbackTask
        >>> len(CallbackTask().subtasks(3, "chain"))
        3
        """
        return [self.subtask(task_name, max_steps) for _ in range(int(n_tasks))]

    def begin(self, **data):
        """Run the callbacks' ``on_fit_task_begin`` hooks of this task.

        Parameters
        ----------
        **data : dict
            ``X``, ``y``, ``metadata`` or ``reconstruction_attributes``, as in
            ``sklearn.callback.CallbackContext.call_on_fit_task_begin``.

        Returns
        -------
        task : CallbackTask
            This task.

        Examples
        --------
        >>> from sklearn_meanfield._progress import CallbackTask
        >>> bool(CallbackTask().begin())
        False
        """
        if self.context is not None:
            self.context.call_on_fit_task_begin(estimator=self.estimator, **data)
        return self

    def end(self, **data):
        """Run the callbacks' ``on_fit_task_end`` hooks of this task.

        Parameters
        ----------
        **data : dict
            As in :meth:`begin`.

        Returns
        -------
        stop : bool
            True when a callback asks to stop.

        Examples
        --------
        >>> from sklearn_meanfield._progress import CallbackTask
        >>> CallbackTask().end()
        False
        """
        if self.context is None:
            return abandoned_on_dask()
        stop = self.context.call_on_fit_task_end(estimator=self.estimator, **data)
        return bool(stop) or abandoned_on_dask()

    def __enter__(self):
        """Begin the task: ``with task:`` runs its begin hooks, then its end
        hooks when the block finishes without an exception.

        A block that raises skips the end hooks, as a fit that fails never
        finishes its task.

        Examples
        --------
        >>> from sklearn_meanfield._progress import CallbackTask
        >>> with CallbackTask().subtask("restart") as restart:
        ...     stop = restart.step("sweep")
        >>> stop
        False
        """
        return self.begin()

    def __exit__(self, exc_type, exc, traceback):
        if exc_type is None:
            self.end()
        return False

    def step(self, task_name="step", **data):
        """A finished leaf subtask: create it and run its begin and end hooks.

        Parameters
        ----------
        task_name : str, default="step"
            Name the callbacks see.
        **data : dict
            As in :meth:`begin`.

        Returns
        -------
        stop : bool
            True when a callback asks to stop.

        Examples
        --------
        >>> from sklearn_meanfield._progress import CallbackTask
        >>> CallbackTask().step("sweep")
        False
        """
        if self.context is None:
            return abandoned_on_dask()
        return self.subtask(task_name).begin(**data).end(**data)


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
    task : CallbackTask or None, default=None
        The scikit-learn callback task the reporter's steps belong to: each
        :meth:`step` becomes one of its subtasks.  Set by
        :func:`fit_progress`, or passed to workers.

    Attributes
    ----------
    task : CallbackTask
        The callback task (an empty one without callbacks).

    Examples
    --------
    >>> from sklearn_meanfield._progress import ProgressReporter
    >>> reporter = ProgressReporter(verbose=1, prefix="Demo")
    >>> reporter(1, "epoch %d, log-likelihood %.2f", 3, -12.5)  # doctest: +ELLIPSIS
    [Demo] epoch 3, log-likelihood -12.50 (...s)
    >>> reporter(2, "not shown at verbose=1")
    """

    def __init__(self, verbose, prefix, stream=None, task=None):
        self.verbose = int(verbose or 0)
        self.prefix = prefix
        self.stream = stream
        self.task = CallbackTask() if task is None else task
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
        scikit-learn callbacks, the step is also a subtask of the reporter's
        task, whose begin and end hooks run now.

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
        return self.task.step(task_name)

    def steps_at(self, level, task_name):
        """A reporter whose messages of ``level`` are also callback steps.

        For numerical cores that take a plain ``reporter(level, message,
        *args)`` callable and report each of their iterations at one level
        (the TAP sweeps at level 2): handed this instead, every such message
        becomes a step of :attr:`task`, whatever ``verbose`` is; messages at
        other levels are only printed.  A core that ignores the reporter's
        return value cannot be stopped this way.

        Parameters
        ----------
        level : int
            The level of the messages that mark steps.
        task_name : str
            Name of the steps the callbacks see.

        Returns
        -------
        reporter : callable
            ``reporter(level, message, *args)``, printing like this reporter.

        Examples
        --------
        >>> from sklearn_meanfield._progress import ProgressReporter
        >>> sweeps = ProgressReporter(verbose=2, prefix="Demo").steps_at(2, "sweep")
        >>> stop = sweeps(2, "sweep %d", 1)  # doctest: +ELLIPSIS
        [Demo] sweep 1 (...s)
        """
        return _StepsAtLevel(self, level, task_name)


class _StepsAtLevel:
    """``reporter(level, message, *args)``: a step at one level, else a print."""

    def __init__(self, reporter, level, task_name):
        self.reporter = reporter
        self.level = level
        self.task_name = task_name

    def __call__(self, level, message, *args):
        if level == self.level:
            return self.reporter.step(level, message, *args, task_name=self.task_name)
        return self.reporter(level, message, *args)


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
    inside it, and tears the callbacks down at the end, even on error.  Work
    dispatched to joblib workers gets its own subtasks from
    ``reporter.task.subtasks(...)`` (see :class:`CallbackTask`).

    Parameters
    ----------
    estimator : estimator
        The estimator being fitted.
    verbose : int
        Its ``verbose`` parameter.
    prefix : str or None, default=None
        Line prefix; None means the estimator's class name.
    max_steps : int or None, default=None
        Number of steps (or subtasks) the fit will report, if known
        (progress bars use it).
    X, y : array-like or None, default=None
        Training data, passed to the fit task's hooks.

    Yields
    ------
    reporter : ProgressReporter
        The reporter to use for the fit; its ``task`` is the fit task.

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
        yield ProgressReporter(verbose, prefix)
        return
    with callback_management_context(estimator):
        context = estimator._init_callback_context(max_subtasks=max_steps)
        task = CallbackTask(context, estimator).begin(X=X, y=y)
        yield ProgressReporter(verbose, prefix, task=task)
        task.end(X=X, y=y)

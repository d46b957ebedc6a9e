"""The TAP shells' ``on_iteration`` callables, built from a progress reporter.

The numerical loops (:func:`~sklearn_meanfield.tap._ep.expectation_propagation`,
:func:`~sklearn_meanfield.tap._mean_field.mean_field_iteration`,
:func:`~sklearn_meanfield.tap._fallback.ep_with_fallback`) know nothing of
printing or callbacks: after every sweep they call one optional
``on_iteration(sweep)`` with a :class:`~sklearn_meanfield.tap._sweep.Sweep`
and stop when it returns True.  The shells build that callable here from
their :class:`~sklearn_meanfield._progress.ProgressReporter`.
"""

__all__ = ["print_sweeps", "sweep_steps"]


def print_sweeps(reporter):
    """``on_iteration`` printing every sweep at ``verbose >= 2``, never stopping.

    For the optimiser's evidence evaluations, which a callback stops at the
    evaluation, not within one.

    Parameters
    ----------
    reporter : callable
        ``reporter(level, message)``, e.g. a
        :class:`~sklearn_meanfield._progress.ProgressReporter`.

    Returns
    -------
    on_iteration : callable

    Examples
    --------
    >>> from sklearn_meanfield._progress import ProgressReporter
    >>> from sklearn_meanfield.tap._sweep import Sweep
    >>> from sklearn_meanfield.tap._hooks import print_sweeps
    >>> hook = print_sweeps(ProgressReporter(verbose=2, prefix="Demo"))
    >>> hook(Sweep("EP", 1, 0.5, 0.8))  # doctest: +ELLIPSIS
    [Demo] EP sweep 1: residual 0.5, step 0.80 (...s)
    False
    """

    def on_iteration(sweep):
        reporter(2, str(sweep))
        return False

    return on_iteration


def sweep_steps(reporter):
    """``on_iteration`` making every sweep a callback step named "sweep".

    The sweep is printed at ``verbose >= 2`` and becomes a step of
    ``reporter.task``; a callback's request to stop stops the iteration (at
    its best iterate).

    Parameters
    ----------
    reporter : ProgressReporter
        Its task is the solve's callback task.

    Returns
    -------
    on_iteration : callable

    Examples
    --------
    >>> from sklearn_meanfield._progress import ProgressReporter
    >>> from sklearn_meanfield.tap._sweep import Sweep
    >>> from sklearn_meanfield.tap._hooks import sweep_steps
    >>> hook = sweep_steps(ProgressReporter(verbose=0, prefix="Demo"))
    >>> hook(Sweep("mean-field", 3, 0.01))  # no callbacks: never stops
    False
    """

    def on_iteration(sweep):
        return reporter.step(2, str(sweep), task_name="sweep")

    return on_iteration

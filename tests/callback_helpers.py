"""Shared test callbacks for scikit-learn's callback API (``sklearn.callback``)."""


class TickDeadline:
    """A deadline callback on a clock that advances one tick per ended task.

    ``on_fit_task_end`` counts the ends of tasks named ``task_name`` (one
    tick each) and asks to stop once ``deadline`` ticks have passed, and keeps
    asking, as a wall-clock limit would; counting ticks instead of seconds
    keeps the tests deterministic.  ``ended`` records the ``(parent task id,
    task id)`` of every counted task, in order.

    Parameters
    ----------
    deadline : int
        Ticks after which every ``on_fit_task_end`` asks to stop.
    task_name : str or None
        The tasks that advance the clock ("sweep", "iteration", ...); None:
        every task (evaluations, sweeps, restarts alike).
    """

    def __init__(self, deadline, task_name):
        self.deadline = deadline
        self.task_name = task_name
        self.ticks = 0
        self.ended = []

    def setup(self, estimator, context):
        pass

    def teardown(self, estimator, context):
        pass

    def on_fit_task_begin(self, estimator, context):
        pass

    def on_fit_task_end(self, estimator, context):
        if self.task_name is None or context.task_name == self.task_name:
            self.ticks += 1
            parent = context.parent.task_id if context.parent is not None else None
            self.ended.append((parent, context.task_id))
        return self.ticks >= self.deadline

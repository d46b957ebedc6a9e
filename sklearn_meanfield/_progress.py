"""One small progress reporter shared by every estimator's ``verbose`` option."""

import sys
import time

__all__ = ["ProgressReporter"]


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

    Examples
    --------
    >>> from sklearn_meanfield._progress import ProgressReporter
    >>> reporter = ProgressReporter(verbose=1, prefix="Demo")
    >>> reporter(1, "epoch %d, log-likelihood %.2f", 3, -12.5)  # doctest: +ELLIPSIS
    [Demo] epoch 3, log-likelihood -12.50 (...s)
    >>> reporter(2, "not shown at verbose=1")
    """

    def __init__(self, verbose, prefix, stream=None):
        self.verbose = int(verbose or 0)
        self.prefix = prefix
        self.stream = stream
        self._start = time.perf_counter()

    def enabled(self, level=1):
        """Whether messages of ``level`` are shown."""
        return self.verbose >= level

    def __call__(self, level, message, *args):
        """Print ``message % args`` when ``verbose >= level``."""
        if self.verbose < level:
            return
        text = message % args if args else message
        elapsed = time.perf_counter() - self._start
        stream = self.stream if self.stream is not None else sys.stdout
        print(f"[{self.prefix}] {text} ({elapsed:.1f}s)", file=stream, flush=True)

"""How much memory a fit may use, and one up-front guard every estimator shares.

An estimator whose work arrays grow with the data (an n x n kernel matrix, a
P x P covariance, a stack of Monte Carlo draws) checks before allocating that
they fit, and otherwise raises a ``MemoryError`` that names the size and what
to do instead.  Failing up front beats failing minutes later inside numpy, or
being killed by the kernel's OOM killer with nothing said.

The budget is what *this process* may really use, the smallest of:

* the memory the system reports as available (``MemAvailable`` on Linux, the
  physical memory elsewhere);
* the room left under a cgroup memory limit (containers, batch schedulers;
  cgroup v1 and v2, the tightest limit on the path to the root);
* the room left under ``RLIMIT_AS`` and ``RLIMIT_DATA`` (``ulimit -v``/``-d``),
  which numpy's allocations count against.
"""

import os
from pathlib import Path

__all__ = ["available_memory_bytes", "check_memory", "format_bytes"]

_CGROUP_ROOT = Path("/sys/fs/cgroup")
_PROC = Path("/proc")
# A cgroup without a limit reports a number near 2**63 (v1) or "max" (v2).
_NO_LIMIT = 2**60


def format_bytes(n_bytes):
    """``n_bytes`` in the largest binary unit that keeps it at least 1.

    Examples
    --------
    >>> format_bytes(3 * 2**30)
    '3.0 GiB'
    >>> format_bytes(1536)
    '1.5 KiB'
    """
    value = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{value:.0f} B"
        value /= 1024


def _read_int(path):
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    if text == "max":
        return _NO_LIMIT
    try:
        return int(text.split()[0])
    except (ValueError, IndexError):
        return None


def _system_available():
    """Available memory by the kernel's estimate, or the physical memory."""
    try:
        for line in (_PROC / "meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system
        return None


def _cgroup_paths():
    """(version, relative path) of this process's memory cgroups."""
    try:
        lines = (_PROC / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if "memory" in controllers.split(","):
            found.append((1, path))
        elif controllers == "":
            found.append((2, path))
    return found


def _cgroup_room():
    """Bytes left under the tightest cgroup memory limit, or None."""
    rooms = []
    for version, path in _cgroup_paths():
        base = _CGROUP_ROOT / "memory" if version == 1 else _CGROUP_ROOT
        limit_name = "memory.limit_in_bytes" if version == 1 else "memory.max"
        usage_name = "memory.usage_in_bytes" if version == 1 else "memory.current"
        # Inside a container the cgroup's own directory is often mounted as
        # the root, so the path named in /proc may not exist below it: walk
        # from the deepest directory that exists up to the root.
        directory = base / path.lstrip("/")
        candidates = [directory, *directory.parents]
        candidates = [d for d in candidates if d == base or base in d.parents]
        for candidate in candidates:
            limit = _read_int(candidate / limit_name)
            if limit is None or limit >= _NO_LIMIT:
                continue
            usage = _read_int(candidate / usage_name) or 0
            rooms.append(max(limit - usage, 0))
    return min(rooms) if rooms else None


def _rlimit_room():
    """Bytes left under RLIMIT_AS / RLIMIT_DATA, or None when unlimited."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return None
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        statm = (_PROC / "self" / "statm").read_text().split()
        virtual, data = int(statm[0]) * page, int(statm[5]) * page
    except (OSError, ValueError, IndexError, AttributeError):
        virtual = data = 0
    rooms = []
    for name, used in (("RLIMIT_AS", virtual), ("RLIMIT_DATA", data)):
        soft, _ = resource.getrlimit(getattr(resource, name))
        if soft != resource.RLIM_INFINITY:
            rooms.append(max(soft - used, 0))
    return min(rooms) if rooms else None


def available_memory_bytes():
    """The memory this process may still allocate, in bytes.

    The smallest of the system's available memory, the room under the
    process's cgroup memory limits and the room under ``RLIMIT_AS`` /
    ``RLIMIT_DATA``.

    Returns
    -------
    available : int or None
        None when nothing can be found out (then no guard can be applied).

    Examples
    --------
    >>> from sklearn_meanfield._memory import available_memory_bytes
    >>> available_memory_bytes() > 0
    True
    """
    limits = [_system_available(), _cgroup_room(), _rlimit_room()]
    limits = [limit for limit in limits if limit is not None]
    return min(limits) if limits else None


def check_memory(needed_bytes, what, advice="", fraction=0.8):
    """Refuse work whose arrays would not fit in the memory this process has.

    Parameters
    ----------
    needed_bytes : float
        Peak bytes the work would hold at once (all concurrent workers of
        this process counted).
    what : str
        What needs the memory, e.g. ``"A Gaussian-process fit on 30000
        samples"``; the message reads "<what> needs about ...".
    advice : str, default=""
        What the user can do instead (a cheaper option, subsampling).
    fraction : float, default=0.8
        Share of the available memory the work may take; the rest is left
        for the interpreter, the caller's data and copies numpy makes.

    Raises
    ------
    MemoryError
        When ``needed_bytes`` exceeds ``fraction`` of
        :func:`available_memory_bytes`.

    Examples
    --------
    >>> from sklearn_meanfield._memory import check_memory
    >>> check_memory(2**20, "A small fit")
    >>> try:
    ...     check_memory(2**50, "A huge fit", "Use less data.")
    ... except MemoryError as error:
    ...     print(str(error).startswith("A huge fit needs about 1024.0 TiB"))
    True
    """
    available = available_memory_bytes()
    if available is None or needed_bytes <= fraction * available:
        return
    message = (
        f"{what} needs about {format_bytes(needed_bytes)}, more than "
        f"{fraction:.0%} of the {format_bytes(available)} this process may use "
        "(available memory, cgroup and ulimit limits counted)."
    )
    if advice:
        message += " " + advice
    raise MemoryError(message)

"""The shared memory budget: system, cgroup and ulimit limits."""

import subprocess
import sys
import textwrap

import pytest

from sklearn_meanfield import _memory
from sklearn_meanfield._memory import (
    available_memory_bytes,
    check_memory,
    format_bytes,
)

GiB = 2**30
MiB = 2**20


def test_format_bytes_units():
    assert format_bytes(512) == "512 B"
    assert format_bytes(3 * MiB) == "3.0 MiB"
    assert format_bytes(2.5 * GiB) == "2.5 GiB"


def test_available_memory_is_positive_and_at_most_physical():
    import os

    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    available = available_memory_bytes()
    assert 0 < available <= physical


def _fake_proc(tmp_path, cgroup_lines, meminfo_kb=16 * 2**20):
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text("\n".join(cgroup_lines) + "\n")
    (proc / "meminfo").write_text(f"MemTotal: 99 kB\nMemAvailable: {meminfo_kb} kB\n")
    (proc / "self" / "statm").write_text("0 0 0 0 0 0 0\n")
    return proc


def test_cgroup_v1_limit_minus_usage_on_the_path_to_the_root(tmp_path, monkeypatch):
    proc = _fake_proc(tmp_path, ["4:memory:/jobs/one", "1:cpu:/"])
    root = tmp_path / "cgroup"
    leaf = root / "memory" / "jobs" / "one"
    leaf.mkdir(parents=True)
    # The leaf has no limit of its own; its parent limits to 3 GiB, of which
    # 1 GiB is used; the root is unlimited (v1's huge number).
    (leaf / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (leaf / "memory.usage_in_bytes").write_text(f"{GiB}\n")
    (leaf.parent / "memory.limit_in_bytes").write_text(f"{3 * GiB}\n")
    (leaf.parent / "memory.usage_in_bytes").write_text(f"{GiB}\n")
    (root / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    monkeypatch.setattr(_memory, "_PROC", proc)
    monkeypatch.setattr(_memory, "_CGROUP_ROOT", root)
    monkeypatch.setattr(_memory, "_rlimit_room", lambda: None)
    assert available_memory_bytes() == 2 * GiB


def test_cgroup_v2_max_and_a_path_that_the_container_mounts_as_root(
    tmp_path, monkeypatch
):
    # /proc names a path that does not exist below the mount (the container
    # sees its own cgroup as the root): the root's limit applies.
    proc = _fake_proc(tmp_path, ["0::/outside/the/container"])
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "memory.max").write_text(f"{4 * GiB}\n")
    (root / "memory.current").write_text(f"{512 * MiB}\n")
    monkeypatch.setattr(_memory, "_PROC", proc)
    monkeypatch.setattr(_memory, "_CGROUP_ROOT", root)
    monkeypatch.setattr(_memory, "_rlimit_room", lambda: None)
    assert available_memory_bytes() == 4 * GiB - 512 * MiB
    (root / "memory.max").write_text("max\n")
    assert available_memory_bytes() == 16 * GiB  # MemAvailable decides


def test_check_memory_message_names_sizes_and_advice(monkeypatch):
    monkeypatch.setattr(_memory, "available_memory_bytes", lambda: 10 * GiB)
    check_memory(7.9 * GiB, "A fit")
    with pytest.raises(MemoryError) as error:
        check_memory(9 * GiB, "A fit on 30000 samples", "Use the sparse mode.")
    message = str(error.value)
    assert message.startswith("A fit on 30000 samples needs about 9.0 GiB")
    assert "10.0 GiB" in message and message.endswith("Use the sparse mode.")


def test_ulimit_v_is_the_budget_and_numpy_agrees():
    # In a child process limited by RLIMIT_AS to 600 MiB above what it
    # already maps: the guard's budget must be at most that room, and a
    # numpy allocation larger than the budget must really fail there (the
    # guard counts what the process may use, not the machine's memory).
    script = textwrap.dedent(
        """
        import os, resource
        import numpy as np
        from sklearn_meanfield._memory import available_memory_bytes
        page = os.sysconf("SC_PAGE_SIZE")
        mapped = int(open("/proc/self/statm").read().split()[0]) * page
        room = 600 * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (mapped + room, resource.RLIM_INFINITY))
        budget = available_memory_bytes()
        assert budget <= room, (budget, room)
        assert budget > room // 2, (budget, room)
        try:
            np.ones(int(1.2 * budget) // 8)
        except MemoryError:
            print("refused")
        small = np.ones(int(0.5 * budget) // 8)
        print("ok", small.size > 0)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["refused", "ok", "True"]


# Guards of the fits and draws that allocate arrays quadratic or bilinear in
# the data's sizes: each refuses, before allocating, when the memory this
# process may use holds less than one of its largest arrays, names the size,
# and lets the work run when there is room for many.


def _refused_then_run(monkeypatch, one_array_bytes, run):
    monkeypatch.setattr(_memory, "available_memory_bytes", lambda: one_array_bytes)
    with pytest.raises(MemoryError, match="needs about"):
        run()
    monkeypatch.setattr(
        _memory, "available_memory_bytes", lambda: 200 * one_array_bytes
    )
    run()


@pytest.mark.parametrize("n_samples, n_features", [(400, 60), (60, 400)])
def test_perceptron_refuses_square_matrices_that_do_not_fit(
    monkeypatch, n_samples, n_features
):
    import numpy as np

    from sklearn_meanfield import TAPPerceptronClassifier

    rng = np.random.RandomState(0)
    X = rng.normal(size=(n_samples, n_features))
    y = (X[:, 0] > 0).astype(int)
    # Weight space (more samples than weights) or dual space: one square
    # matrix of the smaller side, intercept included in the weights.
    side = min(n_samples, n_features + 1)
    model = TAPPerceptronClassifier(n_restarts=0)
    _refused_then_run(monkeypatch, 8 * side**2, lambda: model.fit(X, y))


def test_bethe_rbm_refuses_weights_that_do_not_fit(monkeypatch):
    import numpy as np

    from sklearn_meanfield import BetheRBM

    X = (np.random.RandomState(0).uniform(size=(20, 30)) > 0.5).astype(float)
    model = BetheRBM(n_components=50, n_iter=1, random_state=0)
    _refused_then_run(monkeypatch, 8 * 50 * 30, lambda: model.fit(X))


def test_ensemble_sample_y_refuses_draws_that_do_not_fit(monkeypatch):
    import numpy as np

    from sklearn_meanfield import EnsembleLearningRegressor

    rng = np.random.RandomState(0)
    X = rng.normal(size=(30, 2))
    model = EnsembleLearningRegressor(
        hidden_layer_size=3, n_restarts=1, max_iter=5, random_state=0
    )
    with pytest.warns(Warning):
        model.fit(X, X[:, 0])
    # One draw of the outputs at every row: 30 x 1000 floats.
    _refused_then_run(
        monkeypatch, 8 * 30 * 1000, lambda: model.sample_y(X, n_samples=1000)
    )

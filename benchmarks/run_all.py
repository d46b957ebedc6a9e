"""Run every ``benchmarks/bench_*.py`` script and collect one report.

Usage (from the repository root)::

    python -m benchmarks            # full mode, writes benchmarks/RESULTS.md
    python -m benchmarks --quick    # every script's --quick mode
    python -m benchmarks --only tap_gpc hmc --output /tmp/results.md
    python -m benchmarks --only tap_gpc --merge   # re-run some, keep the others
    python -m benchmarks --only bench_tap_gpc --merge   # that script alone

Each script runs in its own process (``python -u script [--quick]``), one after
the other, so that no two benchmarks compete for the cores; the scripts print
their own tables with the estimator and its peers side by side (scores,
log-loss or NLPD, the built-in leave-one-out estimate, fit times and ratios
measured in one process).  The report gives, for every script, the estimator
it measures, what it compares (the first paragraph of its docstring), the
command, its wall time, the load average before and after, and its output
verbatim, under a header with the machine and the library versions.  The
report is rewritten after every script, so an interrupted run still leaves the
finished sections; a script that exceeds ``--timeout`` is stopped and its
output so far is kept.  The report ends with its data as JSON in an HTML
comment, so that ``--merge`` can re-run some scripts and keep the sections of
the others (and of those it has not reached yet when it is interrupted).
"""

import argparse
import ast
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_OUTPUT = HERE / "RESULTS.md"
LIBRARIES = ("numpy", "scipy", "scikit-learn", "joblib", "threadpoolctl")


def discover(only=None):
    """The benchmark scripts, sorted by name, optionally filtered: a word
    that is a script's name (``bench_tap_gpc``) selects that script alone,
    any other word every script whose name contains it (``tap_gpc``)."""
    scripts = sorted(HERE.glob("bench_*.py"))
    if only:
        stems = {s.stem for s in scripts}

        def selects(word, script):
            return word == script.stem if word in stems else word in script.stem

        scripts = [s for s in scripts if any(selects(w, s) for w in only)]
    return scripts


def describe(script):
    """The estimator a script measures and the first paragraph of its docstring."""
    source = script.read_text()
    doc = ast.get_docstring(ast.parse(source)) or ""
    summary = doc.split("\n\n")[0].strip()
    import sklearn_meanfield

    names = [n for n in sklearn_meanfield.__all__ if n != "__version__"]
    # The estimator named first in the docstring (else in the source) is the one
    # under test; peers of the package may appear later.
    for text in (doc, source):
        found = [(text.find(n), n) for n in names if n in text]
        if found:
            return min(found)[1], summary
    return script.stem, summary


def _cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib():
    try:
        text = Path("/proc/meminfo").read_text()
        kib = int(re.search(r"MemTotal:\s+(\d+)", text).group(1))
        return f"{kib / 2**20:.1f} GiB"
    except (OSError, AttributeError):
        return "unknown"


def _load():
    try:
        return "{:.1f} / {:.1f} / {:.1f}".format(*os.getloadavg())
    except OSError:
        return "n/a"


def _version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _blas():
    try:
        import numpy  # noqa: F401  (loads the BLAS threadpoolctl reports)
        from threadpoolctl import threadpool_info

        pools = [p for p in threadpool_info() if p["user_api"] == "blas"]
        return ", ".join(
            f"{p['internal_api']} {p.get('version')} ({p['num_threads']} threads)"
            for p in pools
        )
    except Exception:  # report only, never fail the run
        return "unknown"


def machine():
    """Rows describing the machine and the software, as (label, value) pairs."""
    import sklearn_meanfield

    load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    cpus = os.cpu_count() or 1
    rows = [
        ("CPU", _cpu_model()),
        ("cores (os.cpu_count)", str(cpus)),
        ("memory", _memory_gib()),
        ("load average at start (1/5/15 min)", _load()),
        ("OS", platform.platform()),
        ("Python", platform.python_version()),
        ("sklearn-meanfield", sklearn_meanfield.__version__),
    ]
    rows += [(name, _version(name)) for name in LIBRARIES]
    rows.append(("BLAS", _blas()))
    return rows, load1 > 0.5 * cpus


def run_script(script, quick, timeout):
    """Run one script; return its output, exit status, wall time and loads."""
    command = [sys.executable, "-u", str(script.relative_to(ROOT))]
    if quick:
        command.append("--quick")
    # Warnings (mostly ConvergenceWarning from deliberately short runs) would
    # interleave with the tables; each script reports convergence itself.
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONWARNINGS="ignore")
    load_before = _load()
    started = _now()
    start = time.perf_counter()
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
        status = "ok" if process.returncode == 0 else f"exit {process.returncode}"
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        status = f"stopped after {timeout:.0f} s (output so far kept)"
    return {
        "command": " ".join(["python"] + command[2:]),
        "output": output.rstrip(),
        "status": status,
        "seconds": time.perf_counter() - start,
        "load_before": load_before,
        "load_after": _load(),
        "started": started,
    }


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")


_DATA_START = "<!-- benchmark-results"


def load_previous(path, quick):
    """The per-script results stored in an earlier report of the same mode."""
    try:
        text = path.read_text()
    except OSError:
        return []
    if _DATA_START not in text:
        return []
    data = json.loads(text.split(_DATA_START, 1)[1].rsplit("-->", 1)[0])
    if data.get("quick") != quick:
        return []
    # Only the keys this version writes (older reports held more).
    keys = ("command", "output", "status", "seconds", "load_before", "load_after")
    keys += ("started", "script", "estimator", "summary")
    return [{k: r[k] for k in keys if k in r} for r in data["results"]]


def render(results, quick, machine_rows, loaded, started):
    """The Markdown report: header, machine, summary, one section per script.

    Each script's section is headed ``## Estimator (script)`` and holds its
    output in the first ``text`` code fence, where the documentation's
    ``benchmark-table`` directive finds it.
    """
    lines = _header(results, quick, loaded, started)
    lines += ["## Machine and versions", "", "| | |", "| --- | --- |"]
    lines += [f"| {label} | {value} |" for label, value in machine_rows]
    lines += _summary(results)
    for r in results:
        lines += _section(r)
    data = json.dumps({"quick": quick, "results": results}, indent=1)
    lines += ["", _DATA_START, data.replace("-->", "-- >"), "-->"]
    return "\n".join(lines) + "\n"


def _header(results, quick, loaded, started):
    """Title, how the report was made and, if so, that the machine was busy."""
    mode = "quick (`--quick`)" if quick else "full"
    # Loaded if the machine was busy at the start or around any script.
    half = 0.5 * (os.cpu_count() or 1)
    loaded = loaded or any(
        float(r[key].split(" / ")[0]) > half
        for r in results
        for key in ("load_before", "load_after")
        if r[key] != "n/a"
    )
    lines = [
        "# Benchmark results",
        "",
        "Written by `python -m benchmarks"
        + (" --quick" if quick else "")
        + f"` ({mode} mode), last invocation started {started} UTC (each "
        "script's own start time is in the summary).  Every script compares "
        "one estimator with its scikit-learn peers on the same data in one "
        "process; its own table follows verbatim, with its columns explained "
        "in its description.",
        "",
    ]
    if loaded:
        lines += [
            "**The machine was loaded** (1-min load average above half the cores "
            "at the start or around a script, see the summary): other jobs shared "
            "the cores, so absolute times are inflated and noisy.  The ratios, "
            "measured side by side in one process, are the meaningful numbers.",
            "",
        ]
    return lines


def _summary(results):
    """One row per script: status, start time, wall time and load."""
    lines = [
        "",
        "## Summary",
        "",
        "| estimator | script | status | run at (UTC) | wall time "
        "| 1-min load before / after |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        before, after = (r[k].split(" / ")[0] for k in ("load_before", "load_after"))
        lines.append(
            f"| [{r['estimator']}](#{_anchor(_heading(r))}) | `{r['script']}` "
            f"| {r['status']} "
            f"| {r.get('started', '?')} "
            f"| {r['seconds']:.0f} s "
            f"| {before} / {after} |"
        )
    return lines


def _section(r):
    """A script's section: what it compares, how it ran, its output."""
    return [
        "",
        f"## {_heading(r)}",
        "",
        f"Script `benchmarks/{r['script']}`: {r['summary']}",
        "",
        f"Command `{r['command']}`; {r['status']}; wall time {r['seconds']:.0f} s; "
        f"load average (1/5/15 min) {r['load_before']} before, "
        f"{r['load_after']} after.",
        "",
        "```text",
        r["output"] or "(no output)",
        "```",
    ]


def _heading(result):
    """A section title unique per script (an estimator may have several)."""
    return f"{result['estimator']} ({Path(result['script']).stem})"


def _anchor(title):
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped
    (underscores and hyphens kept), spaces as hyphens."""
    return re.sub(r"[^a-z0-9 _-]", "", title.lower()).replace(" ", "-")


def main(argv=None):
    """Command-line entry point of ``python -m benchmarks``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="run every script in its quick mode"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="WORD",
        help="scripts whose name contains WORD (a whole script name: that one)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="stop a script after this many seconds (default: no limit)",
    )
    parser.add_argument(
        "--output", type=Path, default=DEFAULT_OUTPUT, help="report path"
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the other scripts' sections of an earlier report of this mode",
    )
    args = parser.parse_args(argv)
    scripts = discover(args.only)
    if not scripts:
        parser.error("no benchmark script matches")
    started = _now()
    machine_rows, loaded = machine()
    # With --merge, a script's earlier section stays until its new one is
    # written, so that an interrupted run loses nothing.
    previous = load_previous(args.output, args.quick) if args.merge else []
    results = []
    for script in scripts:
        estimator, summary = describe(script)
        print(f"[benchmarks] {script.name} ({estimator}) ...", flush=True)
        result = run_script(script, args.quick, args.timeout)
        result.update(
            script=script.name,
            estimator=estimator,
            summary=" ".join(summary.split()),
        )
        results.append(result)
        done = {r["script"] for r in results}
        kept = [r for r in previous if r["script"] not in done]
        ordered = sorted(kept + results, key=lambda r: r["script"])
        print(
            f"[benchmarks] {script.name}: {result['status']}, "
            f"{result['seconds']:.0f} s",
            flush=True,
        )
        args.output.write_text(
            render(ordered, args.quick, machine_rows, loaded, started)
        )
    print(f"[benchmarks] wrote {args.output}")
    failed = [r["script"] for r in results if r["status"] != "ok"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

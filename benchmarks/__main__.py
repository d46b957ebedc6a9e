"""``python -m benchmarks [--quick]``: run every benchmark, write RESULTS.md."""

from .run_all import main

if __name__ == "__main__":
    raise SystemExit(main())

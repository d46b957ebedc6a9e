"""Benchmarks of sklearn-meanfield against its scikit-learn peers.

Each ``bench_*.py`` script compares one estimator with its peers and prints
its own table; ``python -m benchmarks`` runs them all (see
:mod:`benchmarks.run_all`) and writes ``benchmarks/RESULTS.md``.
"""

"""Benchmarks shipped with the package: ``vkblas bench gemm`` runs :func:`vkblas.bench.gemm.main`, ``vkblas bench
conv`` :func:`vkblas.bench.conv.main`; ``copy.py`` measures the device copy bandwidth they compare with.

``bench/`` sits at the top with the CLI: it may use concrete backends (it measures them), and nothing but the CLI
imports it."""

"""Benchmarks shipped with the package: ``vkblas bench gemm`` runs :func:`vkblas.bench.gemm.main`."""

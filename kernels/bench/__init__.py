"""Kernel microbenchmarks (run as modules: python -m kernels.bench.verify_m8)."""

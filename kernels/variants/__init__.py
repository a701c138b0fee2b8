"""Kernel variants: each module holds its contract (docstring), Metal source and portable form."""

from __future__ import annotations

from types import ModuleType

from kernels.variants import (
    fp16_matrix,
    mma_group_sums,
    mma_verify,
    mma_weights_a,
    narrow_output,
    scalar_kmajor,
    stock,
    verify_m4,
    verify_m16,
    w4a32,
)

VARIANTS: dict[str, ModuleType] = {
    m.NAME: m
    for m in (stock, scalar_kmajor, narrow_output, fp16_matrix, verify_m4, verify_m16, w4a32,
              mma_verify, mma_weights_a, mma_group_sums)
}

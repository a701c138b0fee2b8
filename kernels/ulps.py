"""Errors in ulps of the output dtype at each element's own magnitude.

A bound like 1e-3 means different things at |y| = 0.01 and |y| = 1.5: in bf16 one ulp at
[1, 2) is 2^-7 = 0.0078125. Reporting ulps makes accuracy comparable across shapes and dtypes,
and shows when a pinned absolute bound is tighter than one ulp of the outputs.
"""

from __future__ import annotations

import numpy as np

MANTISSA_BITS = {"bfloat16": 7, "float16": 10, "float32": 23}
MIN_NORMAL_EXP = {"bfloat16": -126, "float16": -14, "float32": -126}


def ulp(magnitude: np.ndarray, dtype: str) -> np.ndarray:
    """Spacing of ``dtype`` numbers at each |magnitude| (subnormal spacing below the normals)."""
    mag = np.abs(np.asarray(magnitude, dtype=np.float64))
    exp = np.floor(np.log2(np.maximum(mag, np.finfo(np.float64).tiny)))
    exp = np.maximum(exp, MIN_NORMAL_EXP[dtype])
    return np.exp2(exp - MANTISSA_BITS[dtype])


def ulps(values: np.ndarray, reference: np.ndarray, dtype: str) -> np.ndarray:
    ref = np.asarray(reference, dtype=np.float64)
    return np.abs(np.asarray(values, dtype=np.float64) - ref) / ulp(ref, dtype)


def max_ulp_at(values: np.ndarray, dtype: str) -> float:
    """One ulp at the largest output magnitude: the smallest deviation a rounding flip makes."""
    return float(ulp(np.max(np.abs(values)), dtype))


def scaled_ulps(values: np.ndarray, reference: np.ndarray, abs_scale: np.ndarray,
                dtype: str) -> np.ndarray:
    """Error in ulps at the dot product's own scale ``sum_k |x_k * w_k|``.

    Where the output cancels to near zero its own ulp is tiny, yet any float32 accumulation or
    operand rounding errs in proportion to the terms summed, not to their sum. This is the
    scale at which a kernel's rounding is honestly judged for such elements.
    """
    ref = np.asarray(reference, dtype=np.float64)
    return np.abs(np.asarray(values, dtype=np.float64) - ref) / ulp(abs_scale, dtype)

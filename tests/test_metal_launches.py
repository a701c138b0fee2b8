"""Every Metal launch the table can select on g13/g14/g15: compiled at its production shape and
executed against the portable oracle (kernels/metal_emu/launches.json lists them)."""

from __future__ import annotations

from dataclasses import asdict

import mlx.core as mx
import pytest

from kernels import dispatch, metal
from kernels.metal_emu import launches, oracle, source, toolchain
from kernels.metal_emu import variant as emulated
from kernels.qweights import QWeights
from kernels.variants import VARIANTS

LISTING = launches.load()


def test_listing_is_the_tables():
    assert [asdict(r) for r in launches.current()] == \
        [asdict(r) for r in LISTING], \
        "the table changed: review and run python -m kernels.metal_emu.launches --write"


def test_listing_covers_every_metal_variant_and_generation():
    assert {r.variant for r in LISTING} == {
        n for n, v in VARIANTS.items() if getattr(v, "METAL_SOURCE", None) is not None}
    assert {d[:3] for r in LISTING for d in r.devices} >= {"g13", "g14"}


@pytest.mark.parametrize("row", LISTING, ids=lambda r: r.label)
def test_launch_compiles_and_executes(row):
    v = VARIANTS[row.variant]
    dtype = getattr(mx, row.dtype)
    # The production launch: the exact source a Mac compiles for it, compiled strictly.
    spec = metal.launch_spec(v, row.M, row.K, row.N, row.group_size, row.dtype, row.params)
    act = getattr(mx, spec.activation)
    inputs = [mx.zeros((row.M, row.K), dtype=act), mx.zeros((row.N, row.K // 8), mx.uint32),
              mx.zeros((row.N, row.K // row.group_size), mx.bfloat16),
              mx.zeros((row.N, row.K // row.group_size), mx.bfloat16)]
    kernel = metal._build(v.NAME, v.METAL_SOURCE, v.HEADER)
    gen = source.generated_source(
        kernel, inputs, template=metal.mlx_template(spec),
        grid=spec.grid, threadgroup=spec.threadgroup, output_shapes=[spec.output_shape],
        output_dtypes=[act])
    toolchain.check_source(source.full_source(gen), f"{row.variant}-production")
    # Executed at the production M, K, dtype, group size and params over a column slice.
    mx.random.seed(row.K + row.N + row.M)
    n = row.executed_n
    qw = QWeights.quantize(mx.random.normal((n, row.K)) * 0.05, group_size=row.group_size)
    x = mx.random.normal((row.M, row.K)).astype(dtype)
    y = emulated.launch(v, x, qw, row.params)
    ref = v.portable(x, qw, {**v.DEFAULTS, **row.params})
    bound = getattr(v, "ORACLE_ULPS", oracle.DEFAULT_BOUND)
    oracle.check(row.variant, y, ref, x, qw, dispatch.dtype_name(y.dtype), bound)

"""The exact Metal source MLX compiles for one launch of an ``mx.fast.metal_kernel``.

MLX generates the kernel's signature from the launch (input dtypes and sizes pick ``device`` or
``constant`` buffers; template arguments name the instantiation) and prints the result with
``verbose=True``. Without a Metal back-end the call raises, but under ``mx.export_function`` the
kernel is traced, built and printed all the same: that printout, prefixed with MLX's own utils
preamble (what ``metal::utils()`` prepends in ``custom_kernel.cpp``), is what a Mac compiles.
Nothing here assembles a signature of its own, so it cannot drift from MLX.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator

import mlx.core as mx

from kernels.metal_emu import mlx_metal

_lock = threading.Lock()
_PRINTED = re.compile(r"Generated source code for `[^`]*`:\n```\n(?P<src>.*)\n```\n", re.DOTALL)


@contextlib.contextmanager
def _stdout_to(path: str) -> Iterator[None]:
    """Redirect file descriptor 1 (MLX prints from C++) into ``path`` for the block."""
    sys.stdout.flush()
    saved = os.dup(1)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.dup2(fd, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        os.close(fd)


def generated_source(kernel, inputs: list[mx.array], *, template: list, grid: tuple,
                     threadgroup: tuple, output_shapes: list, output_dtypes: list) -> str:
    """The source MLX generates for this launch (header, signature, body, instantiation)."""

    def call(*args):
        return kernel(inputs=list(args), template=template, grid=grid, threadgroup=threadgroup,
                      output_shapes=output_shapes, output_dtypes=output_dtypes, verbose=True)

    with _lock, tempfile.TemporaryDirectory(prefix="dflash2-trace-") as tmp:
        out = os.path.join(tmp, "stdout")
        with _stdout_to(out):
            mx.export_function(os.path.join(tmp, "k.mlxfn"), call, *inputs)
        with open(out, encoding="utf-8") as f:
            printed = f.read()
    m = _PRINTED.search(printed)
    if m is None:
        raise RuntimeError(f"MLX printed no generated source while tracing: {printed[:200]!r}")
    return m["src"] + "\n"


def full_source(generated: str) -> str:
    """What the Metal compiler receives: MLX's utils preamble, then the generated source."""
    return mlx_metal.utils_preamble() + generated

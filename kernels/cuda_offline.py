"""Compile a variant's CUDA source offline with nvcc, wrapped as MLX's JIT wraps it.

Machines without an NVIDIA GPU (every CI host) can still catch what would otherwise cost a
device call: a syntax error, a template constant the body does not define, or a tile that
spills registers. ``mx.fast.cuda_kernel`` writes the signature (``const T* name`` per input,
``T* name`` per output) and turns template arguments into constants at the top of the body;
``translation_unit`` does the same, so nvcc sees the body MLX's NVRTC would see.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kernels.variants import VARIANTS

C_TYPES = {"bfloat16": "__nv_bfloat16", "float16": "__half", "float32": "float"}


@dataclass(frozen=True)
class PtxasReport:
    registers: int
    spill_bytes: int
    smem_bytes: int


def translation_unit(name: str, dtype: str, constants: dict, header: str | None = None) -> str:
    """``header``: what MLX gets as the kernel's header (``kernels.cuda.kernel_header``: the
    variant's, plus any launch bounds); the variant's own when None."""
    v = VARIANTS[name]
    t = C_TYPES[dtype]
    lines = ["#include <cstdint>", "#include <cuda_bf16.h>", "#include <cuda_fp16.h>",
             v.CUDA_HEADER if header is None else header,
             (f'extern "C" __global__ void dflash2_{name}(const {t}* x, const uint32_t* w, '
              f"const {t}* scales, const {t}* biases, {t}* y) {{"), f"  using T = {t};"]
    lines += [*constant_lines(constants), v.CUDA_SOURCE, "}"]
    return "\n".join(lines) + "\n"


def constant_lines(constants: dict) -> list[str]:
    """The template constants as MLX writes them at the top of a kernel's body (``constexpr``
    lines): what the offline compile and the CUDA emulator (kernels/cuda_emu) both give it."""
    return [f"  constexpr {'bool' if isinstance(v, bool) else 'int'} {k} = "
            f"{str(v).lower() if isinstance(v, bool) else int(v)};" for k, v in constants.items()]


def nvcc() -> str | None:
    return shutil.which("nvcc")


def compile_launch(name: str, cfg) -> PtxasReport:
    """``compile_sm90`` of one launch as MLX would build it: its constants, and its header
    with any launch bounds (``kernels.cuda.kernel_header``); ``cfg`` a ``kernels.cuda``
    LaunchConfig."""
    from kernels import cuda  # imports MLX; this module's other helpers do not need it

    return compile_sm90(name, cfg.activation, cfg.template, cuda.kernel_header(name, cfg))


def ptx(name: str, cfg) -> str:
    """The PTX of one launch as MLX would build it (``compile_launch``'s source): which
    instructions the source asks for, where no disassembler is at hand for the SASS."""
    from kernels import cuda

    return _nvcc_sm90(name, cfg.activation, cfg.template, cuda.kernel_header(name, cfg),
                      "-ptx")[1].decode()


def _nvcc_sm90(name: str, dtype: str, constants: dict, header: str | None,
               *flags: str) -> tuple[str, bytes]:
    """(nvcc's messages, the output file's bytes) of the translation unit for sm_90a, ``flags``
    choosing the output and ptxas' options; RuntimeError with nvcc's output when it does not
    compile."""
    exe = nvcc()
    if exe is None:
        raise RuntimeError("nvcc is not on PATH")
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "k.cu", Path(tmp) / "k.out"
        src.write_text(translation_unit(name, dtype, constants, header))
        r = subprocess.run([exe, "-arch=sm_90a", "-O3", *flags, str(src), "-o", str(out)],
                           capture_output=True, text=True, timeout=300, check=False)
        msgs = r.stdout + r.stderr
        if r.returncode != 0:
            raise RuntimeError(f"{name} {dtype} {constants}: nvcc failed\n{msgs[-2000:]}")
        return msgs, out.read_bytes()


def nvdisasm() -> str | None:
    """nvdisasm from PATH, else from the ``nvidia-cuda-nvdisasm`` wheel (the test extra on
    Linux x86-64: nvcc's toolkit here ships without it)."""
    if exe := shutil.which("nvdisasm"):
        return exe
    try:
        import nvidia
    except ImportError:
        return None
    found = sorted((exe for root in nvidia.__path__ for exe in Path(root).glob("cu*/bin/nvdisasm")),
                   reverse=True)
    return str(found[0]) if found else None


def sass_sm90(name: str, dtype: str, constants: dict, header: str | None = None) -> list[str]:
    """The machine code of the translation unit for sm_90a (``disassemble`` of
    ``cubin_sm90``'s cubin): what a warp issues, which the PTX does not always show."""
    return disassemble(cubin_sm90(name, dtype, constants, header)[1])


def disassemble(cubin: bytes) -> list[str]:
    """nvdisasm's reading of a cubin, one instruction a line (``[@P0] OPCODE.MODIFIERS
    operands``) and labels as ``.L_name:``."""
    exe = nvdisasm()
    if exe is None:
        raise RuntimeError("nvdisasm is not on PATH (pip install nvidia-cuda-nvdisasm)")
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "k.cubin"
        f.write_bytes(cubin)
        text = subprocess.run([exe, "-c", str(f)], capture_output=True, text=True,
                              timeout=120, check=True).stdout
    out = []
    for line in text.splitlines():
        if m := _SASS_LINE.match(line):
            out.append(m[1].strip())
        elif m := _SASS_LABEL.match(line):
            out.append(m[1])
    return out


_SASS_LINE = re.compile(r"\s*/\*[0-9a-f]{4,}\*/\s+([^;]*);")
_SASS_LABEL = re.compile(r"^(\.L\w+:)")


def sass_operands(instruction: str) -> tuple[str, list[str]]:
    """(opcode with its modifiers, operands): ``@P0 LOP3.LUT R1, R2, 0xf, R3, 0xea, !PT`` ->
    ("LOP3.LUT", ["R1", "R2", "0xf", "R3", "0xea", "!PT"]); the predicate is dropped."""
    words = instruction.split(None, 2 if instruction.startswith("@") else 1)
    if instruction.startswith("@"):
        words = words[1:]
    rest = words[1] if len(words) > 1 else ""
    return words[0], [a.strip() for a in rest.split(",")] if rest else []


def sass_opcode(instruction: str) -> str:
    """``@!P0 BRA `(.L_x_1)`` -> BRA; ``LOP3.LUT R1, ...`` -> LOP3."""
    return sass_operands(instruction)[0].split(".")[0]


def hot_loop(sass: list[str], containing: str = "HMMA") -> list[str]:
    """The instructions of the innermost loop that issues ``containing`` (an opcode): from a
    label to a branch back to it, the smallest such span. The smallest, not the longest: ptxas
    puts an mbarrier wait's retry after the kernel's end, and its branch back spans every loop
    it sits in."""
    labels = {line[:-1]: i for i, line in enumerate(sass) if line.endswith(":")}
    best: list[str] | None = None
    for i, line in enumerate(sass):
        if line.endswith(":") or sass_opcode(line) != "BRA":
            continue
        target = re.search(r"`\((\.L\w+)\)", line)
        start = labels.get(target[1]) if target else None
        if start is None or start >= i:
            continue
        body = [x for x in sass[start:i + 1] if not x.endswith(":")]
        if any(sass_opcode(x) == containing for x in body) and (
                best is None or len(body) < len(best)):
            best = body
    return best or []


def compile_sm90(name: str, dtype: str, constants: dict, header: str | None = None) -> PtxasReport:
    """nvcc -arch=sm_90a -cubin (MLX's JIT asks NVRTC for sm_90a on an H200); RuntimeError with
    nvcc's output when it does not compile."""
    return cubin_sm90(name, dtype, constants, header)[0]


def cubin_sm90(name: str, dtype: str, constants: dict,
               header: str | None = None) -> tuple[PtxasReport, bytes]:
    """ptxas' report and the cubin of one nvcc run, for a caller that wants both (the static
    report reads registers and machine code of every tile)."""
    out, cubin = _nvcc_sm90(name, dtype, constants, header, "-cubin", "--ptxas-options=-v")
    regs = re.search(r"Used (\d+) registers", out)
    spill = re.search(r"(\d+) bytes spill stores", out)
    smem = re.search(r"(\d+) bytes smem", out)
    return PtxasReport(int(regs[1]) if regs else 0, int(spill[1]) if spill else 0,
                       int(smem[1]) if smem else 0), cubin

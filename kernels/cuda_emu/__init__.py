"""The mma variants' CUDA sources run on the CPU, by the Metal emulator's SIMT executor.

No NVIDIA GPU is lent to CI, and a device session is 30 minutes: a kernel whose lanes read the
wrong K, or whose lever changes its numbers, should be found before one is spent. Here the
exact kernel body (``CUDA_SOURCE``, with the template constants MLX would give it) is compiled
by clang against a freestanding shim of the CUDA built-ins it uses (``shim/cuda_emu.h``) and
run with one fiber a thread, a block a threadgroup, a warp a SIMD group, in bounds-checked
buffers (kernels/metal_emu/runtime). What is not the source: the headers' inline PTX, whose
semantics ``build.py`` writes in C++ (``mma.sync.m16n8k16`` with PTX's fragment layout, its
products summed exactly and rounded once to float32; ``lop3`` as its boolean function). So an
emulated result checks the lanes, the layouts, the levers and the arithmetic the source asks
for, not the tensor core's own rounding, and nothing about speed.
"""

"""An emulated Apple GPU: the exact Metal source MLX builds, compiled by clang against a shim of
the Metal standard library and run by a SIMT executor on the CPU (bounds-checked buffers,
NaN-filled outputs). See docs/KERNELS.md, "Emulated Apple GPUs"."""

"""DFlash2's verification kernels: variants (Metal source + portable MLX form), the selection
table that picks one per device generation and shape, dispatch, prewarming, microbenchmarks."""

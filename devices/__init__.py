"""What both the runtime (``dflash2``) and its kernels (``kernels``) stand on: which device this
process runs on (``devices.identity``) and the error a user can cause (``devices.errors``).

It sits below both so that imports point one way: ``dflash2 -> kernels -> devices``.
"""

"""DFlash2 speculative-decoding runtime on MLX: block draft of 8, verified in one target pass."""

from dflash2.device import DeviceIdentity, current_device
from dflash2.errors import Dflash2Error

__all__ = ["DeviceIdentity", "Dflash2Error", "current_device"]

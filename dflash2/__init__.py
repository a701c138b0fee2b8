"""DFlash2 speculative-decoding runtime on MLX: block draft of 8, verified in one target pass."""

from devices.errors import Dflash2Error
from devices.identity import DeviceIdentity, current_device

__all__ = ["DeviceIdentity", "Dflash2Error", "current_device"]

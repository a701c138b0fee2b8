"""One exception type for mistakes a user can make (bad spec, bad architecture, bad selector).

Front ends (the farm CLI, the pytest plugin) turn it into one line and a non-zero exit.
"""


class Dflash2Error(ValueError):
    """A user-correctable error; its message names the fix."""

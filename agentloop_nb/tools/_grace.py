"""The default grace periods of tool bodies: a leaf module, so the registry (built by ``App()``)
and the bodies' runner (loaded with the first tool definition) share them without importing
each other."""

from typing import Final

#: Seconds an agent's disposal (and the App's teardown) waits before abandoning a body.
DEFAULT_DISPOSAL_GRACE: Final = 10.0
#: Seconds a body whose call is over (cancel, timeout) may take to end before it is closed:
#: short, so a cancelled turn ends promptly (well within 2 s) whatever its tool bodies do.
DEFAULT_CANCEL_GRACE: Final = 1.0

__all__ = ["DEFAULT_CANCEL_GRACE", "DEFAULT_DISPOSAL_GRACE"]

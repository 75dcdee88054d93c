"""``lazy_re(pattern, flags)``: a regular expression compiled on its first use.

A module-level ``re.compile`` runs at import; the offline model alone has two dozen patterns
that most programs never match (the App builds the offline adapter at every start, and
``%load_ext`` is paid at every kernel start). A :class:`LazyPattern` has the methods the
package calls on a pattern and compiles it once, when one is first called.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any


class LazyPattern:
    """``re.compile(pattern, flags)``, done at the first call of one of its methods."""

    __slots__ = ("_args", "_compiled")

    def __init__(self, pattern: str, flags: int | re.RegexFlag = 0) -> None:
        self._args = (pattern, flags)
        self._compiled: re.Pattern[str] | None = None

    @property
    def compiled(self) -> re.Pattern[str]:
        """The compiled pattern (compiled now if it was not yet)."""
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re.compile(*self._args)
        return compiled

    def match(self, string: str) -> re.Match[str] | None:
        return self.compiled.match(string)

    def fullmatch(self, string: str) -> re.Match[str] | None:
        return self.compiled.fullmatch(string)

    def search(self, string: str) -> re.Match[str] | None:
        return self.compiled.search(string)

    def findall(self, string: str) -> list[Any]:
        return self.compiled.findall(string)

    def finditer(self, string: str) -> Iterator[re.Match[str]]:
        return self.compiled.finditer(string)

    def __repr__(self) -> str:
        return f"lazy_re({self._args[0]!r})"


def lazy_re(pattern: str, flags: int | re.RegexFlag = 0) -> LazyPattern:
    """A pattern compiled on first use; see :class:`LazyPattern`."""
    return LazyPattern(pattern, flags)


__all__ = ["LazyPattern", "lazy_re"]

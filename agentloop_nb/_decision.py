"""``Decision``: the base of the small frozen decision models hooks return (``Allow``,
``Deny``, ``Enter``, ``Retry``, ...). Like the spec's signatures, they accept their fields
positionally too: ``Deny("no network")`` is ``Deny(reason="no network")``."""

from typing import Any

from pydantic import BaseModel, ConfigDict

from .errors import InvalidTypeError


class Decision(BaseModel):
    # defer_build: validators are built on first use, not at import (start-up cost)
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    def __init__(self, /, *args: Any, **kwargs: Any) -> None:
        if args:
            names = [n for n in type(self).model_fields if n != "kind"]
            if len(args) > len(names):
                raise InvalidTypeError(
                    f"{type(self).__name__}() takes at most {len(names)} positional "
                    f"argument(s) ({', '.join(names) or 'none'}), got {len(args)}"
                )
            for name, value in zip(names, args, strict=False):
                if name in kwargs:
                    raise InvalidTypeError(
                        f"{type(self).__name__}() got multiple values for {name!r}"
                    )
                kwargs[name] = value
        super().__init__(**kwargs)

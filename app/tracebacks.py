"""Cheaper exception info for Celery's retry path.

Every ``Retry`` a task raises makes Celery build a ``billiard.einfo.ExceptionInfo``, which
copies each traceback frame's code object, and on Python 3.11+ that copy lists every
instruction position of the code (``list(code.co_positions())``). For Celery's large tracer
function that is thousands of tuples per retry: measured at 47 % of a worker's CPU when every
attempt fails and is retried (45 retries/s on one worker). The positions are only needed if the
traceback is formatted or pickled later, which for a retry it almost never is, so this computes
them on first use instead. The copy is otherwise billiard's own.
"""

from __future__ import annotations

import sys
from types import CodeType
from typing import Any

from billiard import einfo


class LazyCode(einfo._Code):
    """billiard's code copy, with the instruction positions read only when asked for."""

    def __init__(self, code: CodeType) -> None:
        self.co_filename = code.co_filename
        self.co_name = code.co_name
        self.co_argcount = code.co_argcount
        self.co_cellvars = ()
        self.co_firstlineno = code.co_firstlineno
        self.co_flags = code.co_flags
        self.co_freevars = ()
        self.co_code = b""
        self.co_lnotab = b""
        self.co_names = code.co_names
        self.co_nlocals = code.co_nlocals
        self.co_stacksize = code.co_stacksize
        self.co_varnames = ()
        self.co_qualname = code.co_qualname
        self._code: CodeType | None = code

    def _positions(self) -> list[Any]:
        positions = self.__dict__.get("_co_positions")
        if positions is None:
            code = self.__dict__.get("_code")
            positions = list(code.co_positions()) if code is not None else []
            self.__dict__["_co_positions"] = positions
        return positions

    @property
    def co_positions(self) -> Any:
        return self._positions().__iter__

    def __reduce__(self) -> Any:
        # Pickled as billiard's own copy (prefork sends exception info to the parent).
        self._positions()
        state = {key: value for key, value in self.__dict__.items() if key != "_code"}
        return einfo._Code.__new__, (einfo._Code,), state


def install() -> None:
    """Make billiard's frame copies use :class:`LazyCode` (Python 3.11+, billiard 4.x)."""
    if sys.version_info >= (3, 11) and hasattr(einfo, "_Frame") and hasattr(einfo, "_Code"):
        einfo._Frame.Code = LazyCode

"""Handing the memory an answer freed back to the operating system.

glibc keeps freed memory in its arenas for the next allocation, and pyarrow's allocator
keeps its own: an agent that answered a large request stays that large between syncs
(measured at 10M rows: 225 MiB RSS after the first sketch sync against 157 at start),
and the next sync's peak starts from there. After each answer the agent asks both to
return what is free.
"""

from __future__ import annotations

import ctypes
import ctypes.util

import pyarrow as pa

_LIBC_NAME = ctypes.util.find_library("c")
_LIBC = ctypes.CDLL(_LIBC_NAME) if _LIBC_NAME else None


def release() -> bool:
    """Return the free memory of pyarrow's pool and of glibc's arenas; False where the C
    library has no `malloc_trim` (not glibc).

    >>> release() in (True, False)
    True
    """
    pa.default_memory_pool().release_unused()
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is None:
        return False
    trim(0)
    return True

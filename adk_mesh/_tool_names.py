"""Tool names as model providers take them, and a name that fits for one some refuse.

Providers differ: OpenAI (Chat Completions and Responses) takes ``^[a-zA-Z0-9_-]{1,64}$``,
Anthropic ``^[a-zA-Z0-9_-]{1,128}$``, Gemini also ``.`` and ``:`` but wants a letter or ``_``
first. A *portable* name (letters, digits, ``_``, ``-``; a letter or ``_`` first; at most 64)
fits them all. :func:`fitted_name` makes one for a name that is not: McpToolset offers a
server's tool under it, and a provider adapter sends a declared tool (and the calls and
responses of earlier turns) under it, mapping the model's calls back to the real name.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection

__all__ = ["PORTABLE_NAME", "PORTABLE_NAME_MAX", "fitted_name"]

#: The longest name every provider takes (OpenAI's limit; Anthropic takes 128).
PORTABLE_NAME_MAX = 64
#: A function name every model provider takes.
PORTABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
_REFUSED_CHARACTER = re.compile(r"[^A-Za-z0-9_-]")


def fitted_name(name: str, taken: Collection[str]) -> str:
    """A portable name for ``name``, none of ``taken``: other characters become ``_``, one
    that does not start with a letter gets a ``_`` first, and one too long or already
    ``taken`` is cut and ends with a digest of ``name`` (so the same ``name`` gets the same
    name from one listing, or one request, to the next)."""
    fitted = _REFUSED_CHARACTER.sub("_", name)
    if not fitted[:1].isalpha():
        fitted = f"_{fitted}"
    if len(fitted) <= PORTABLE_NAME_MAX and fitted not in taken:
        return fitted
    seed = name
    while True:
        digest = hashlib.sha256(seed.encode()).hexdigest()[:8]
        candidate = f"{fitted[: PORTABLE_NAME_MAX - len(digest) - 1]}_{digest}"
        if candidate not in taken:
            return candidate
        # Another name already has this one (a 32-bit digest can meet one): digest again,
        # still deterministically, so the answer does not depend on luck.
        seed += "\0"

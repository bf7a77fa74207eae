"""The remaining time travels on: deadlines in from served calls, out on outgoing calls.

A served call's deadline (``context.time_remaining()``) becomes the invocation's
``deadline`` (``time.monotonic()`` based); every outgoing call made for that invocation gets
the time that remains, or its own configured timeout when that is shorter. A deadline that
has already passed fails at once with :class:`~adk_mesh.errors.DeadlineExceededError`
instead of making a call that cannot succeed.
"""

from __future__ import annotations

import time

import grpc.aio

from adk_mesh.errors import DeadlineExceededError

__all__ = ["call_timeout", "deadline_of"]


#: What a hop takes off the time it received: gRPC rounds the ``grpc-timeout`` it sends *up*
#: (to 1 ms below 1 s, 10 ms below 10 s, 100 ms below 100 s: at most 1 %) from a clock it
#: caches, so the time a server reads can exceed what its caller had left by a few
#: milliseconds. Taking this off keeps every downstream deadline at or before its caller's,
#: so an inner call runs out first and the caller receives the inner failure.
_FIXED_SLACK = 0.005
_RELATIVE_SLACK = 0.01

#: The longest timeout an outgoing call is given. gRPC for Python turns a timeout into a
#: wall-clock deadline in signed 64-bit nanoseconds, which end in 2262: a longer one fails
#: the call at once with DEADLINE_EXCEEDED. Go and Java clients send deadlines up to 292
#: years away (their largest, which some use for "none"); a century is as good as none.
_MAX_CALL_TIMEOUT = 100 * 365 * 86_400.0


def deadline_of(context: grpc.aio.ServicerContext) -> float | None:
    """The ``time.monotonic()`` deadline of the call being served, a little before the
    caller's own (see ``_FIXED_SLACK``); ``None`` without one."""
    remaining: float | None = context.time_remaining()
    if remaining is None:
        return None
    return time.monotonic() + remaining * (1 - _RELATIVE_SLACK) - _FIXED_SLACK


def call_timeout(deadline: float | None, configured: float | None, what: str) -> float | None:
    """The timeout of an outgoing call: the time left until ``deadline``, or ``configured``
    when that is shorter; ``None`` when neither bounds it.

    Raises:
        DeadlineExceededError: the deadline has already passed; ``what`` names the call.
    """
    if deadline is None:
        return configured
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise DeadlineExceededError(
            f"{what}: the invocation's deadline passed {-remaining:.3f}s ago; not calling"
        )
    remaining = min(remaining, _MAX_CALL_TIMEOUT)
    return remaining if configured is None else min(remaining, configured)

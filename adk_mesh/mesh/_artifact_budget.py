"""The artifact bytes an agent service holds in transfer at once, bounded.

A save through ``SaveArtifactStream`` holds the whole artifact in memory before the store takes
it (whole or not at all), and a load holds what the store returned while a slow client reads
it. One artifact is bounded (``max_artifact_bytes``), but nothing else bounded how many of them
a service held at once: a few clients saving large artifacts together could take more memory
than the service's container has, and the orchestrator would kill it with every turn it was
running. The same goes for the artifacts a delegated run loads from its caller in chunks
(``RunDelegated``), held until the last chunk is in. :class:`ArtifactBudget` bounds the sum.
A transfer takes its bytes before it holds them (a save: the size its header announces, before
a byte is read) and gives them back when it ends, however it ends; one that does not fit
beside the others is refused at once with
:class:`~adk_mesh.errors.ArtifactsBusyError` (RESOURCE_EXHAUSTED: retry later), never queued,
so a waiting client holds no memory and no call slot.

One event loop uses it (the server's): no lock.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from adk_mesh.errors import ArtifactsBusyError, ArtifactTooLargeError, ConfigError

__all__ = [
    "DEFAULT_MAX_ARTIFACT_BYTES",
    "IN_FLIGHT_ARTIFACTS",
    "MAX_ARTIFACT_BYTES_LIMIT",
    "ArtifactBudget",
    "service_budget",
]

#: The largest artifact a service takes through the session API's streams or a call's chunks
#: by default (``max_artifact_bytes``). The store receives the artifact whole (the
#: ArtifactService contract takes a Part), so a save holds it in memory, twice for a moment
#: (the chunks joined): this bounds what one call may make the service hold.
DEFAULT_MAX_ARTIFACT_BYTES = 256 * 1024 * 1024
#: The largest ``max_artifact_bytes``: a PostgreSQL field holds less than 1 GB.
MAX_ARTIFACT_BYTES_LIMIT = 2**30 - 1
#: A service holds at most this many largest artifacts in transfer at once by default
#: (``max_artifact_bytes_in_flight``): a save holds its bytes twice for a moment (as they
#: come, then joined), so two of 256 MiB take ~1 GiB at their peak.
IN_FLIGHT_ARTIFACTS = 2


class ArtifactBudget:
    """At most ``limit`` bytes of artifacts in transfer at once.

    Raises:
        ConfigError: a limit below ``largest`` (the largest artifact the service takes, which
            could then never be saved).
    """

    def __init__(self, limit: int, *, largest: int) -> None:
        if limit < largest:
            raise ConfigError(
                f"max_artifact_bytes_in_flight is {limit}, below max_artifact_bytes "
                f"({largest}): an artifact of the largest size could never be saved; give "
                f"{largest} or more"
            )
        self.limit = limit
        #: Bytes taken by the transfers under way.
        self.held = 0

    def take(self, size: int, what: str, metadata: dict[str, str]) -> None:
        """Count ``size`` bytes as held until :meth:`give_back` (``what``: the artifact and
        whether it is saved or loaded, for the refusal's message).

        Raises:
            ArtifactTooLargeError: more bytes than the whole budget (an artifact a tool saved
                in process, where nothing bounds it): no wait makes room for it.
            ArtifactsBusyError: the bytes do not fit beside those already held.
        """
        if size > self.limit:
            raise ArtifactTooLargeError(
                f"{what} is {size} bytes, more than this service holds in transfer at once "
                f"({self.limit} bytes)",
                metadata={**metadata, "size_bytes": str(size), "limit_bytes": str(self.limit)},
            )
        if self.held + size > self.limit:
            raise ArtifactsBusyError(
                f"{what} ({size} bytes) does not fit now: this service holds {self.held} "
                f"bytes of artifacts in transfer, and at most {self.limit} at once; nothing "
                "was changed, try again after a while",
                metadata={
                    **metadata,
                    "size_bytes": str(size),
                    "in_flight_bytes": str(self.held),
                    "limit_bytes": str(self.limit),
                },
            )
        self.held += size

    def give_back(self, size: int) -> None:
        """The end of a transfer that took ``size`` bytes."""
        self.held -= size

    @contextmanager
    def holding(self, size: int, what: str, metadata: dict[str, str]) -> Iterator[None]:
        """:meth:`take` ``size`` bytes for the ``with`` block, given back however it ends."""
        self.take(size, what, metadata)
        try:
            yield
        finally:
            self.give_back(size)


def service_budget(
    max_artifact_bytes: int, max_artifact_bytes_in_flight: int | None
) -> ArtifactBudget:
    """The budget of a service that takes artifacts of at most ``max_artifact_bytes`` and holds
    at most ``max_artifact_bytes_in_flight`` of them at once (``None``: the default,
    :data:`IN_FLIGHT_ARTIFACTS` largest ones).

    Raises:
        ConfigError: ``max_artifact_bytes`` not 1 to :data:`MAX_ARTIFACT_BYTES_LIMIT`, or
            the bytes in flight below it.
    """
    if not 0 < max_artifact_bytes <= MAX_ARTIFACT_BYTES_LIMIT:
        raise ConfigError(
            f"max_artifact_bytes is {max_artifact_bytes}; give 1 to "
            f"{MAX_ARTIFACT_BYTES_LIMIT} (the most a PostgreSQL artifact store holds)"
        )
    return ArtifactBudget(
        max_artifact_bytes * IN_FLIGHT_ARTIFACTS
        if max_artifact_bytes_in_flight is None
        else max_artifact_bytes_in_flight,
        largest=max_artifact_bytes,
    )

"""The CredentialService contract, and the services that combine others."""

from __future__ import annotations

import abc
import re
from collections.abc import Mapping, Sequence

from adk_mesh.credentials._credential import Credential
from adk_mesh.errors import ConfigError
from adk_mesh.ids import check_name

__all__ = [
    "MAX_CREDENTIAL_NAME_CHARS",
    "ChainCredentialService",
    "CredentialService",
    "StaticCredentialService",
    "check_credential_name",
]

MAX_CREDENTIAL_NAME_CHARS = 128
# What a Kubernetes Secret key allows, minus a leading dot (its mounts' ``..data`` entries).
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def check_credential_name(name: str) -> str:
    """``name`` when it is a credential name: 1 to 128 letters, digits, ``_``, ``-`` and ``.``,
    not starting with ``.`` or ``-`` (so it is a file name and never a path).

    Raises:
        InvalidArgumentError: it is not.
    """
    return check_name(
        name,
        _NAME,
        MAX_CREDENTIAL_NAME_CHARS,
        f"is not a credential name: use 1 to {MAX_CREDENTIAL_NAME_CHARS} letters, digits, '_', "
        "'-' and '.', starting with a letter, a digit or '_'",
    )


class CredentialService(abc.ABC):
    """Where tools get their API keys and tokens, by name.

    Contract:

    * :meth:`get` returns the :class:`Credential` called ``name`` for ``user_id`` in
      ``app_name``, or ``None`` when this service has none by that name (a chain then asks the
      next one). A backend may ignore ``app_name`` and ``user_id`` (the environment and file
      backends hold one credential per name for the whole service) or use them to hand out
      per-user tokens.
    * It raises :class:`~adk_mesh.errors.InvalidArgumentError` for a name outside
      :func:`check_credential_name`'s rule, and :class:`~adk_mesh.errors.ConfigError` when
      the credential exists but cannot be used as configured (a file other users may read);
      a message names the credential and the fix, never the value.
    * It is called concurrently, from the tools of every invocation of its service; it is
      read at each call (no caching is required, so a rotated secret is picked up).
    * Nothing here persists or logs values: the runtime keeps what it handed out in memory,
      for the invocation, only to redact it from what the tool returns.
    """

    @abc.abstractmethod
    async def get(self, name: str, *, app_name: str, user_id: str) -> Credential | None:
        """The credential called ``name``, or ``None``."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the service holds (a client of a vault, say). Idempotent."""


class StaticCredentialService(CredentialService):
    """Credentials given as a mapping of names to values (tests, and the credentials a caller
    forwarded with a delegated run)."""

    def __init__(self, values: Mapping[str, str | Credential]) -> None:
        self._credentials: dict[str, Credential] = {}
        for name, value in values.items():
            check_credential_name(name)
            self._credentials[name] = (
                value if isinstance(value, Credential) else Credential(name, value)
            )

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._credentials)

    async def get(self, name: str, *, app_name: str, user_id: str) -> Credential | None:
        return self._credentials.get(check_credential_name(name))

    def __repr__(self) -> str:
        return f"StaticCredentialService(names={sorted(self._credentials)!r})"


class ChainCredentialService(CredentialService):
    """Asks ``services`` in order; the first that has the name answers."""

    def __init__(self, services: Sequence[CredentialService]) -> None:
        if isinstance(services, CredentialService):
            raise ConfigError("ChainCredentialService takes a list of services")
        self.services = tuple(services)
        for service in self.services:
            if not isinstance(service, CredentialService):
                raise ConfigError(
                    f"ChainCredentialService takes CredentialServices, not {type(service).__name__}"
                )

    async def get(self, name: str, *, app_name: str, user_id: str) -> Credential | None:
        check_credential_name(name)
        for service in self.services:
            found = await service.get(name, app_name=app_name, user_id=user_id)
            if found is not None:
                return found
        return None

    async def close(self) -> None:
        for service in self.services:
            await service.close()

"""Credentials from environment variables: ``weather_api`` is
``ADK_MESH_CREDENTIAL_WEATHER_API``."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from adk_mesh.credentials._credential import Credential
from adk_mesh.credentials.base import CredentialService, check_credential_name
from adk_mesh.errors import ConfigError

__all__ = ["DEFAULT_PREFIX", "EnvironmentCredentialService", "environment_variable"]

DEFAULT_PREFIX = "ADK_MESH_CREDENTIAL_"


def environment_variable(name: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The variable that holds credential ``name``: the prefix, then the name in upper case
    with ``-`` and ``.`` as ``_`` (so ``weather-api`` and ``weather_api`` are one variable)."""
    return prefix + re.sub(r"[^A-Z0-9_]", "_", check_credential_name(name).upper())


class EnvironmentCredentialService(CredentialService):
    """Each credential is one environment variable (see :func:`environment_variable`), read
    at each :meth:`get`, without one trailing newline (as the file store reads a file). A
    variable that is unset or empty holds no credential.

    Args:
        prefix: what every variable starts with (default ``ADK_MESH_CREDENTIAL_``): only
            variables meant as credentials are ever read, never the rest of the environment.
        environ: the variables (default: the process environment).
    """

    def __init__(
        self, prefix: str = DEFAULT_PREFIX, *, environ: Mapping[str, str] | None = None
    ) -> None:
        self.prefix = prefix
        self._environ = environ

    async def get(self, name: str, *, app_name: str, user_id: str) -> Credential | None:
        environ = os.environ if self._environ is None else self._environ
        variable = environment_variable(name, self.prefix)
        value = environ.get(variable, "")
        try:
            value.encode()
        except UnicodeEncodeError:
            # Bytes that are not UTF-8 (os.environ keeps them as surrogates): no header, no
            # forwarded credential and no redaction could carry them.
            raise ConfigError(
                f"credential {name!r} (${variable}) is not UTF-8 text; set it as UTF-8"
            ) from None
        # As the file store: a variable set from a file (a Kubernetes secretKeyRef of a
        # Secret made with ``--from-file``) often ends with the file's newline, which no
        # header can carry.
        value = value.removesuffix("\n").removesuffix("\r")
        return Credential(name, value) if value else None

    def __repr__(self) -> str:
        return f"EnvironmentCredentialService(prefix={self.prefix!r})"

"""Credentials from a directory of files, one per name, as a Kubernetes Secret is mounted."""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from pathlib import Path

from adk_mesh.credentials._credential import Credential
from adk_mesh.credentials.base import CredentialService, check_credential_name
from adk_mesh.errors import ConfigError

__all__ = ["MAX_CREDENTIAL_BYTES", "FileCredentialService"]

#: The largest credential file read (a key, a token, a certificate: all far smaller).
MAX_CREDENTIAL_BYTES = 64 * 1024


#: Permission bits that let users other than the owner change or run a credential file, or
#: read it outside its group.
_OTHERS_MAY_USE = stat.S_IWGRP | stat.S_IXGRP | stat.S_IRWXO


def _group_is_ours(gid: int) -> bool:
    """Whether ``gid`` is this process's group (effective or supplementary): a Kubernetes pod
    with an ``fsGroup`` gets its Secret files in that group, readable by it (0440 whatever
    ``defaultMode`` says: kubernetes/kubernetes#57923), and a non-root pod cannot read them
    any other way."""
    return gid == os.getegid() or gid in os.getgroups()


class FileCredentialService(CredentialService):
    """Credential ``name`` is the file ``directory/name``, read at each :meth:`get` (so a
    rotated Secret is picked up without a restart); no file, or an empty one: no credential.

    The file's text is the value, without one trailing newline (``echo`` adds one). A file
    that other users could read or write (any permission bit for others, group write, group
    read unless the file's group is this process's own — a pod's ``fsGroup``) is refused with
    a :class:`~adk_mesh.errors.ConfigError` naming it and the fix, and so is one that is not a
    regular file, lies outside the directory once symbolic links are followed (a Kubernetes
    mount's ``name -> ..data/name`` links stay inside), is larger than
    :data:`MAX_CREDENTIAL_BYTES` or is not UTF-8 text. For a Kubernetes Secret volume, set
    ``defaultMode: 0400`` (its default, 0644, lets every user of the container read it).

    Raises:
        ConfigError: ``directory`` is not a directory.
    """

    def __init__(self, directory: str | Path) -> None:
        path = Path(directory)
        if not path.is_dir():
            raise ConfigError(f"the credentials directory {str(path)!r} is not a directory")
        self.directory = path

    async def get(self, name: str, *, app_name: str, user_id: str) -> Credential | None:
        check_credential_name(name)
        return await asyncio.to_thread(self._read, name)

    def _read(self, name: str) -> Credential | None:
        path = self.directory / name
        shown = f"credential {name!r} ({str(path)!r})"
        try:
            # Non-blocking: a FIFO in the directory is refused below, not waited on forever.
            flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
            descriptor = os.open(path, flags)
        except FileNotFoundError:
            return None
        except OSError as error:
            if error.errno in (errno.ENOTDIR, errno.ELOOP):
                return None
            raise ConfigError(f"cannot read {shown}: {error.strerror}") from None
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            os.close(descriptor)
            raise ConfigError(f"{shown} is not a regular file")
        with os.fdopen(descriptor, "rb") as file:
            mode = stat.S_IMODE(status.st_mode)
            if mode & _OTHERS_MAY_USE or (
                mode & stat.S_IRGRP and not _group_is_ours(status.st_gid)
            ):
                raise ConfigError(
                    f"{shown} has permissions {mode:04o}: other users could read or change "
                    "it; chmod 600 (or 400) it — on Kubernetes, set the Secret volume's "
                    "defaultMode: 0400"
                )
            inside = self.directory.resolve()
            if inside not in path.resolve().parents:
                raise ConfigError(f"{shown} leads outside the credentials directory")
            data = file.read(MAX_CREDENTIAL_BYTES + 1)
        if len(data) > MAX_CREDENTIAL_BYTES:
            raise ConfigError(f"{shown} is larger than {MAX_CREDENTIAL_BYTES} bytes")
        try:
            value = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"{shown} is not UTF-8 text") from None
        value = value.removesuffix("\n").removesuffix("\r")
        return Credential(name, value) if value else None

    def __repr__(self) -> str:
        return f"FileCredentialService({str(self.directory)!r})"

"""The TLS client context of one SMTP transport: whom it trusts (a CA file or directory, else
the system's), whether it verifies at all, and the client certificate it presents.

The context is built for the transport and given to it: nothing here changes the process's
trust (``SSL_CERT_FILE``, Redis TLS), so a relay's private CA is trusted for SMTP only.
"""

from __future__ import annotations

import logging
import os
import ssl
from dataclasses import dataclass

log = logging.getLogger(__name__)

#: Whether the "verification is off" warning was logged in this process (a forked pool
#: process inherits it, so a worker logs it once, at start).
_WARNED_UNVERIFIED = False


class TlsFileError(ValueError):
    """A file of :class:`TlsOptions` that cannot be used; ``option`` names the field
    (``ca_file``, ``ca_dir``, ``cert_file``, ``key_file``)."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


@dataclass(frozen=True)
class TlsOptions:
    """What an SMTP transport's TLS context is built from.

    ``ca_file`` (PEM, one or more certificates) and ``ca_dir`` (a directory hashed by
    ``openssl rehash``) replace the system's trust store when either is given; ``verify``
    False accepts any certificate and any host name (for a relay on the same host, never over a
    network). ``cert_file`` (PEM, the key inside or in ``key_file``) is the client certificate.
    """

    ca_file: str | None = None
    ca_dir: str | None = None
    verify: bool = True
    cert_file: str | None = None
    key_file: str | None = None

    @property
    def default(self) -> bool:
        """True when nothing is set: the system's trust store, verified, no client certificate."""
        return self == TlsOptions()


def client_context(options: TlsOptions) -> ssl.SSLContext:
    """The client context ``options`` describe. Raises :class:`TlsFileError` (one line naming
    the file and why) for a file or directory that is missing, unreadable or not PEM."""
    _readable("ca_file", options.ca_file, directory=False)
    _readable("ca_dir", options.ca_dir, directory=True)
    _readable("cert_file", options.cert_file, directory=False)
    _readable("key_file", options.key_file, directory=False)
    if options.key_file and not options.cert_file:
        raise TlsFileError("key_file", "a key file needs its certificate file (cert_file) too")
    try:  # with a CA file or directory: those CAs only, not the system's
        context = ssl.create_default_context(cafile=options.ca_file, capath=options.ca_dir)
    except ssl.SSLError as exc:
        which = "ca_file" if options.ca_file else "ca_dir"
        raise TlsFileError(which, f"not PEM certificates: {exc.reason or exc}") from None
    if not options.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if options.cert_file:
        try:
            context.load_cert_chain(options.cert_file, options.key_file)
        except ssl.SSLError as exc:
            raise TlsFileError(
                "cert_file", f"not a PEM certificate and its key: {exc.reason or exc}"
            ) from None
    return context


def warn_unverified(where: str) -> None:
    """Log, once per worker, that certificates are not verified for ``where`` (a host:port)."""
    global _WARNED_UNVERIFIED  # noqa: PLW0603 - once per process, inherited by forked children
    if not _WARNED_UNVERIFIED:
        _WARNED_UNVERIFIED = True
        log.warning(
            "SMTP TLS to %s does not verify the server's certificate (MAILGUARD_SMTP_VERIFY=off):"
            " anyone on the path can read the mail and the password",
            where,
        )


def _readable(option: str, path: str | None, *, directory: bool) -> None:
    if not path:
        return
    kind = "directory" if directory else "file"
    if not os.path.exists(path):
        raise TlsFileError(option, f"no such {kind}: {path}")
    if directory != os.path.isdir(path):
        raise TlsFileError(option, f"not a {kind}: {path}")
    if not os.access(path, os.R_OK | (os.X_OK if directory else 0)):
        raise TlsFileError(option, f"cannot read the {kind} {path} (permissions)")

"""What a real relay needs, against a real aiosmtpd server with certificates made by
``openssl``: the SMTP transport's own CA file and directory, verification off, a client
certificate, the EHLO name, and the reserved domains an internal relay delivers; each setting
read from ``MAILGUARD_*`` and refused in one line naming it."""

from __future__ import annotations

import logging
import shutil
import socket
import ssl
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from devservers.smtp_server import SmtpTestServer, TestCertificate
from mailer.errors import InvalidAddress, SendError
from mailer.factory import build_suppressions, build_transport
from mailer.mail import address
from mailer.mail.address import DEFAULT_RULES, AddressRules
from mailer.mail.arguments import InvalidArguments, check_arguments
from mailer.mail.envelope import Envelope, addresses_of, envelope_of
from mailer.mail.message import Mail
from mailer.mail.transports import SmtpTransport, smtp_tls
from mailer.mail.transports.smtp_tls import TlsOptions, client_context
from mailer.settings import Settings


def envelope(to: str = "ada@example.com", rules: AddressRules = DEFAULT_RULES) -> Envelope:
    mail = Mail(
        to=to, subject="Code", body="482913\n", mail_id="m-1", sender="noreply@sender.example"
    )
    return envelope_of(replace(mail, addresses=addresses_of(mail, rules)))


def no_sleep(seconds: float) -> None:
    """Tenacity's waits, skipped."""


@pytest.fixture(scope="module")
def other_certificate(tmp_path_factory: pytest.TempPathFactory) -> TestCertificate:
    """A second self-signed certificate: not the server's (an untrusted CA, a client's)."""
    return TestCertificate.create(tmp_path_factory.mktemp("other-cert"))


def starttls(server: SmtpTestServer, context: ssl.SSLContext | None) -> SmtpTransport:
    return SmtpTransport.from_url(
        f"smtp+starttls://127.0.0.1:{server.port}", ssl_context=context, sleep=no_sleep
    )


def from_env(**variables: str) -> Settings:
    return Settings.from_env({f"MAILGUARD_{k}": v for k, v in variables.items()})


# --- trust ----------------------------------------------------------------------------------


def test_a_ca_file_verifies_the_relays_self_signed_certificate(
    test_certificate: TestCertificate,
) -> None:
    """``MAILGUARD_SMTP_CA_FILE`` (the relay's self-signed certificate): STARTTLS verifies it
    and the mail arrives; the process's own trust is untouched."""
    settings = from_env(SMTP_CA_FILE=str(test_certificate.cert))
    context = client_context(settings.transport_options().smtp_tls)
    with SmtpTestServer(tls="starttls", cert=test_certificate) as server:
        receipt = starttls(server, context).send(envelope())
        assert receipt.code == 250
        assert len(server.delivered) == 1
    assert ssl.get_default_verify_paths().cafile != str(test_certificate.cert)


def test_a_ca_directory_verifies_the_relays_certificate(
    test_certificate: TestCertificate, tmp_path: Path
) -> None:
    """``MAILGUARD_SMTP_CA_DIR``: a directory hashed by ``openssl rehash``."""
    shutil.copy(test_certificate.cert, tmp_path / "relay.pem")
    subprocess.run(["openssl", "rehash", str(tmp_path)], check=True, capture_output=True)
    with SmtpTestServer(tls="starttls", cert=test_certificate) as server:
        starttls(server, client_context(TlsOptions(ca_dir=str(tmp_path)))).send(envelope())
        assert len(server.delivered) == 1


def test_a_certificate_the_ca_file_does_not_vouch_for_fails_without_a_retry(
    test_certificate: TestCertificate, other_certificate: TestCertificate
) -> None:
    """The relay's certificate is not signed by the configured CA: a configuration error
    (certificate verification failed), not retried, nothing sent."""
    context = client_context(TlsOptions(ca_file=str(other_certificate.cert)))
    with SmtpTestServer(tls="starttls", cert=test_certificate) as server:
        with pytest.raises(SendError, match="CERTIFICATE_VERIFY_FAILED") as info:
            starttls(server, context).send(envelope())
        assert info.value.attempts == 1
        assert server.delivered == []


def test_verify_off_connects_to_an_untrusted_relay_and_warns_once(
    test_certificate: TestCertificate,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``MAILGUARD_SMTP_VERIFY=off``: any certificate is accepted; one warning per process,
    however many transports are built (a worker's start and its pool processes)."""
    monkeypatch.setattr(smtp_tls, "_WARNED_UNVERIFIED", False)
    settings = from_env(SMTP_VERIFY="off")
    context = client_context(settings.transport_options().smtp_tls)
    with SmtpTestServer(tls="starttls", cert=test_certificate) as server:
        caplog.set_level(logging.WARNING, "mailer.mail.transports.smtp_tls")
        starttls(server, context).send(envelope())
        starttls(server, context)
        assert len(server.delivered) == 1
    warnings = [r for r in caplog.records if "does not verify" in r.getMessage()]
    assert len(warnings) == 1
    assert "MAILGUARD_SMTP_VERIFY=off" in warnings[0].getMessage()


def test_the_client_certificate_is_presented(
    test_certificate: TestCertificate, other_certificate: TestCertificate
) -> None:
    """``MAILGUARD_SMTP_CERT_FILE`` / ``_KEY_FILE``: a relay that demands a client certificate
    gets it (the server records its subject); without one the handshake fails."""
    options = TlsOptions(
        ca_file=str(test_certificate.cert),
        cert_file=str(other_certificate.cert),
        key_file=str(other_certificate.key),
    )
    with SmtpTestServer(
        tls="starttls", cert=test_certificate, client_ca=other_certificate.cert
    ) as server:
        starttls(server, client_context(options)).send(envelope())
        assert len(server.delivered) == 1
        subject = dict(pair[0] for pair in server.handler.peer_certs[0]["subject"])
        assert subject["commonName"] == "127.0.0.1"
        without = client_context(TlsOptions(ca_file=str(test_certificate.cert)))
        with pytest.raises(SendError):
            starttls(server, without).send(envelope())
        assert len(server.delivered) == 1


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("SMTP_CA_FILE", "/nonexistent/ca.pem", "no such file: /nonexistent/ca.pem"),
        ("SMTP_CA_DIR", "/nonexistent", "no such directory"),
        ("SMTP_CERT_FILE", "/nonexistent/client.pem", "no such file"),
        ("SMTP_CA_FILE", "/etc", "not a file"),
    ],
)
def test_a_missing_file_is_one_line_naming_the_variable(
    variable: str, value: str, said: str
) -> None:
    """What a worker's start builds (:func:`mailer.factory.build_transport`) refuses a file
    it cannot use in one line that starts with the variable."""
    settings = from_env(SMTP_URL="smtp+starttls://relay.example:587", **{variable: value})
    with pytest.raises(ValueError, match=f"^MAILGUARD_{variable}: ") as info:
        build_transport(settings)
    assert said in str(info.value)
    assert "\n" not in str(info.value)


def test_a_file_that_is_not_pem_and_an_unreadable_file_are_refused(
    tmp_path: Path, test_certificate: TestCertificate
) -> None:
    """A CA file that holds no certificate, a client certificate without its key, a key
    without its certificate, each refused naming the variable."""
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    cases = {
        "SMTP_CA_FILE": {"SMTP_CA_FILE": str(junk)},
        "SMTP_CERT_FILE": {"SMTP_CERT_FILE": str(test_certificate.cert)},  # no key inside
        "SMTP_KEY_FILE": {"SMTP_KEY_FILE": str(test_certificate.key)},
    }
    for variable, env in cases.items():
        settings = from_env(SMTP_URL="smtps://relay.example", **env)
        with pytest.raises(ValueError, match=f"^MAILGUARD_{variable}: "):
            build_transport(settings)


def test_settings_refuse_a_bad_verify_count_idle_and_ehlo() -> None:
    """Each bad value: one line naming its variable."""
    bad = {
        "SMTP_VERIFY": "maybe",
        "SMTP_SESSION_MAILS": "0",
        "SMTP_SESSION_IDLE": "2h",
        "SMTP_EHLO": "mail example",
        "ALLOW_RESERVED_DOMAINS": "example.com",
    }
    for variable, value in bad.items():
        with pytest.raises(ValueError, match=f"^MAILGUARD_{variable}"):
            from_env(**{variable: value})


# --- EHLO -----------------------------------------------------------------------------------


def test_the_ehlo_name_is_the_setting_or_the_hosts_fqdn(smtp_server: SmtpTestServer) -> None:
    """``MAILGUARD_SMTP_EHLO`` is what the server sees; unset, the host's FQDN."""
    named = build_transport(from_env(SMTP_URL=smtp_server.url, SMTP_EHLO="mail.example.org"))
    named.send(envelope())
    default = build_transport(from_env(SMTP_URL=smtp_server.url))
    default.send(envelope())
    assert smtp_server.handler.ehlo_names == ["mail.example.org", socket.getfqdn()]


def test_the_session_settings_reach_the_transport(smtp_server: SmtpTestServer) -> None:
    """``MAILGUARD_SMTP_SESSION_MAILS=2``: four mails, two connections."""
    transport = build_transport(from_env(SMTP_URL=smtp_server.url, SMTP_SESSION_MAILS="2"))
    for _ in range(4):
        transport.send(envelope())
    assert smtp_server.connections == 2


# --- reserved domains -----------------------------------------------------------------------


def test_reserved_domains_are_refused_by_default_and_admitted_by_the_setting(
    smtp_server: SmtpTestServer,
) -> None:
    """``ada@mail.corp.local`` and ``ops@relay.test``: refused at ``send_mail.delay``'s check
    by default (the reason names the setting); with ``MAILGUARD_ALLOW_RESERVED_DOMAINS=local,
    test`` accepted there, by the guard's rules and the suppression list, and delivered."""
    call = {"to": ["ada@mail.corp.local", "ops@relay.test"], "subject": "s", "body": "b"}
    strict = from_env()
    with pytest.raises(InvalidArguments, match="MAILGUARD_ALLOW_RESERVED_DOMAINS"):
        check_arguments(None, call, rules=strict.address_rules)
    with pytest.raises(InvalidAddress):
        address.normalise_address("ada@mail.corp.local", strict.guard_config().rules)
    admitting = from_env(ALLOW_RESERVED_DOMAINS="local, .test")
    assert admitting.allow_reserved_domains == frozenset({"local", "test"})
    check_arguments(None, call, rules=admitting.address_rules)
    rules = admitting.guard_config().rules
    assert address.normalise_address("Ada@Mail.Corp.LOCAL", rules).address == "Ada@mail.corp.local"
    with pytest.raises(InvalidAddress):  # only the names listed
        address.normalise_address("ada@x.onion", rules)
    suppressions = build_suppressions(admitting)
    suppressions.suppress("ada@mail.corp.local", seconds=60, cause="550 5.1.1")
    assert suppressions.suppressed("ada@mail.corp.local") is not None
    SmtpTransport.from_url(smtp_server.url).send(envelope("ada@mail.corp.local", rules))
    assert smtp_server.delivered[0].rcpt_tos == ("ada@mail.corp.local",)


def test_a_name_under_a_reserved_one_admits_only_its_own_domains() -> None:
    """``corp.local`` admits ``mail.corp.local``, not ``home.local``."""
    rules = from_env(ALLOW_RESERVED_DOMAINS="corp.local").address_rules
    assert address.normalise_address("ada@mail.corp.local", rules).limit_key == (
        "ada@mail.corp.local"
    )
    with pytest.raises(InvalidAddress):
        address.normalise_address("ada@home.local", rules)

"""The table of known MX suffixes and the registered domain of any other MX (pure)."""

from __future__ import annotations

import pytest

from mailer.providers.table import known_provider, provider_of_hosts, registered_domain


@pytest.mark.parametrize(
    ("host", "provider"),
    [
        ("aspmx.l.google.com", "google"),
        ("smtp.google.com", "google"),
        ("ALT4.ASPMX.L.GOOGLE.COM.", "google"),
        ("gmail-smtp-in.l.google.com", "google"),
        ("contoso-com.mail.protection.outlook.com", "microsoft"),
        ("outlook-com.olc.protection.outlook.com", "microsoft"),
        ("mta7.am0.yahoodns.net", "yahoo"),
        ("mx01.mail.icloud.com", "apple"),
        ("mailsec.protonmail.ch", "proton"),
        ("mx2.zoho.eu", "zoho"),
        ("mx.zoho.com.au", "zoho"),
        ("in1-smtp.messagingengine.com", "fastmail"),
        ("mx00.emig.gmx.net", "gmx"),
        ("mx-ha03.web.de", "gmx"),
        ("mx.yandex.net", "yandex"),
        ("mxs.mail.ru", "mailru"),
    ],
)
def test_a_known_suffix_names_its_provider(host: str, provider: str) -> None:
    assert known_provider(host) == provider


@pytest.mark.parametrize("host", ["notgoogle.com", "google.com.evil.test", "outlook.com.test"])
def test_a_suffix_matches_whole_labels_only(host: str) -> None:
    assert known_provider(host) is None


@pytest.mark.parametrize(
    ("host", "domain"),
    [
        ("mx1.mailhost.example.net", "example.net"),
        ("mx.mailer.example.co.uk", "example.co.uk"),
        ("mail.example.com.au", "example.com.au"),
        ("example.org", "example.org"),
        ("localhost", "localhost"),
        ("MX.Example.NET.", "example.net"),
    ],
)
def test_any_other_mx_is_named_by_its_registered_domain(host: str, domain: str) -> None:
    assert registered_domain(host) == domain


def test_the_most_preferred_known_host_names_the_provider() -> None:
    assert provider_of_hosts(("mx.own.example.net", "alt1.aspmx.l.google.com")) == ("google", True)
    assert provider_of_hosts(("mx1.a.example.net", "mx2.b.example.org")) == ("example.net", False)

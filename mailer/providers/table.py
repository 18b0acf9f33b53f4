"""Known mailbox providers by MX host suffix, and the registered domain of any other MX (pure).

A suffix matches an MX host that is the suffix itself or ends in ``.`` + the suffix
(``aspmx.l.google.com`` matches ``google.com``; ``notgoogle.com`` does not). The longest
matching suffix wins. Sources: the provider's own setup page where one was found, else a named
observer's; ``unverified``: the hosts were not confirmed from a page, the suffix is kept because
it is the provider's own domain. The full table with links: ``docs/explanation/providers.md``.

- ``google``: ``google.com`` (Workspace's ``smtp.google.com`` since April 2023 and the older
  ``aspmx.l.google.com`` set: Google's "Set up MX records", quoted by intodns.ai; Gmail's
  ``gmail-smtp-in.l.google.com``: docs.deepinfo.com's gmail.com MX example),
  ``googlemail.com`` (the legacy Workspace backups ``aspmx2.googlemail.com``...``aspmx5``).
- ``microsoft``: ``mail.protection.outlook.com`` (Microsoft 365 tenants),
  ``olc.protection.outlook.com`` (Outlook.com, Hotmail, Live: "OutLook Consumer"),
  ``mail.eo.outlook.com`` and ``mx.microsoft`` (older and DANE tenant endpoints): spamresource.com
  "MBP Spotlight: Outlook.com" (2024-04); ``hotmail.com`` (the ``mx[1-4].hotmail.com`` hosts of
  before 2017: wordtothewise.com "Microsoft changes", 2017-09).
- ``yahoo``: ``yahoodns.net`` (Yahoo and AOL consumer mail, ``mta5.am0.yahoodns.net``,
  ``mx-aol.mail.gm0.yahoodns.net``), ``yahoo.com`` (Yahoo Business Mail's
  ``mx1.biz.mail.yahoo.com``): suped.com "current Yahoo mail server names".
- ``apple``: ``mail.icloud.com`` (iCloud+ custom domains, ``mx01.mail.icloud.com``: Apple's
  support.apple.com/102374 sets them up; the host names unverified).
- ``proton``: ``protonmail.ch`` (``mail.protonmail.ch``, ``mailsec.protonmail.ch``:
  proton.me/support/custom-domain, mxrecordchecker.com).
- ``zoho``: ``zoho.com``, ``zoho.eu``, ``zoho.in``, ``zoho.com.au``, ``zoho.jp``
  (``mx.zoho.com``, ``mx2.``, ``mx3.``: zoho.com/mail/help/adminconsole/configure-email-delivery,
  the regions: mxrecordchecker.com).
- ``fastmail``: ``messagingengine.com`` (``in1-smtp.messagingengine.com``,
  ``in2-smtp.``: the zone files users publish from Fastmail's "domains-setup-mxonly" help;
  Fastmail calls messagingengine.com its generic domain, fastmail.help article 360060591153).
- ``gmx``: ``gmx.net``, ``web.de`` (1&1 Mail & Media runs both, de.wiki.li/GMX; the hosts
  ``mx00.emig.gmx.net``, ``mx-ha03.web.de`` unverified). ``kundenserver.de`` (IONOS hosting)
  is left out: a web host's mail, not the freemail provider.
- ``yandex``: ``yandex.net``, ``yandex.ru`` (``mx.yandex.net``:
  yandex.com/support/yandex-360/business/admin/en/mail/configuration).
- ``mailru``: ``mail.ru`` (``mxs.mail.ru``, ``emx.mail.ru``; unverified).

Any other MX host is its own provider named by its registered domain (:func:`registered_domain`):
the last two labels, or three under a two-level public suffix of :data:`TWO_LEVEL_SUFFIXES`
(a small built-in list, not the Public Suffix List: a host under a suffix it lacks, such as
``example.pvt.k12.ma.us``, is named by its last two labels).
"""

from __future__ import annotations

#: (MX host suffix, provider name). Order does not matter: the longest match wins.
KNOWN_SUFFIXES: tuple[tuple[str, str], ...] = (
    ("google.com", "google"),
    ("googlemail.com", "google"),
    ("mail.protection.outlook.com", "microsoft"),
    ("olc.protection.outlook.com", "microsoft"),
    ("mail.eo.outlook.com", "microsoft"),
    ("mx.microsoft", "microsoft"),
    ("hotmail.com", "microsoft"),
    ("yahoodns.net", "yahoo"),
    ("yahoo.com", "yahoo"),
    ("mail.icloud.com", "apple"),
    ("protonmail.ch", "proton"),
    ("zoho.com", "zoho"),
    ("zoho.eu", "zoho"),
    ("zoho.in", "zoho"),
    ("zoho.com.au", "zoho"),
    ("zoho.jp", "zoho"),
    ("messagingengine.com", "fastmail"),
    ("gmx.net", "gmx"),
    ("web.de", "gmx"),
    ("yandex.net", "yandex"),
    ("yandex.ru", "yandex"),
    ("mail.ru", "mailru"),
)

_BY_SUFFIX = dict(KNOWN_SUFFIXES)
#: The most labels of any known suffix (how far :func:`known_provider` looks).
_MOST_LABELS = max(suffix.count(".") + 1 for suffix, _ in KNOWN_SUFFIXES)

#: Common two-level public suffixes under which a registered domain has three labels
#: (``shop.co.uk``). A small built-in list, deliberately not the Public Suffix List.
TWO_LEVEL_SUFFIXES = frozenset(
    {
        "co.uk", "org.uk", "ac.uk", "gov.uk", "me.uk", "ltd.uk", "plc.uk", "net.uk",
        "com.au", "net.au", "org.au", "edu.au", "gov.au",
        "co.nz", "org.nz", "net.nz",
        "co.jp", "ne.jp", "or.jp", "ac.jp", "go.jp",
        "co.kr", "or.kr",
        "com.br", "net.br", "org.br",
        "com.cn", "net.cn", "org.cn",
        "com.tw", "com.hk", "com.sg", "com.my",
        "co.in", "net.in", "org.in",
        "co.za", "org.za",
        "com.mx", "com.ar", "com.tr", "com.ua", "com.pl", "co.il", "co.id", "co.th",
    }
)  # fmt: skip


def normalise(name: str) -> str:
    """``name`` lowercased without a trailing dot (DNS names are case-insensitive)."""
    return name.strip().rstrip(".").lower()


def known_provider(host: str) -> str | None:
    """The known provider whose MX suffix ``host`` matches (the longest suffix), else None."""
    labels = normalise(host).split(".")
    for count in range(min(len(labels), _MOST_LABELS), 0, -1):
        found = _BY_SUFFIX.get(".".join(labels[-count:]))
        if found is not None:
            return found
    return None


def registered_domain(host: str) -> str:
    """The registered domain of ``host``: its last two labels, three under a
    :data:`TWO_LEVEL_SUFFIXES` suffix; ``host`` itself when it has no more labels."""
    labels = normalise(host).split(".")
    keep = 3 if ".".join(labels[-2:]) in TWO_LEVEL_SUFFIXES else 2
    return ".".join(labels[-keep:])


def provider_of_hosts(hosts: tuple[str, ...]) -> tuple[str, bool]:
    """The provider of a domain whose MX hosts are ``hosts``, most preferred first (non-empty),
    and whether it is a known one:
    the known provider of the most preferred host that has one (a Workspace domain with a
    backup MX elsewhere is Google's), else the registered domain of the most preferred host."""
    for host in hosts:
        known = known_provider(host)
        if known is not None:
            return known, True
    return registered_domain(hosts[0]), False

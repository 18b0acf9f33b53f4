"""Kinds of mail: templates for subject and body, and how long a mail may wait for its slot.

A login code is useless after five minutes, a notice is still worth sending tomorrow: the kind's
``max_wait`` (seconds) is how long a mail may wait for its rate-limit slot before it is dropped,
its ``lifetime`` how long a mail the relay refused for a time is kept and tried again (never
shorter than ``max_wait``), and its ``priority`` (0-9, higher first) lets it overtake mails of
lower kinds in the queue.

Templates are Jinja2 in a sandbox (they may come from configuration), with ``StrictUndefined``
(a missing variable is an error, never an empty string); only the HTML template autoescapes.
Text given by the caller is used as is, never rendered, so user input cannot inject template
code.
The sandbox stops templates from reaching Python internals; it does not bound their CPU time or
output size, so templates must come from people who run the service, never from its users.

Configuration problems (a bad template, a bad duration) raise ``ValueError``; problems of one
mail (an unknown kind, a missing variable) raise :class:`~mailer.errors.InvalidMessage`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from difflib import get_close_matches
from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, Template, TemplateError, UndefinedError, meta
from jinja2.exceptions import SecurityError
from jinja2.sandbox import SandboxedEnvironment

from mailer.durations import parse_duration
from mailer.errors import InvalidMessage, UnknownKind

#: Prefix of the environment variables read by :meth:`Kinds.from_env`.
ENV_PREFIX = "MAILGUARD_KIND_"

DAY = 86400.0
#: The longest lifetime a kind may set (7 days: the longest wait a booking may reach).
MAX_LIFETIME = 7 * DAY

#: Kind priorities: 0 (lowest) to 9 (highest); a kind that sets none is in the middle.
MIN_PRIORITY, MAX_PRIORITY, DEFAULT_PRIORITY = 0, 9, 5

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
# Longest suffix first, so that ``..._MAX_WAIT`` is never read as a kind named ``..._MAX``.
_ENV_FIELDS = (
    ("_MAX_WAIT", "max_wait"),
    ("_LIFETIME", "lifetime"),
    ("_PRIORITY", "priority"),
    ("_SHARE", "share"),
    ("_SUBJECT", "subject"),
    ("_BODY", "body"),
    ("_HTML", "html"),
    ("_UNSUBSCRIBE", "unsubscribe"),
    ("_TRANSACTIONAL", "transactional"),
)
_FLAGS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False}
_FLAGS["off"] = False

_TEXT_ENV = SandboxedEnvironment(undefined=StrictUndefined, autoescape=False)
_HTML_ENV = SandboxedEnvironment(undefined=StrictUndefined, autoescape=True)


@lru_cache(maxsize=256)
def _compile(source: str, *, html: bool) -> Template:
    return (_HTML_ENV if html else _TEXT_ENV).from_string(source)


@lru_cache(maxsize=256)
def _variables(source: str, *, html: bool) -> frozenset[str]:
    env = _HTML_ENV if html else _TEXT_ENV
    return frozenset(meta.find_undeclared_variables(env.parse(source)))


def _checked_lifetime(name: str, lifetime: object) -> float:
    """A kind's ``lifetime`` as seconds; ``ValueError`` naming the kind when it is not 0-7d."""
    if isinstance(lifetime, bool) or not isinstance(lifetime, (int, float)):
        raise ValueError(f"kind {name!r}: lifetime must be a number of seconds")
    if not 0 <= lifetime <= MAX_LIFETIME:
        raise ValueError(
            f"kind {name!r}: lifetime must be 0 to 7d (a number of seconds), got {lifetime:g}"
        )
    return float(lifetime)


@dataclass(frozen=True, slots=True)
class Kind:
    """A kind of mail.

    ``subject``, ``body`` and ``html`` are Jinja2 templates (``None``: the caller must give that
    text, except ``html`` which is optional). ``max_wait`` is in seconds, ``0`` meaning "send
    now or drop". ``priority`` is 0-9: a waiting mail of a higher priority is taken first by the
    same workers (see ``workers/brokers/priority.py``). Templates are compiled on construction, so a
    syntax error raises ``ValueError`` at configuration time, not when the first mail goes out.
    """

    name: str
    subject: str | None = None
    body: str | None = None
    html: str | None = None
    max_wait: float = DAY
    priority: int = DEFAULT_PRIORITY
    #: The fraction (0, 1] of each shared-scope tier (domain, sender, tenant) this kind may fill.
    share: float = 1.0
    #: A bulk kind (a newsletter): its mails carry one-click unsubscribe headers, a click stops
    #: the sender's bulk kinds for that recipient, and a bad sender reputation pauses them
    #: (:mod:`mailer.unsubscribe`, :mod:`mailer.records.reputation`).
    unsubscribe: bool = False
    #: How long (seconds) after the guard first saw it a mail the relay refused for a time (a
    #: 4xx, greylisting, a relay down) is kept and tried again, never less than ``max_wait``:
    #: ``0`` makes ``max_wait`` the kind's deadline (the built-in ``code`` kind's); None: the
    #: process's ``MAILGUARD_LIFETIME`` (5 days). See :func:`lifetime_of`.
    lifetime: float | None = None
    #: A transactional kind (a login code): a sender's warm-up plan counts its mails but never
    #: makes them wait (:mod:`mailer.records.warmup`).
    transactional: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ValueError(
                f"bad kind name {str(self.name)[:70]!r}: 1-64 of a-z, 0-9 and _, starting with "
                "a letter"
            )
        if isinstance(self.max_wait, bool) or not isinstance(self.max_wait, (int, float)):
            raise ValueError(f"kind {self.name!r}: max_wait must be a number of seconds")
        if not math.isfinite(self.max_wait) or self.max_wait < 0:
            raise ValueError(f"kind {self.name!r}: max_wait must be finite and not negative")
        object.__setattr__(self, "max_wait", float(self.max_wait))
        if self.lifetime is not None:
            object.__setattr__(self, "lifetime", _checked_lifetime(self.name, self.lifetime))
        if (
            isinstance(self.priority, bool)
            or not isinstance(self.priority, int)
            or not MIN_PRIORITY <= self.priority <= MAX_PRIORITY
        ):
            raise ValueError(
                f"kind {self.name!r}: priority must be a whole number from {MIN_PRIORITY} "
                f"(lowest) to {MAX_PRIORITY} (highest)"
            )
        if (
            isinstance(self.share, bool)
            or not isinstance(self.share, (int, float))
            or not 0 < self.share <= 1
        ):
            raise ValueError(f"kind {self.name!r}: share must be a number in (0, 1]")
        object.__setattr__(self, "share", float(self.share))
        for flag in ("unsubscribe", "transactional"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"kind {self.name!r}: {flag} must be True or False")
        for field in ("subject", "body", "html"):
            source = getattr(self, field)
            if source is None:
                continue
            if not isinstance(source, str):
                raise ValueError(f"kind {self.name!r}: {field} template must be a str")
            try:
                _compile(source, html=field == "html")
            except TemplateError as exc:
                raise ValueError(
                    f"kind {self.name!r}: {field} template does not compile: {exc}"
                ) from None


#: Built-in kinds: ``default`` needs the caller's subject and body and may wait a day, ``code``
#: is a one-time code that is worthless after five minutes, through temporary failures too
#: (its lifetime is its ``max_wait``), and goes first (priority 9), ``notice`` may wait a day.
#: ``default`` and ``notice`` are kept the process's lifetime (``MAILGUARD_LIFETIME``) and are
#: in the middle (5).
BUILTIN_KINDS = (
    # The plainest call, send_mail.delay(addr), needs some text: neutral, and overridable with
    # MAILGUARD_KIND_DEFAULT_SUBJECT / _BODY; text the caller gives always wins.
    Kind(
        "default",
        subject="A message for you",
        body="You have a new message.",
        max_wait=DAY,
    ),
    Kind(
        "code",
        subject="Your code",
        body="Your code is {{ code }}",
        max_wait=300.0,
        priority=MAX_PRIORITY,
        lifetime=0.0,  # its max_wait is its deadline, through temporary failures too
        transactional=True,
    ),
    Kind("notice", max_wait=DAY),
)


class Kinds(Mapping[str, Kind]):
    """An immutable registry of kinds by name.

    Looking up an unknown name raises :class:`~mailer.errors.UnknownKind`, which is both an
    ``InvalidMessage`` (drop the mail) and a ``KeyError`` (so ``in`` and ``get`` work).
    """

    __slots__ = ("_kinds",)

    def __init__(self, kinds: Iterable[Kind] = ()) -> None:
        self._kinds: dict[str, Kind] = {}
        for kind in kinds:
            if not isinstance(kind, Kind):
                raise TypeError(f"expected Kind, got {type(kind).__name__}")
            self._kinds[kind.name] = kind

    @classmethod
    def defaults(cls) -> Kinds:
        """The built-in kinds: ``default``, ``code`` and ``notice``."""
        return cls(BUILTIN_KINDS)

    @classmethod
    def from_env(cls, environ: Mapping[str, str], *, base: Kinds | None = None) -> Kinds:
        """Return ``base`` (the built-ins by default) changed by ``MAILGUARD_KIND_*`` variables.

        ``MAILGUARD_KIND_<NAME>_MAX_WAIT`` is a duration (``300``, ``5m``, ``24h``, ``1d``,
        ``500ms``), and so is ``..._LIFETIME`` (0 to ``7d``: :attr:`Kind.lifetime`);
        ``..._PRIORITY`` a whole number 0-9 (higher first); ``..._SHARE`` a number in
        (0, 1], the part of each shared-scope tier the kind may fill; ``..._SUBJECT``,
        ``..._BODY`` and ``..._HTML`` are templates, an empty value
        removing the template; ``..._UNSUBSCRIBE`` is ``1`` for a bulk kind (or ``0``), and
        ``..._TRANSACTIONAL`` ``1`` for a kind a warm-up plan never makes wait.
        ``<NAME>`` is the kind name in upper case; a new name adds a kind
        (waiting up to a day unless ``MAX_WAIT`` says otherwise). A kind whose ``MAX_WAIT`` is
        set and whose ``LIFETIME`` is not has its ``MAX_WAIT`` as its deadline, through
        temporary failures too (lifetime ``0``). Pass ``os.environ``. Raises
        ``ValueError`` naming the variable on any bad or unknown setting.
        """
        changes: dict[str, dict[str, Any]] = {}
        for variable in sorted(environ):
            if not variable.startswith(ENV_PREFIX):
                continue
            name, field = _split_env_name(variable)
            value = environ[variable]
            if field in ("unsubscribe", "transactional"):
                changes.setdefault(name, {})[field] = _flag(variable, value)
            elif field in ("max_wait", "lifetime"):
                try:
                    changes.setdefault(name, {})[field] = parse_duration(value)
                except ValueError as exc:
                    raise ValueError(f"{variable}: {exc}") from None
            elif field == "priority":
                if not value.strip().isdigit():
                    raise ValueError(
                        f"{variable}: priority must be a whole number from {MIN_PRIORITY} "
                        f"(lowest) to {MAX_PRIORITY} (highest), not {value[:20]!r}"
                    )
                changes.setdefault(name, {})[field] = int(value)
            elif field == "share":
                try:
                    changes.setdefault(name, {})[field] = float(value)
                except ValueError:
                    raise ValueError(
                        f"{variable}: share must be a number in (0, 1], not {value[:20]!r}"
                    ) from None
            else:
                changes.setdefault(name, {})[field] = value or None
        registry = dict((base if base is not None else cls.defaults())._kinds)
        for name, fields in _with_deadlines(changes).items():
            try:
                old = registry.get(name)
                registry[name] = replace(old, **fields) if old is not None else Kind(name, **fields)
            except ValueError as exc:
                raise ValueError(f"{ENV_PREFIX}{name.upper()}_*: {exc}") from None
        return cls(registry.values())

    def with_kind(self, kind: Kind) -> Kinds:
        """Return a new registry with ``kind`` added, replacing any kind of the same name."""
        return Kinds([*self._kinds.values(), kind])

    def __getitem__(self, name: str) -> Kind:
        try:
            return self._kinds[name]
        except (KeyError, TypeError):
            known = ", ".join(sorted(self._kinds)) or "none"
            shown = name[:64] if isinstance(name, str) else type(name).__name__
            close = get_close_matches(shown, sorted(self._kinds), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}? " if close and isinstance(name, str) else ""
            raise UnknownKind(f"unknown kind {shown!r}; {hint}known: {known}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._kinds)

    def __len__(self) -> int:
        return len(self._kinds)

    def __repr__(self) -> str:
        return f"Kinds({sorted(self._kinds)!r})"


def _with_deadlines(changes: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``changes`` where a kind that sets ``max_wait`` and no ``lifetime`` gets lifetime 0:
    a kind that names how long it may wait names its deadline."""
    return {
        name: fields
        if "lifetime" in fields or "max_wait" not in fields
        else {**fields, "lifetime": 0.0}
        for name, fields in changes.items()
    }


def lifetime_of(kind: Kind, default: float) -> float:
    """How long (seconds) after the guard first saw it a mail of ``kind`` is kept through
    temporary failures: the kind's ``lifetime`` (``default``, the process's
    ``MAILGUARD_LIFETIME``, when it sets none), never less than its ``max_wait``."""
    own = default if kind.lifetime is None else kind.lifetime
    return max(kind.max_wait, own)


def _flag(variable: str, value: str) -> bool:
    """``1`` / ``0`` (``true``, ``yes``, ``on`` / ``false``, ``no``, ``off``)."""
    flag = _FLAGS.get(value.strip().lower())
    if flag is None:
        raise ValueError(f"{variable}: must be 1 or 0, not {value[:20]!r}")
    return flag


def _split_env_name(variable: str) -> tuple[str, str]:
    """``MAILGUARD_KIND_PASSWORD_RESET_MAX_WAIT`` -> ``("password_reset", "max_wait")``."""
    rest = variable[len(ENV_PREFIX) :]
    for suffix, field in _ENV_FIELDS:
        if rest.endswith(suffix) and len(rest) > len(suffix):
            return rest[: -len(suffix)].lower(), field
    known = ", ".join(suffix.lstrip("_") for suffix, _ in _ENV_FIELDS)
    raise ValueError(
        f"{variable}: unknown setting, expected {ENV_PREFIX}<NAME>_ and one of {known}"
    )


def render(
    kind: Kind,
    subject: str | None,
    body: str | None,
    html: str | None,
    context: Mapping[str, Any],
) -> tuple[str, str, str | None]:
    """Return ``(subject, body, html)`` for one mail of ``kind``.

    Each text given by the caller is used as is; each one left ``None`` is rendered from the
    kind's template with ``context``. A subject or body that is neither given nor templated, a
    variable missing from ``context`` or a failing template raises
    :class:`~mailer.errors.InvalidMessage` naming the kind, the field and the variable, never
    the values. ``html`` is ``None`` when neither given nor templated.
    """
    final_subject = _text(kind, "subject", subject, kind.subject, context)
    final_body = _text(kind, "body", body, kind.body, context)
    if html is not None:
        final_html: str | None = _given(kind, "html", html)
    elif kind.html is not None:
        final_html = _render(kind, "html", kind.html, context)
    else:
        final_html = None
    return final_subject, final_body, final_html


def check_templates(
    kind: Kind,
    subject: str | None,
    body: str | None,
    html: str | None,
    context: Mapping[str, Any] | None,
) -> None:
    """``InvalidMessage`` (one line saying what to give) for what :func:`render` would refuse:
    a subject or body neither given nor templated, or a variable a template needs missing from
    ``context``. Renders nothing (the templates' variables are cached): the check
    ``send_mail.delay`` makes before a mail is enqueued."""
    for field, given, template in (
        ("subject", subject, kind.subject),
        ("body", body, kind.body),
        ("html", html, kind.html),
    ):
        if given is not None:
            continue
        if template is None:
            if field != "html":
                raise InvalidMessage(
                    f"{field}: kind {kind.name!r} has no {field} template; give {field}=..."
                )
            continue
        missing = sorted(_variables(template, html=field == "html") - set(context or {}))
        if missing:
            plural = "s" if len(missing) > 1 else ""
            wanted = ", ".join(f"{name!r}: ..." for name in missing)
            raise InvalidMessage(
                f"context: the {field} template of kind {kind.name!r} needs variable{plural} "
                f"{', '.join(map(repr, missing))}; give context={{{wanted}}}"
            )


def _check_variables(kind: Kind, field: str, source: str, context: Mapping[str, Any]) -> None:
    """``InvalidMessage`` naming every variable the template uses that ``context`` lacks."""
    missing = sorted(_variables(source, html=field == "html") - set(context))
    if missing:
        names = ", ".join(repr(name) for name in missing)
        plural = "s" if len(missing) > 1 else ""
        raise InvalidMessage(
            f"kind {kind.name!r}: {field} template needs variable{plural} {names}, missing from "
            "the context"
        )


def _text(
    kind: Kind, field: str, given: str | None, template: str | None, context: Mapping[str, Any]
) -> str:
    if given is not None:
        return _given(kind, field, given)
    if template is None:
        raise InvalidMessage(f"kind {kind.name!r} has no {field} template; give a {field}")
    return _render(kind, field, template, context)


def _given(kind: Kind, field: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidMessage(
            f"kind {kind.name!r}: {field} must be a str, not {type(value).__name__}"
        )
    return value


def _render(kind: Kind, field: str, source: str, context: Mapping[str, Any]) -> str:
    is_html = field == "html"
    _check_variables(kind, field, source, context)
    try:
        return _compile(source, html=is_html).render(context)
    except UndefinedError as exc:
        raise InvalidMessage(f"kind {kind.name!r}: {field} template: {exc}") from None
    except SecurityError:
        raise InvalidMessage(
            f"kind {kind.name!r}: {field} template tried an operation the sandbox forbids"
        ) from None
    except Exception as exc:
        # Any failure inside a template (a TypeError, a division by zero) is a bad mail, not a
        # crash of the worker; the values involved are not repeated.
        raise InvalidMessage(
            f"kind {kind.name!r}: {field} template failed with {type(exc).__name__}"
        ) from None

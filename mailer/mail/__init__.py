"""One mail: addresses, envelope, message, kinds and templates, call arguments, transports."""

from mailer.mail.arguments import InvalidArguments, check_arguments
from mailer.mail.envelope import addresses
from mailer.mail.kinds import DEFAULT_PRIORITY, MAX_PRIORITY, check_templates
from mailer.mail.replies import temporary_reply
from mailer.mail.seal import seal, unseal

__all__ = [
    "DEFAULT_PRIORITY",
    "MAX_PRIORITY",
    "InvalidArguments",
    "addresses",
    "check_arguments",
    "check_templates",
    "seal",
    "temporary_reply",
    "unseal",
]

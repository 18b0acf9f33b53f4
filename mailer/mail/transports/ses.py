"""Amazon SES through its v2 API (``SendEmail`` with raw MIME), with boto3.

The message goes as built, byte for byte (headers, attachments, the Message-ID derived from the
mail id), to the envelope's recipients (the ``Bcc`` header itself is left out, as SMTP leaves it
out), with the envelope's sender as ``FromEmailAddress`` (a ``Sender`` header's address, else
From's: the identity SES checks). Credentials come from boto3's usual chain (environment, profile,
instance role); the region must be given (``MAILGUARD_SES_REGION``). SES's answers become the
guard's reactions (:mod:`mailer.mail.transports.provider`: throttling holds the sender, a rejection
fails the mail). botocore's own retries are off: a throttling answer must reach the guard, which
holds every worker, rather than be retried at once; network errors are retried here
(:mod:`mailer.mail.transports.retrying`).

Needs boto3: ``pip install 'celery-mailguard[ses]'``. Not for SES's v1 ``SendRawEmail``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from mailer.errors import PermanentSendError, SendError
from mailer.mail.envelope import Envelope
from mailer.mail.transports import provider
from mailer.mail.transports.base import SendReceipt, wire_bytes
from mailer.mail.transports.retrying import send_with_retries

#: The provider's name in outcomes and errors.
PROVIDER = "ses"


class SesTransport:
    """Sends each message with SES v2 ``send_email`` (``Content.Raw``).

    ``region`` (``eu-west-1``) is required; ``endpoint_url`` replaces SES's (a VPC endpoint, a
    test double on 127.0.0.1); ``configuration_set`` names an SES configuration set (event
    publishing). ``timeout`` is seconds per connection and per read. ``paused_hold`` is how
    long, in seconds, a paused account holds the sender. ``client`` replaces the boto3 client
    (tests). Raises ``ValueError`` at construction without a region or without boto3.
    """

    def __init__(
        self,
        region: str,
        *,
        endpoint_url: str | None = None,
        configuration_set: str | None = None,
        timeout: float = 30.0,
        max_attempts: int = 3,
        paused_hold: float = 900.0,
        sleep: Callable[[float], None] = time.sleep,
        client: Any = None,
    ) -> None:
        if not region:  # built by hand, without settings (which check MAILGUARD_SES_REGION)
            raise ValueError("SES needs a region (eu-west-1)")
        self.region = region
        self.endpoint_url = endpoint_url
        self.configuration_set = configuration_set
        self.max_attempts = max_attempts
        self.paused_hold = paused_hold
        self._sleep = sleep
        self._client = client if client is not None else _client(region, endpoint_url, timeout)

    def __repr__(self) -> str:
        where = self.endpoint_url or self.region
        return f"SesTransport({where})"

    def send(self, envelope: Envelope) -> SendReceipt:
        """Send the envelope's message through SES, from its sender to its recipients; see the
        class. Raises a ``SendError`` that states its reaction; neither its text nor a log line
        contains a recipient address."""
        recipients = list(envelope.recipients)
        if not recipients:
            raise PermanentSendError("the envelope has no recipient", attempts=0)
        request: dict[str, Any] = {
            "FromEmailAddress": envelope.sender,
            "Destination": {"ToAddresses": recipients},
            "Content": {"Raw": {"Data": wire_bytes(envelope.message)}},
        }
        if self.configuration_set:
            request["ConfigurationSetName"] = self.configuration_set
        message_id = envelope.message_id

        def attempt() -> SendReceipt:
            answer = self._call(request, recipients)
            ses_id = str(answer.get("MessageId", "")) or None
            return SendReceipt(
                message_id=message_id,
                code=None,
                reply=f"SES accepted: {ses_id}",
                provider=PROVIDER,
                provider_message_id=ses_id,
            )

        return send_with_retries(
            attempt, max_attempts=self.max_attempts, what=str(message_id), sleep=self._sleep
        )

    def _call(self, request: dict[str, Any], recipients: list[str]) -> dict[str, Any]:
        """One ``send_email``; its answer, or the classified ``SendError``."""
        from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415 - optional

        try:
            answer: dict[str, Any] = self._client.send_email(**request)
        except ClientError as exc:
            error = ses_send_error(exc, recipients, self.paused_hold)
        except BotoCoreError as exc:  # no connection, a timeout, no credentials
            error = provider.network(f"SES: {type(exc).__name__}: {exc}")
        else:
            return answer
        error.provider = PROVIDER
        raise error


def ses_send_error(exc: Any, recipients: list[str], paused_hold: float) -> SendError:
    """A botocore ``ClientError`` (SES's answer) as a ``SendError`` with its reaction (also
    used for django-ses and Anymail's SES backend, which raise the same errors)."""
    error = exc.response.get("Error", {}) if isinstance(exc.response, dict) else {}
    meta = exc.response.get("ResponseMetadata", {}) if isinstance(exc.response, dict) else {}
    status = meta.get("HTTPStatusCode")
    return provider.ses_error(
        str(error.get("Code", "")),
        str(error.get("Message", "")),
        status=status if isinstance(status, int) else None,
        recipients=recipients,
        paused_hold=paused_hold,
    )


def _client(region: str, endpoint_url: str | None, timeout: float) -> Any:
    """A boto3 SES v2 client with botocore's retries off (see the module)."""
    try:
        import boto3  # noqa: PLC0415 - optional: only with MAILGUARD_TRANSPORT=ses
        from botocore.config import Config  # noqa: PLC0415
    except ImportError:
        raise ValueError(
            "the ses transport needs boto3: pip install 'celery-mailguard[ses]'"
        ) from None
    config = Config(
        retries={"total_max_attempts": 1, "mode": "standard"},
        connect_timeout=timeout,
        read_timeout=timeout,
    )
    return boto3.client("sesv2", region_name=region, endpoint_url=endpoint_url, config=config)

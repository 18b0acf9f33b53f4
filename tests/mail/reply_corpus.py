"""Real SMTP replies from real servers, each with where it was read and the reaction it must get.

A row is ``(code, text, action, source)``. ``text`` is the reply after its code, as
``smtplib`` hands it over (continuation lines joined); addresses and IPs are the source's own
or documentation ones. ``source`` is the document or page the text was read from: for Postfix,
the reply format strings in Debian's ``postfix 3.7.11`` ``smtpd`` binary (``strings
/usr/lib/postfix/sbin/smtpd``), with ``%s`` filled as Postfix fills it. Used by
``tests/mail/test_reply_corpus.py``.
"""

from __future__ import annotations

from typing import NamedTuple

from mailer.mail.replies import Action

RETRY = Action.RETRY
FAIL = Action.FAIL
GREYLIST = Action.GREYLIST
HOLD_SENDER = Action.HOLD_SENDER
HOLD_RECIPIENT = Action.HOLD_RECIPIENT
HOLD_TRANSPORT = Action.HOLD_TRANSPORT
SUPPRESS = Action.SUPPRESS


class Reply(NamedTuple):
    """One real reply and the reaction it must get."""

    code: int
    text: str
    action: Action
    source: str


POSTFIX_SMTPD = "Postfix 3.7.11 smtpd(8), Debian postfix 3.7.11-0+deb12u1 (reply strings)"
POSTFIX_ANVIL = "Postfix anvil(8), https://www.postfix.org/anvil.8.html, and " + POSTFIX_SMTPD
POSTGREY = "/work/shared/RELAY-FACTS.md: postgrey's reply; postgrey(8) --greylist-text"
EXIM_ACL = (
    "Exim specification, ch. Access control lists, 'Rate limiting incoming messages' "
    "(https://www.exim.org/exim-html-current/doc/html/spec_html/ch-access_control_lists.html); "
    "defer messages as configured in http://wiki.gbweb.net/tiki-index.php?page=Exim+ACLs"
)
MS_NDR = "https://learn.microsoft.com/exchange/mail-flow-best-practices/non-delivery-reports-in-exchange-online/non-delivery-reports-in-exchange-online"
MS_OLC = "Outlook.com postmaster, https://sendersupport.olc.protection.outlook.com/pm/troubleshooting.aspx"
GMAIL = "https://support.google.com/a/answer/3726730 (Gmail SMTP errors and codes)"
YAHOO = "https://senders.yahooinc.com/smtp-error-codes/"
SES = "https://docs.aws.amazon.com/ses/latest/dg/manage-sending-quotas-errors.html"
SES_SMTP = "https://docs.aws.amazon.com/ses/latest/dg/troubleshoot-smtp.html"
SES_SESSION = "an SES SMTP session transcript, https://pastebin.com/t22G4F69"
SENDGRID = "https://www.twilio.com/docs/sendgrid/for-developers/sending-email/smtp-errors-and-troubleshooting"

CORPUS: list[Reply] = [
    # --- Postfix smtpd: anvil rate and count limits ---------------------------------------
    Reply(450, "4.7.1 Error: too much mail from 127.0.0.1", HOLD_SENDER, POSTFIX_ANVIL),
    Reply(450, "4.7.1 Error: too many recipients from 127.0.0.1", HOLD_SENDER, POSTFIX_ANVIL),
    Reply(
        421,
        "4.7.0 mail.example.com Error: too many connections from 127.0.0.1",
        HOLD_SENDER,
        POSTFIX_ANVIL,
    ),
    Reply(
        421,
        "4.7.0 mail.example.com Error: too many new TLS sessions from 127.0.0.1",
        HOLD_SENDER,
        POSTFIX_ANVIL,
    ),
    Reply(450, "4.7.1 Error: too many AUTH commands from 127.0.0.1", HOLD_SENDER, POSTFIX_ANVIL),
    # --- Postfix smtpd: limits of one message, the server's own trouble --------------------
    # smtpd_recipient_limit: the recipients past the limit go in another transaction; no rate.
    Reply(452, "4.5.3 Error: too many recipients", RETRY, POSTFIX_SMTPD),
    Reply(452, "4.3.1 Insufficient system storage", RETRY, POSTFIX_SMTPD),
    Reply(421, "4.4.2 mail.example.com Error: timeout exceeded", RETRY, POSTFIX_SMTPD),
    Reply(421, "4.7.0 mail.example.com Error: too many errors", RETRY, POSTFIX_SMTPD),
    Reply(454, "4.7.0 Temporary authentication failure: generic failure", RETRY, POSTFIX_SMTPD),
    # --- Postfix smtpd: our own side refused: the transport is held -------------------------
    Reply(
        535,
        "5.7.8 Error: authentication failed: authentication failure",
        HOLD_TRANSPORT,
        POSTFIX_SMTPD,
    ),
    Reply(530, "5.7.0 Must issue a STARTTLS command first", HOLD_TRANSPORT, POSTFIX_SMTPD),
    Reply(
        553,
        "5.7.1 <app@example.com>: Sender address rejected: not owned by user mailer",
        HOLD_TRANSPORT,
        POSTFIX_SMTPD,
    ),
    Reply(
        553,
        "5.7.1 <app@example.com>: Sender address rejected: not logged in",
        HOLD_TRANSPORT,
        POSTFIX_SMTPD,
    ),
    Reply(554, "5.7.1 <ada@example.org>: Relay access denied", HOLD_TRANSPORT, POSTFIX_SMTPD),
    Reply(501, "5.1.7 Bad sender address syntax", HOLD_TRANSPORT, POSTFIX_SMTPD),
    # --- Postfix / postgrey: greylisting ----------------------------------------------------
    Reply(
        450,
        "4.2.0 <ada@example.org>: Recipient address rejected: Greylisted, see "
        "http://postgrey.schweikert.ch/help/example.org.html",
        GREYLIST,
        POSTGREY,
    ),
    # --- other MTAs' rate replies (quoted in bounce classifiers) ----------------------------
    Reply(
        452,
        "4.3.2 Connection rate limit exceeded.",
        HOLD_SENDER,
        "https://github.com/sisimai/p5-sisimai/issues/466",
    ),
    Reply(
        421,
        "4.4.2 Message submission rate for this client has exceeded the configured limit",
        HOLD_SENDER,
        "Exchange Server receive connector MessageRateLimit, "
        "https://portal.iridis.uk/?action=article&cmd=knowledgebase&id=164",
    ),
    Reply(
        451,
        "4.5.1 The recipient <ada@yandex.com> has exceeded their message rate limit. Try "
        "again later.",
        HOLD_RECIPIENT,
        "Yandex, quoted in an Exim bounce, https://pastebin.com/pEBS5hy4",
    ),
    # --- Exim ratelimit ACLs (defer answers 451) --------------------------------------------
    Reply(451, "Sender rate exceeds 100 messages per 1h", HOLD_SENDER, EXIM_ACL),
    Reply(
        451,
        "Number of sent emails has exceeded our IP limit. Come back later.",
        HOLD_SENDER,
        EXIM_ACL,
    ),
    Reply(
        451,
        "Number of recipients has exceeded our IP limit. Come back later.",
        HOLD_SENDER,
        EXIM_ACL,
    ),
    Reply(
        451,
        "The server has reached its limit for processing requests from your host.\n"
        "Please try again later.",
        HOLD_SENDER,
        "cPanel's Exim ratelimit ACL (defer), https://pastebin.com/Jp8ai9Eu and "
        "https://pastebin.com/jA77NHFE",
    ),
    # --- Microsoft (Exchange Online, Outlook.com) -------------------------------------------
    Reply(
        451,
        "4.7.500 Server busy. Please try again later from [203.0.113.10]. (S77714)",
        GREYLIST,
        MS_NDR
        + "; https://www.spamresource.com/2023/10/microsoft-451-47500-server-busy-errors.html",
    ),
    Reply(
        451,
        "4.7.650 The mail server [203.0.113.10] has been temporarily rate limited due to IP "
        "reputation. For e-mail delivery information, see https://aka.ms/postmaster (S775)",
        HOLD_SENDER,
        MS_NDR + "; https://forum.directadmin.com/threads/hotmail-ip-has-been-temporarily-"
        "rate-limited-due-to-ip-reputation-for-e-mail-delivery-information-see-https-aka-ms-"
        "postmaster-s775.82240/",
    ),
    Reply(
        451,
        "4.7.652 The mail server [203.0.113.10] has exceeded the maximum number of connections.",
        HOLD_SENDER,
        "https://go.mail-archive.com/postfix-users@postfix.org/msg87906.html",
    ),
    Reply(
        421,
        "RP-001 (SNT0-MC2-F19) Unfortunately, some messages from 50.57.111.177 weren't sent. "
        "Please try again. We have limits for how many messages can be sent per hour and per "
        "day. You can also refer to http://mail.live.com/mail/troubleshooting.aspx#errors.",
        HOLD_SENDER,
        MS_OLC + "; https://pastebin.com/dW4JrGn7",
    ),
    Reply(
        421,
        "RP-002 The sending IP exceeded a connection-level rate limit.",
        HOLD_SENDER,
        MS_OLC + "; https://www.suped.com/knowledge/email-deliverability/sender-reputation/"
        "what-causes-temporary-rate-limiting-due-to-ip-reputation-with-microsoft-email-servers",
    ),
    Reply(
        421,
        "RP-003 The sending IP exceeded a connection limit tied to reputation.",
        HOLD_SENDER,
        MS_OLC + "; same page as RP-002",
    ),
    Reply(
        550,
        "5.7.708 Service unavailable. Access denied, traffic not accepted from this IP.",
        FAIL,
        MS_NDR,
    ),
    Reply(
        432,
        "4.3.2 STOREDRV.Deliver; recipient thread limit exceeded",
        HOLD_RECIPIENT,
        MS_NDR,
    ),
    Reply(
        452,
        "4.5.3 Recipients belong to multiple regions ATTR38 "
        "[VE1EUR01FT019.eop-EUR01.prod.protection.outlook.com]",
        RETRY,
        "https://pastebin.com/aW9rxeVy",
    ),
    Reply(
        535,
        "5.7.139 Authentication unsuccessful, SmtpClientAuthentication is disabled for the "
        "Tenant. Visit https://aka.ms/smtp_auth_disabled for more information.",
        HOLD_TRANSPORT,
        "https://learn.microsoft.com/exchange/clients-and-mobile-in-exchange-online/"
        "authenticated-client-smtp-submission",
    ),
    Reply(
        535,
        "5.7.3 Authentication unsuccessful",
        HOLD_TRANSPORT,
        "[MS-SMTPNTLM] 2.2.1.4 SMTP_AUTH_Fail_Response, https://learn.microsoft.com/en-us/"
        "openspecs/windows_protocols/ms-smtpntlm/62888982-a911-40fa-b587-50b5c69f7334",
    ),
    # --- Gmail ------------------------------------------------------------------------------
    Reply(
        421,
        "4.7.28 Gmail has detected an unusual rate of unsolicited mail originating from your "
        "IP address. To protect our users from spam, mail sent from your IP address has been "
        "temporarily rate limited.",
        HOLD_SENDER,
        GMAIL,
    ),
    Reply(
        450,
        "4.2.1 The user you are trying to contact is receiving mail at a rate that prevents "
        "additional messages from being delivered. Please resend your message at a later "
        "time. If the user is able to receive mail at that time, your message will be "
        "delivered.",
        HOLD_RECIPIENT,
        GMAIL + "; http://digitus.itk.ppke.hu/~cstamas/blog/2008/02/04/gmail-rate-contol/",
    ),
    Reply(
        450,
        "4.2.1 The user you are trying to contact is receiving email too quickly. Please "
        "resend your message at a later time.",
        HOLD_RECIPIENT,
        GMAIL,
    ),
    Reply(450, "4.2.1 Peak SMTP relay limit exceeded for this customer.", HOLD_SENDER, GMAIL),
    Reply(
        421,
        "4.7.0 [216.194.173.80 15] Our system has detected an unusual rate of\n"
        "unsolicited mail originating from your IP address. To protect our\n"
        "users from spam, mail sent from your IP address has been temporarily\n"
        "rate limited. Please visit\n"
        "https://support.google.com/mail/?p=UnsolicitedRateLimitError to\n"
        "review our Bulk Email Senders Guidelines. p4si3522070uam.9 - gsmtp",
        HOLD_SENDER,
        GMAIL + "; https://pastebin.com/6G7q8H39",
    ),
    Reply(
        550,
        "5.1.1 The email account that you tried to reach does not exist.",
        SUPPRESS,
        GMAIL,
    ),
    Reply(
        535,
        "5.7.8 Username and Password not accepted. For more information, go to\n"
        "https://support.google.com/mail/?p=BadCredentials",
        HOLD_TRANSPORT,
        GMAIL,
    ),
    Reply(
        530,
        "5.7.0 Authentication Required. For more information, go to\n"
        "https://support.google.com/mail/?p=WantAuthError",
        HOLD_TRANSPORT,
        GMAIL,
    ),
    Reply(
        534,
        "5.7.9 Application-specific password required.",
        HOLD_TRANSPORT,
        GMAIL,
    ),
    Reply(
        550,
        "5.7.1 Our system has detected that this message is likely unsolicited mail. To "
        "reduce the amount of spam sent to Gmail, this message has been blocked.",
        FAIL,
        GMAIL,
    ),
    # --- Yahoo ------------------------------------------------------------------------------
    Reply(
        421,
        "4.7.0 [TSS04] Messages from 192.0.2.1 temporarily deferred due to unexpected volume "
        "or user complaints - 4.16.55.1; see https://postmaster.yahooinc.com/error-codes",
        HOLD_SENDER,
        YAHOO + "; https://smtpfieldmanual.com/provider/yahoo/421/4.7.0",
    ),
    Reply(
        421,
        "4.7.0 [TS01] Messages from 50.57.111.177 temporarily deferred due to user "
        "complaints - 4.16.55.1; see http://postmaster.yahoo.com/421-ts01.html",
        HOLD_SENDER,
        YAHOO + "; https://pastebin.com/dW4JrGn7",
    ),
    Reply(
        421,
        "4.7.0 [TS02] Temporarily deferred",
        HOLD_SENDER,
        YAHOO + "; http://www.smtp-error-codes.info/bounce/yahoo/bounce_421_4.7.0_TS02.php",
    ),
    Reply(
        421,
        "4.7.1 [TS03] All messages from 192.0.2.1 will be permanently deferred; Retrying "
        "will NOT succeed. See https://postmaster.yahooinc.com/error-codes",
        HOLD_SENDER,
        YAHOO,
    ),
    Reply(
        421,
        "Max message per connection reached, closing transmission channel",
        RETRY,
        "/work/shared/RELAY-FACTS.md: Yahoo closes a connection at its per-connection "
        "limit (reconnecting is fine); " + YAHOO,
    ),
    # --- Amazon SES SMTP --------------------------------------------------------------------
    Reply(454, "Throttling failure: Maximum sending rate exceeded.", HOLD_SENDER, SES),
    Reply(454, "Throttling failure: Daily message quota exceeded.", HOLD_SENDER, SES),
    Reply(
        421,
        "Too many concurrent SMTP connections; please try again later.",
        HOLD_SENDER,
        SES_SMTP,
    ),
    Reply(535, "Authentication Credentials Invalid", HOLD_TRANSPORT, SES_SMTP),
    Reply(530, "Authentication required", HOLD_TRANSPORT, SES_SESSION),
    Reply(530, "Must issue a STARTTLS command first", HOLD_TRANSPORT, SES_SESSION),
    # --- the ESPs' SMTP relays --------------------------------------------------------------
    Reply(421, "Message from (198.51.100.1) temporarily deferred", HOLD_SENDER, SENDGRID),
    Reply(
        450,
        "too frequent connects from 198.37.147.135, please try again later.",
        HOLD_SENDER,
        SENDGRID,
    ),
    Reply(452, "Too many recipients received this hour (throttled)", HOLD_SENDER, SENDGRID),
    Reply(451, "Temporary local problem - please try later", RETRY, SENDGRID),
    Reply(
        550,
        "Requested action not taken: mailbox unavailable",
        SUPPRESS,
        SENDGRID,
    ),
    Reply(
        550,
        "The from address does not match a verified Sender Identity. Mail cannot be sent "
        "until this error is resolved.",
        HOLD_TRANSPORT,
        SENDGRID,
    ),
    Reply(
        452,
        "4.4.5 Messages per second limit exceeded",
        HOLD_SENDER,
        "Emailit SMTP relay, https://emailit.com/docs/smtp/troubleshooting/",
    ),
    Reply(
        452,
        "4.5.3 Daily message limit exceeded",
        HOLD_SENDER,
        "Emailit SMTP relay, https://emailit.com/docs/smtp/troubleshooting/",
    ),
    Reply(
        535,
        "Authentication failed",
        HOLD_TRANSPORT,
        "Emailit SMTP relay, https://emailit.com/docs/smtp/troubleshooting/",
    ),
]

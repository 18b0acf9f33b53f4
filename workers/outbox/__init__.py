"""The outbox: a mail's first message recorded at ``send_mail.delay`` (riding in the broker's
publish) and cleared at receipt."""

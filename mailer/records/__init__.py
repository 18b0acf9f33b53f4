"""What the guard keeps per mail and per address: the ledger, the schedule, the outbox, holds,
suppressions, sender reputation, warm-up, the live policy and kept failed mails."""

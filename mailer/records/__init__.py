"""What the guard keeps per mail and per address: the ledger, the schedule, holds, suppressions."""

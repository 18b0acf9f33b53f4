"""What one worker of a queue polls under the fleet lease: the promoter of parked mails and the
outbox's watchdog."""

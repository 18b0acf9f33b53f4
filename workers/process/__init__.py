"""One worker process: its settings, what it keeps for itself, its liveness, its stop."""

"""Mail that waits: its payload, parked or watched in the schedule, cancelled, failed and kept, its
outcome read back."""

"""Tests through a real Postfix relay (with postgrey) started by the suite (devservers.postfix)."""

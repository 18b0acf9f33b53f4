"""Every crash point of a mail's life (mailer/crashpoints.py), each killed there and survived."""

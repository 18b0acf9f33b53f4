"""``python -m workers.cli``: the ``mailguard`` command."""

from workers.cli.group import main

main()

"""How a ``mailguard`` command fails: exit codes, one line on stderr, the group that prints it.

Exit codes: 0 done, 1 refused or not found, 2 bad usage or input. A command stops with
:func:`fail`; :class:`OneLineErrors`, the command group, turns every error (click's own, a
command's, an unexpected exception) into one line ``mailguard: error: ...`` on stderr and its
exit code; ``--debug`` lets an unexpected exception's traceback through instead.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import click

#: Exit codes.
OK, REFUSED, USAGE = 0, 1, 2


class Refused(click.ClickException):
    """A problem the user can act on, printed as one line; exit code 1 (refused, not found)."""

    exit_code = REFUSED


class BadInput(Refused):
    """Bad usage or input, printed as one line; exit code 2."""

    exit_code = USAGE


def fail(message: str, exit_code: int = REFUSED) -> NoReturn:
    """Stop the command: ``message`` on stderr as one line, then exit with ``exit_code``."""
    raise (BadInput if exit_code == USAGE else Refused)(message)


class OneLineErrors(click.Group):
    """A group whose every error is one line on stderr (no usage block, no traceback)."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        debug = "--debug" in argv[: argv.index("--") if "--" in argv else len(argv)]
        try:
            code = super().main(
                argv, prog_name or "mailguard", complete_var, standalone_mode=False, **extra
            )
        except click.exceptions.Abort:
            error_line("aborted")
            code = REFUSED
        except click.UsageError as exc:
            where = f"{exc.ctx.command_path}: " if exc.ctx is not None else ""
            error_line(f"{where}{exc.format_message()} (see --help)")
            code = USAGE
        except click.ClickException as exc:
            error_line(exc.format_message())
            code = exc.exit_code
        except Exception as exc:
            if debug:
                raise
            error_line(f"{type(exc).__name__}: {exc} (run with --debug for the traceback)")
            code = REFUSED
        code = code if isinstance(code, int) else OK
        if standalone_mode:
            sys.exit(code)
        return code


def error_line(message: str) -> None:
    """``mailguard: error: MESSAGE`` on stderr, on one line whatever ``message`` holds."""
    text = " ".join(str(message).split())
    click.echo(f"mailguard: error: {text}", err=True)


def confirmed(question: str, *, yes: bool, refused: str) -> None:
    """Go on when ``yes`` (``--yes``) or the user answers yes to ``question`` (on stderr, read
    from stdin: a terminal or a pipe); else stop with ``refused`` (exit 1). With no answer to
    read (stdin closed: a script, a CI job, no terminal), one line naming ``--yes``, exit 2."""
    if yes:
        return
    try:
        answer = click.confirm(question, err=True)
    except click.Abort:
        click.echo(err=True)  # end the question's line: the error is a line of its own
        fail(f"{refused}: no answer to {question!r} (no terminal to ask on): add --yes", USAGE)
    if not answer:
        fail(refused)

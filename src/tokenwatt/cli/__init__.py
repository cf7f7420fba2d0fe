"""The ``tokenwatt`` command: a thin typer layer. Nothing in the library imports it.

Each command lives in its own module and registers itself on ``app``. Errors a user can
act on (``TokenwattError``) print one line and exit 2; anything else is a bug and keeps
its traceback.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console
from rich.markup import escape

from tokenwatt import __version__
from tokenwatt.errors import TokenwattError

app = typer.Typer(
    name="tokenwatt",
    help="TokenWatt Bench: SLO goodput, tokens per joule and decode bandwidth utilization.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err_console = Console(stderr=True)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tokenwatt {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """TokenWatt Bench."""


def _hide_flag_types() -> None:
    """Typer's help shows ``<bool>`` beside every flag (``--json <bool>``), which reads as if
    it took a value; users then wrote ``--json true``. A flag shows no type here."""
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None:  # an older typer: it never showed one
        return

    def display_type_rich(self: TyperOption, ctx: object) -> str | None:
        if getattr(self, "is_flag", False):
            return None
        result: str | None = shown(self, ctx)
        return result

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_hide_flag_types()


def _register() -> None:
    from tokenwatt.cli import bench, geometry, import_cmd, mbu, predict, probe, report, sim, sweep

    for module in (geometry, sim, probe, bench, report, mbu, import_cmd, sweep, predict):
        module.register(app)


_register()


def with_hint(message: str) -> str:
    """The error, with the fix for the one mistake peers' habits make: a base URL whose
    ``/models`` is not found is almost always missing its ``/v1``."""
    if "404" in message and "/models" in message and "/v1" not in message:
        return f"{message} (OpenAI-compatible servers answer under /v1: try http://HOST:PORT/v1)"
    return message


def _peer_hint(exc: Exception) -> None:
    """An unknown flag: the peers' table answers first, click's guess only when it is a typo;
    several unknown flags on the command line are all answered at once, one line each."""
    from typer._click.exceptions import NoSuchOption

    from tokenwatt.cli.hints import hint_for, typo_suggestions, unknown_flags, unknown_flags_message

    if not isinstance(exc, NoSuchOption):
        return
    ctx = getattr(exc, "ctx", None)
    params = ctx.command.params if ctx is not None else []
    known = sorted({o for p in params for o in (*p.opts, *p.secondary_opts)} | {"--help"})
    flags = unknown_flags(sys.argv[1:], set(known)) if params else []
    if len(flags) > 1 and exc.option_name in flags:
        exc.message = unknown_flags_message(flags, [k for k in known if k.startswith("--")])
        exc.possibilities = None
        return
    hint = hint_for(exc.option_name)
    if hint is not None:
        exc.message = f"No such option: {exc.option_name}; {hint}"
        exc.possibilities = None
    else:
        exc.possibilities = typo_suggestions(exc.option_name, list(exc.possibilities or []))


def main() -> None:
    try:
        # Without standalone mode click returns a command's exit code instead of exiting.
        rc = app(standalone_mode=False)
    except TokenwattError as exc:
        # The message is text, not markup: "pip install 'tokenwatt[nvidia]'" must survive.
        from tokenwatt.spec import redact_text  # no URL credentials in any printed line

        err_console.print(
            f"[bold red]error:[/] {escape(with_hint(redact_text(str(exc))))}",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        err_console.print("aborted")
        sys.exit(130)
    except KeyboardInterrupt:
        from tokenwatt.cli._loop import stop_exit_code

        sys.exit(stop_exit_code())  # 130 for Ctrl-C, 143 for SIGTERM
    except Exception as exc:
        # Usage errors (click's, vendored inside typer) know how to show themselves.
        _peer_hint(exc)
        show, code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
        if callable(show) and isinstance(code, int):
            show()
            sys.exit(code)
        raise
    sys.exit(rc if isinstance(rc, int) else 0)

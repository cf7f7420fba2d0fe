"""CLI: ``tokenwatt report DIR`` (re-render a run) and ``tokenwatt compare DIR1 DIR2 ...``.

Both start from the result file alone, never from a live run: what they show is what the
file holds. Unreadable or unknown files are a one-line ``ReportError`` (exit 2).
"""

from __future__ import annotations

import typer


def report(
    run: str = typer.Argument(..., help="a run directory (holding result.json) or a result file"),
    html: bool = typer.Option(True, "--html/--no-html", help="also regenerate DIR/report.html"),
    width: int | None = typer.Option(None, "--width", min=60, help="terminal width to render"),
) -> None:
    """Re-render a run's terminal report and its report.html from result.json."""
    from rich.console import Console

    from tokenwatt.errors import ReportError
    from tokenwatt.report.html import write_html
    from tokenwatt.report.terminal import ResultView
    from tokenwatt.result import load_result, result_path

    result = load_result(run)
    console = Console(width=width, soft_wrap=False)
    console.print(ResultView(result))
    if html:
        out_dir = result_path(run).parent
        try:
            path = write_html(result, out_dir)
        except OSError as exc:
            raise ReportError(
                f"{out_dir}: cannot write report.html ({exc.strerror or exc}); "
                "use --no-html or a writable directory"
            ) from None
        console.print(f"\nreport: {path}", highlight=False, soft_wrap=True)


def compare(
    runs: list[str] = typer.Argument(  # noqa: B008
        ..., help="two or more run directories (or result files)"
    ),
    width: int | None = typer.Option(None, "--width", min=60, help="terminal width to render"),
    under_test: list[str] = typer.Option(  # noqa: B008
        [], "--under-test", help="a spec key (dotted) the A/B verdict may see differ"
    ),
) -> None:
    """Set runs side by side: goodput, per GPU, tokens/J, MBU, boundary rate, TTFT/TPOT;
    with two runs, the A/B verdict of the second against the first."""
    from rich.console import Console

    from tokenwatt.report.compare import compare_results, load_runs
    from tokenwatt.report.compare_view import comparison_view, verdict_view
    from tokenwatt.report.verdict import result_verdicts

    runs_loaded = load_runs(runs)
    comparison = compare_results(runs_loaded)
    console = Console(width=width)
    console.print(comparison_view(comparison))
    if len(runs_loaded) == 2:
        labels = [lab for lab, _ in runs_loaded]
        ab = result_verdicts(labels, [r for _, r in runs_loaded], under_test)
        console.print(verdict_view(ab))


def register(app: typer.Typer) -> None:
    """Add this module's commands to the app."""
    app.command("report")(report)
    app.command("compare")(compare)

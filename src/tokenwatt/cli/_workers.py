"""``--workers N|auto`` for ``tokenwatt probe`` and ``bench``: one parse, one spec update."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from tokenwatt.errors import SpecError

if TYPE_CHECKING:
    from tokenwatt.spec import BenchSpec

WorkersOption = Annotated[
    str | None,
    typer.Option(
        "--workers",
        help="processes that send the load: N or auto (one per free core); "
        "overrides search.probe.workers",
    ),
]


def with_workers(spec: BenchSpec, workers: str | None) -> BenchSpec:
    """The spec with ``search.probe.workers`` from the flag (same bounds as in the spec)."""
    from pydantic import ValidationError

    if workers is None:
        return spec
    value: int | str = workers if workers == "auto" else _int(workers)
    try:
        probe = spec.search.probe.model_validate(
            {**spec.search.probe.model_dump(), "workers": value}
        )
    except ValidationError as exc:
        why = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise SpecError(f"--workers: {why}") from None
    return spec.model_copy(update={"search": spec.search.model_copy(update={"probe": probe})})


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        msg = f"--workers: {text!r} is not a whole number or auto; e.g. --workers 2"
        raise SpecError(msg) from None

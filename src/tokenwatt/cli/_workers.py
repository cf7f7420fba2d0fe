"""``--workers N|auto`` and ``--ray auto|ADDRESS|local`` for ``tokenwatt probe`` and ``bench``:
one parse, one spec update."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

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
# The help is rich markup: "tokenwatt[ray]" lost its "[ray]" as a tag, so the bracket is escaped.
RayOption = Annotated[
    str | None,
    typer.Option(
        "--ray",
        help="send from Ray actors (--workers of them; auto: the cluster's CPUs minus one): "
        "local, auto or ray://HOST:PORT; overrides search.probe.ray (needs tokenwatt\\[ray])",
    ),
]


def with_senders(spec: BenchSpec, workers: str | None, ray: str | None = None) -> BenchSpec:
    """The spec with ``search.probe.workers`` and ``.ray`` from the flags (checked as in the
    spec); ``--ray`` without Ray installed is the one line naming the extra."""
    if workers is not None:
        value: int | str = workers if workers == "auto" else _int(workers)
        spec = _with_probe(spec, "--workers", "workers", value)
    if ray is not None:
        spec = _with_probe(spec, "--ray", "ray", ray)
        from tokenwatt.send.ray_workers import ray_module

        ray_module()
    return spec


def _with_probe(spec: BenchSpec, flag: str, key: str, value: Any) -> BenchSpec:
    from pydantic import ValidationError

    try:
        probe = spec.search.probe.model_validate({**spec.search.probe.model_dump(), key: value})
    except ValidationError as exc:
        why = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise SpecError(f"{flag}: {why}") from None
    return spec.model_copy(update={"search": spec.search.model_copy(update={"probe": probe})})


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        msg = f"--workers: {text!r} is not a whole number or auto; e.g. --workers 2"
        raise SpecError(msg) from None

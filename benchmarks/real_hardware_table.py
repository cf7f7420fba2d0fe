"""The real-hardware validation table of docs/validation.md, from public data TokenWatt did
not make (tests/fixtures/public/README.md): prints one Markdown row per measurement.

    python benchmarks/real_hardware_table.py [--all]

Per row: MBU as ``tokenwatt mbu`` derives it from the source's own figures, with its raised
flags; B = T·τ/R against the engine's own mean running batch where the source logged it;
tokens per joule (T ÷ the source's mean power, or the mean power of the power log it shipped)
against the source's own energy per token where it states one; and client MBU against a
hardware counter's DRAM throughput where one was logged (none of these sources logged one).
``--all`` prints every configuration, not only the shown batch sizes.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from public_rows import Row, all_rows, shown


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:.1f} %"


def _num(x: float | None, spec: str = ".1f") -> str:
    return "—" if x is None else format(x, spec)


def line(r: Row) -> str:
    """One Markdown row."""
    ratio = r.b_client / r.b_engine if r.b_client and r.b_engine else None
    tpj = f"{_num(r.tokens_per_joule, '.2f')} / {_num(r.source_tokens_per_joule, '.2f')}"
    if r.tokens_per_joule is None and r.source_tokens_per_joule is None:
        tpj = "—"
    upper = r.est.mbu.mbu_lengths_upper_bound
    mbu = _pct(r.mbu) + ("" if upper is None else f"–{_pct(upper)}")
    cells = [
        r.source, f"{r.gpus} × {r.gpu}", r.model, r.point,
        f"{r.est.output_tokens_per_s:,.0f}", f"{r.est.itl_s * 1e3:.2f}",
        f"{mbu} ({', '.join(r.flags) or 'no flag'})",
        f"{_num(r.b_client)} / {_num(r.b_engine)} ({_num(ratio, '.2f')})",
        tpj, "no counter logged",
    ]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    rows = all_rows()
    if "--all" not in sys.argv:
        rows = shown(rows)
    print(
        "| source | node | model | point | T tok/s | τ ms | MBU (flags) | "
        "B client / engine (ratio) | tok/J ours / source's | counter DRAM |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(line(r))


if __name__ == "__main__":
    main()

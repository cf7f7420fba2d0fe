"""The accelerator catalog against the vendors' rated figures (SI units)."""

from __future__ import annotations

import pytest

from tokenwatt.errors import HardwareError
from tokenwatt.hardware import custom_accelerator, get_accelerator, list_accelerators

REQUIRED = [
    "a100-40gb", "a100-80gb", "a100-pcie-40gb", "a100-pcie-80gb", "h100-sxm", "h100-sxm-64gb",
    "h100-pcie", "h100-nvl", "h200", "h200-nvl", "h20", "gh200-96gb", "gh200-144gb", "b200",
    "b300", "gb200", "l40s", "l4", "mi250x", "mi300x", "mi325x", "mi355x", "gaudi2", "gaudi3",
    "tpu-v5e", "tpu-v5p", "tpu-v6e",
]  # fmt: skip


@pytest.mark.parametrize("name", REQUIRED)
def test_required_entries_present_with_positive_figures(name: str) -> None:
    acc = get_accelerator(name)
    assert acc.bandwidth_bytes_per_s > 1e11
    assert acc.memory_bytes > 1e10
    assert acc.bf16_dense_flops is not None and acc.bf16_dense_flops > 1e13
    assert acc.source


@pytest.mark.parametrize(
    ("name", "bandwidth", "memory", "tdp"),
    [
        ("h100-sxm", 3.35e12, 80e9, 700),
        ("h100-sxm-64gb", 1.63e12, 64e9, 700),
        ("h100-nvl", 3.9e12, 94e9, 400),
        ("a100-pcie-40gb", 1.555e12, 40e9, 250),
        ("a100-pcie-80gb", 1.935e12, 80e9, 300),
        ("gh200-96gb", 4.0e12, 96e9, 1000),
        ("gh200-144gb", 4.9e12, 144e9, 1000),
        ("h200-nvl", 4.8e12, 141e9, 600),
        ("h200", 4.8e12, 141e9, 700),
        ("mi300x", 5.3e12, 192e9, 750),
        ("b200", 7.7e12, 180e9, 1000),
        ("tpu-v6e", 1.638e12, 32e9, None),
    ],
)
def test_rated_figures(name: str, bandwidth: float, memory: float, tdp: float | None) -> None:
    acc = get_accelerator(name)
    assert acc.bandwidth_bytes_per_s == bandwidth
    assert acc.memory_bytes == memory
    assert acc.tdp_w == tdp


def test_lookup_is_case_insensitive_and_knows_aliases() -> None:
    assert get_accelerator("H100-SXM5").name == "h100-sxm"
    assert get_accelerator("h100_sxm_64gb").name == "h100-sxm-64gb"
    assert get_accelerator("gh200-hbm3e").name == "gh200-144gb"
    assert get_accelerator("  MI300X ").name == "mi300x"
    assert get_accelerator("Gaudi_3").name == "gaudi3"


def test_unknown_accelerator_names_the_known_ones() -> None:
    with pytest.raises(HardwareError, match=r"unknown accelerator 'h900'.*h100-sxm"):
        get_accelerator("h900")


def test_names_are_unique_lowercase_hyphenated() -> None:
    names = [a.name for a in list_accelerators()]
    assert len(names) == len(set(names))
    assert all(n == n.lower() and " " not in n and "_" not in n for n in names)


def test_dense_flops_are_half_of_sparse_datasheet_figures() -> None:
    # The H100 SXM datasheet lists 1,979 BF16 TFLOPS "with sparsity".
    assert get_accelerator("h100-sxm").bf16_dense_flops == pytest.approx(1979e12 / 2, rel=1e-3)


def test_custom_accelerator_validates_and_overrides() -> None:
    with pytest.raises(HardwareError, match="bandwidth_bytes_per_s must be > 0"):
        custom_accelerator("x", bandwidth_bytes_per_s=0, memory_bytes=1e9)
    base = get_accelerator("h100-sxm")
    acc = custom_accelerator("h100-oc", bandwidth_bytes_per_s=4e12, memory_bytes=80e9, base=base)
    assert acc.bandwidth_bytes_per_s == 4e12
    assert acc.bf16_dense_flops == base.bf16_dense_flops
    assert acc.confidence == "user"


@pytest.mark.parametrize(
    ("name", "variants"),
    [
        ("h100", ["h100-sxm", "h100-sxm-64gb", "h100-pcie", "h100-nvl"]),
        ("A100", ["a100-40gb", "a100-80gb", "a100-pcie-40gb", "a100-pcie-80gb"]),
        ("a100-sxm", ["a100-40gb", "a100-80gb"]),
        ("gh200", ["gh200-96gb", "gh200-144gb"]),
    ],
)
def test_a_name_several_variants_share_is_asked_for(name: str, variants: list[str]) -> None:
    """Not guessed: one line listing each variant with its memory and bandwidth."""
    with pytest.raises(HardwareError) as info:
        get_accelerator(name)
    text = str(info.value)
    assert "\n" not in text and f"{len(variants)} memory variants" in text
    for v in variants:
        assert f"{v} (" in text


def test_every_entry_names_its_source() -> None:
    for acc in list_accelerators():
        assert len(acc.source) > 20, acc.name
        assert acc.confidence, acc.name

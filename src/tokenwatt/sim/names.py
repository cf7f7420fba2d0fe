"""The model names the simulator answers to, and the name it identifies itself by.

Why more than one name: a user points ``tokenwatt bench --model meta-llama/Llama-3.1-8B-Instruct``
at whatever serves that model. vLLM serves the name it was started with (the Hugging Face id
by default), so a simulator of the Llama-3.1-8B preset that answered only to ``Llama-3.1-8B``
refused the command a real engine would take. A simulator started without
``--served-model-name`` therefore lists its own name, the bundled preset's key and the
preset's Hugging Face ids in ``/v1/models`` (vLLM lists several names the same way when it
is given several), and accepts in a request any name that resolves to the same preset
(``geometry.resolve_preset``: case, ``_`` and the aliases; the part after an ``org/``
prefix). Started with ``--served-model-name X``, it answers to X alone, as vLLM does.

``SIM_SERVER_NAME`` is the word ``/version`` and the model card's ``owned_by`` carry, so a
client can tell a simulator it did not start from an engine.
"""

from __future__ import annotations

from tokenwatt.geometry import ModelGeometry
from tokenwatt.geometry.config import resolve_preset

__all__ = ["SIM_SERVER_NAME", "accepts_model", "served_names"]

SIM_SERVER_NAME = "tokenwatt-sim"

# The Hugging Face ids each bundled preset stands for (the repos whose config.json it is).
_HF_IDS: dict[str, tuple[str, ...]] = {
    "llama-3.1-8b": ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B"),
    "llama-3.1-70b": ("meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Llama-3.1-70B"),
    "qwen3-30b-a3b": ("Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B-Instruct-2507"),
    "qwen3-30b-a3b-fp8": ("Qwen/Qwen3-30B-A3B-FP8",),
    "qwen3-8b": ("Qwen/Qwen3-8B",),
    "deepseek-v3": ("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1"),
    "mixtral-8x7b-v0.1": ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mistralai/Mixtral-8x7B-v0.1"),
    "gpt-oss-20b": ("openai/gpt-oss-20b",),
}


def _preset_of(geometry: ModelGeometry) -> str | None:
    """The bundled preset the geometry was read from, or None (a config.json, a file)."""
    if not geometry.source.startswith("preset"):
        return None
    return resolve_preset(geometry.name)


def _name_preset(name: str) -> str | None:
    return resolve_preset(name) or resolve_preset(name.rsplit("/", 1)[-1])


def served_names(served: str, geometry: ModelGeometry) -> tuple[str, ...]:
    """What ``/v1/models`` lists, the served name first (a client that names no model takes
    the first). Only a preset served under its own name gets the other names."""
    key = _preset_of(geometry)
    if key is None or served != geometry.name:
        return (served,)
    names = [served, key, *_HF_IDS.get(key, ())]
    return tuple(dict.fromkeys(names))


def accepts_model(name: str, served: str, geometry: ModelGeometry) -> bool:
    """Whether a request naming ``name`` is for this simulator's model."""
    if name in served_names(served, geometry):
        return True
    key = _preset_of(geometry)
    return key is not None and served == geometry.name and _name_preset(name) == key

"""Settings for the built-in simulator, used when ``endpoint.url`` is ``sim``.

The accelerator, GPUs per replica and replicas come from the ``hardware`` section and the
model from ``model``, so a spec describes one node whether it is real or simulated. The knobs
themselves are ``tokenwatt.simsettings.SimSettings``, the one definition the simulator and the
``tokenwatt sim`` command also validate with, so the three cannot drift apart.
"""

from __future__ import annotations

from tokenwatt.simsettings import SimSettings


class SimSection(SimSettings):
    """The spec's ``sim:`` section: exactly the simulator's settings (see SimSettings)."""

"""How a probe's requests leave the machine: the sender seam (``base.Sender``) and its three
implementations (``local``: asyncio tasks here, ``processes``: worker processes,
``ray_actors``: Ray actors), opened with their refusals by ``opening.open_sender``.

Nothing is imported here: a module that needs only the seam (``base``) must not pull in
worker processes or Ray by importing the package.
"""

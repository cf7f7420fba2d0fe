"""How a probe's requests leave the machine: the sender seam (``base.Sender``) and its three
implementations (``local``: asyncio tasks here, ``processes``: worker processes,
``ray_actors``: Ray actors), opened with their refusals by ``opening.open_sender``.

Nothing is imported here: ``load.workers`` shares the send call and the timing rule of
``base``, and the implementations import ``load.workers``, so importing the package itself
must not pull them in.
"""

"""Automatic prefix caching of one replica: 16-token prompt blocks named by the hash of their
whole prefix, shared between requests by reference count, evicted least recently used.

Like vLLM's: block k of a prompt is named by ``hash(name of block k−1, its 16 tokens)``, so a
block is reusable only when everything before it matches too; only full blocks are named; a
request reuses the longest run of named blocks from its start, at most ``(L − 1) // 16``
blocks (the last prompt token is always computed, for its logits). A block whose last user
finished stays named and counts as free; it is evicted (its name forgotten) only when a fresh
block is needed and no never-named free block is left, least recently released first (a
request releases its blocks tail first, so a prompt's tail goes before its head).

The engine counts blocks as numbers (``free_blocks``); this class holds only the names. Named
free blocks are in ``lru``; when the engine hands out more fresh blocks than unnamed free
ones exist, ``reconcile`` evicts the excess from the head of ``lru``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence

from tokenwatt.sim.config import BLOCK_SIZE

__all__ = ["PrefixCache", "block_hashes"]


def block_hashes(tokens: Sequence[Hashable]) -> tuple[int, ...]:
    """The names of the full 16-token blocks of ``tokens``, each chained on its parent's."""
    out: list[int] = []
    parent = 0
    for k in range(len(tokens) // BLOCK_SIZE):
        parent = hash((parent, tuple(tokens[k * BLOCK_SIZE : (k + 1) * BLOCK_SIZE])))
        out.append(parent)
    return tuple(out)


class PrefixCache:
    """Named blocks with reference counts; counters as vLLM's (tokens queried, tokens hit)."""

    __slots__ = ("evictions", "hits", "lru", "queries", "refs")

    def __init__(self) -> None:
        self.refs: dict[int, int] = {}  # name → requests holding it (0: free, in lru)
        self.lru: OrderedDict[int, None] = OrderedDict()  # free named blocks, oldest first
        self.evictions = 0  # blocks whose name was forgotten to make room
        self.queries = 0  # tokens of requests looked up at admission
        self.hits = 0  # of those, tokens found cached

    def reconcile(self, free_blocks: int) -> int:
        """Forget the oldest free named blocks the engine has since handed out as fresh ones
        (more named free blocks than free blocks); returns how many were evicted."""
        n = 0
        while len(self.lru) > free_blocks:
            name, _ = self.lru.popitem(last=False)
            del self.refs[name]
            n += 1
        self.evictions += n
        return n

    def match(self, names: Sequence[int], max_blocks: int) -> int:
        """How many leading blocks of a prompt are cached (at most ``max_blocks``)."""
        n = 0
        for name in names[:max_blocks]:
            if name not in self.refs:
                break
            n += 1
        return n

    def free_among(self, names: Sequence[int]) -> int:
        """How many of these cached blocks are free now (taking them uses free blocks)."""
        return sum(1 for name in names if self.refs[name] == 0)

    def acquire(self, names: Sequence[int]) -> None:
        for name in names:
            r = self.refs[name]
            if r == 0:
                del self.lru[name]
            self.refs[name] = r + 1

    def register(self, name: int) -> bool:
        """Name a block its request just computed; False when the name is taken already."""
        if name in self.refs:
            return False
        self.refs[name] = 1
        return True

    def release(self, names: Sequence[int]) -> int:
        """Drop one reference of each, tail first; returns how many became free."""
        freed = 0
        for name in reversed(names):
            r = self.refs[name] - 1
            self.refs[name] = r
            if r == 0:
                self.lru[name] = None
                freed += 1
        return freed

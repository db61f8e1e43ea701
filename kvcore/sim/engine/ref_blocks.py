"""The reference engine model's KV block pool: a literal, slow mirror of vLLM 0.33's ``BlockPool`` and the
full-attention ``KVCacheManager.allocate_slots`` for one KV-cache group (``vllm/v1/core/block_pool.py``,
``kv_cache_manager.py``, ``single_type_kv_cache_manager.py``).

- ``num_blocks`` physical blocks; block 0 is the null block and never free, so ``num_blocks - 1`` can be used.
- The free queue is ordered: allocation pops from the front. A freed block without a hash goes to the **front**
  (reused first); one with a hash (a full block of known tokens, cached for prefix reuse) to the **back**, so cached
  blocks are evicted least-recently-freed first. A request's blocks are freed tail first.
- A block is cached (gets its hash key) when it is full of known tokens at an allocation; the hash map may hold
  several blocks per key (vLLM never de-duplicates) and a lookup returns the first one inserted. Popping a cached
  block from the free queue evicts its key. A prefix hit on a free cached block takes it out of the free queue.

Block keys stand for vLLM's chained hashes: ``("p", class, i)`` for block i lying wholly inside the class's shared
prompt prefix, ``("u", request, i)`` for every other block (unique prompt tokens or generated tokens).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

Key = tuple[str, int, int]


class Block:
    __slots__ = ("bid", "ref", "key")

    def __init__(self, bid: int) -> None:
        self.bid = bid
        self.ref = 0
        self.key: Key | None = None


class BlockPool:
    def __init__(self, num_blocks: int, caching: bool) -> None:
        self.caching = caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free: OrderedDict[int, Block] = OrderedDict((b.bid, b) for b in self.blocks[1:])
        self.cached: dict[Key, dict[int, Block]] = {}

    @property
    def num_free(self) -> int:
        return len(self.free)

    def lookup(self, key: Key) -> Block | None:
        """``get_cached_block``: the first block inserted under ``key``, or None."""
        entry = self.cached.get(key)
        return next(iter(entry.values())) if entry else None

    def get_new_blocks(self, n: int) -> list[Block]:
        if n > len(self.free):
            raise RuntimeError(f"cannot get {n} free blocks from {len(self.free)}")
        out = []
        for _ in range(n):
            _, blk = self.free.popitem(last=False)
            if self.caching and blk.key is not None:
                entry = self.cached[blk.key]
                del entry[blk.bid]
                if not entry:
                    del self.cached[blk.key]
                blk.key = None
            blk.ref = 1
            out.append(blk)
        return out

    def touch(self, blocks: Iterable[Block]) -> None:
        for blk in blocks:
            if blk.ref == 0:
                del self.free[blk.bid]
            blk.ref += 1

    def free_blocks(self, ordered: Iterable[Block]) -> None:
        """Free ``ordered`` (first = evicted first): uncached ones to the front, cached ones to the back."""
        first: list[Block] = []
        last: list[Block] = []
        for blk in ordered:
            blk.ref -= 1
            if blk.ref == 0:
                (first if blk.key is None or not self.caching else last).append(blk)
        for blk in reversed(first):
            self.free[blk.bid] = blk
            self.free.move_to_end(blk.bid, last=False)
        for blk in last:
            self.free[blk.bid] = blk

    def cache_block(self, blk: Block, key: Key) -> None:
        """``_insert_block_hash`` for a block that has no hash yet."""
        if blk.key == key:
            return
        entry = self.cached.setdefault(key, {})
        if blk.bid in entry:
            return
        blk.key = key
        entry[blk.bid] = blk

"""The fast engine model's KV block pool: the same free-queue order, hashing and eviction as vLLM's ``BlockPool``
(mirrored literally in :mod:`kvcore.sim.engine.ref_blocks`), without one object per block.

What makes it compact:

- Free blocks without a hash are anonymous and always at the front of vLLM's free queue (freed uncached blocks are
  prepended, cached ones appended, allocation pops the front), so they are a count, ``unc``.
- Blocks with a *unique* key ``("u", j, i)`` can only be hit by request j itself, and only while it waits; while j
  runs nobody looks them up, so they are registered lazily, when j frees them. Freed together they form one
  :class:`Segment` of the LRU: index ranges of j's chain, each evicted from its top (vLLM frees tail first).
- Blocks with a *shared* key ``("p", class, i)`` (wholly inside a class's shared prompt prefix) can be hit by any
  request of the class while in use, so each is a :class:`Copy` with a reference count, registered when computed.

Lookups return the first-inserted copy of a key, as vLLM's ``BlockHashToBlockMap`` does; for unique keys the
insertion order of j's segments stands for it (a segment is registered when freed, and j's older copies were freed
before its newer ones).
"""

from __future__ import annotations

from collections import OrderedDict


class Copy:
    """One physical block holding a shared-prefix key ``(cls, i)``."""

    __slots__ = ("key", "ref", "eid")

    def __init__(self, key: tuple[int, int]) -> None:
        self.key = key
        self.ref = 1
        self.eid = -1


class Segment:
    """Free cached blocks of request j's unique chain, evicted range by range, each from its top."""

    __slots__ = ("j", "ranges", "eid")

    def __init__(self, j: int, ranges: list[list[int]]) -> None:
        self.j = j
        self.ranges = ranges
        self.eid = -1

    def find(self, i: int) -> bool:
        return any(lo <= i < hi for lo, hi in self.ranges)

    def remove(self, a: int, b: int) -> int:
        """Take the indices [a, b) out of the ranges; returns how many were there."""
        out: list[list[int]] = []
        taken = 0
        for lo, hi in self.ranges:
            if hi <= a or lo >= b:
                out.append([lo, hi])
                continue
            taken += min(hi, b) - max(lo, a)
            if hi > b:  # a range is evicted from its top, so its upper part stays first
                out.append([b, hi])
            if lo < a:
                out.append([lo, a])
        self.ranges = out
        return taken


class FastPool:
    def __init__(self, num_blocks: int, caching: bool) -> None:
        self.caching = caching
        self.unc = num_blocks - 1
        self.cached_free = 0
        self.lru: OrderedDict[int, Copy | Segment] = OrderedDict()
        self.shared: dict[tuple[int, int], list[Copy]] = {}
        self.owned: dict[int, list[Segment]] = {}
        self.next_eid = 0

    @property
    def num_free(self) -> int:
        return self.unc + self.cached_free

    def _append(self, entry: Copy | Segment) -> None:
        entry.eid = self.next_eid
        self.next_eid += 1
        self.lru[entry.eid] = entry

    def pop(self, n: int) -> None:
        """Allocate ``n`` anonymous blocks from the front of the free queue, evicting cached ones as needed."""
        if n <= self.unc:
            self.unc -= n
            return
        n -= self.unc
        self.unc = 0
        if n > self.cached_free:
            raise RuntimeError(f"cannot get {n} more free blocks from {self.cached_free}")
        self.cached_free -= n
        lru = self.lru
        while n > 0:
            entry = next(iter(lru.values()))
            if isinstance(entry, Copy):
                lru.popitem(last=False)
                self.shared[entry.key].remove(entry)
                if not self.shared[entry.key]:
                    del self.shared[entry.key]
                entry.eid = -1
                n -= 1
                continue
            rng = entry.ranges[0]
            t = min(n, rng[1] - rng[0])
            rng[1] -= t
            n -= t
            if rng[1] == rng[0]:
                entry.ranges.pop(0)
                if not entry.ranges:
                    lru.popitem(last=False)
                    segs = self.owned[entry.j]
                    segs.remove(entry)
                    if not segs:
                        del self.owned[entry.j]

    def new_copy(self, key: tuple[int, int]) -> Copy:
        """Register a freshly computed shared-prefix block (in use, ref 1)."""
        copy = Copy(key)
        self.shared.setdefault(key, []).append(copy)
        return copy

    def lookup(self, j: int, cls: int, k_shared: int, max_blocks: int) -> tuple[list[Copy], list[Segment | None]]:
        """The longest cached prefix of request j's chain: shared copies for blocks ``< k_shared``, then, for each
        further block, the first segment of j that holds it."""
        copies: list[Copy] = []
        i = 0
        while i < max_blocks and i < k_shared:
            lst = self.shared.get((cls, i))
            if not lst:
                return copies, []
            copies.append(lst[0])
            i += 1
        segs = self.owned.get(j)
        found: list[Segment | None] = []
        if not segs:
            return copies, found
        while i < max_blocks:
            for seg in segs:
                if seg.find(i):
                    found.append(seg)
                    break
            else:
                break
            i += 1
        return copies, found

    def touch(self, copies: list[Copy], segs: list[Segment | None], start: int) -> None:
        """Take hit blocks out of the free queue: shared copies (ref + 1) and j's unique blocks from ``start``."""
        for copy in copies:
            if copy.ref == 0:
                del self.lru[copy.eid]
                copy.eid = -1
                self.cached_free -= 1
            copy.ref += 1
        i = start
        for seg in segs:
            assert seg is not None
            self.cached_free -= seg.remove(i, i + 1)
            i += 1
        for seg in {id(s): s for s in segs if s is not None}.values():
            if not seg.ranges:
                del self.lru[seg.eid]
                owner = self.owned[seg.j]
                owner.remove(seg)
                if not owner:
                    del self.owned[seg.j]

    def release(self, j: int, n: int, n_cached: int, k_shared: int, hits_shared: list[Copy], hit_hi: int,
                own_shared: list[Copy]) -> None:
        """Free request j's ``n`` blocks, tail first: blocks ``>= n_cached`` uncached (front), its unique cached blocks
        ``[k_shared, n_cached)`` as one segment, its own shared copies, then the shared copies it hit."""
        h = len(hits_shared) + max(0, hit_hi - k_shared)
        if not self.caching:
            self.unc += n - h
            for copy in hits_shared:  # pragma: no cover - no hits without caching
                copy.ref -= 1
            return
        self.unc += n - n_cached
        lo = k_shared if hit_hi > k_shared else max(h, k_shared)
        if n_cached > lo:
            seg = Segment(j, [[lo, n_cached]])
            self._append(seg)
            self.owned.setdefault(j, []).append(seg)
            self.cached_free += n_cached - lo
        for group in (own_shared, hits_shared):
            for copy in reversed(group):
                copy.ref -= 1
                if copy.ref == 0:
                    self._append(copy)
                    self.cached_free += 1

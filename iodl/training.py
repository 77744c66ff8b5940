"""DL patterns: train-sync (fetch a batch, compute, barrier) and infer-async (no barrier).

Each rank is one accelerator. A reader thread keeps `prefetch` batches ready ahead of compute,
as tf.data's prefetch does: the engine releases the GIL while it reads, so reads of the next
steps really overlap the emulated compute (a sleep, never a spin). Python runs once per step.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import queue
import threading
from collections import deque
import time
from typing import TYPE_CHECKING

import numpy as np

from . import _native, limits, plan, reduce
from .comm import sleep_until
from .cursor import Cancelled, Cursor, ShardFiles, joined_paths
from .data.tables import int_rows, take_rows
from .engines import open_reader
from .metrics import LIVE_STEPS
from .result import STEP_FIELDS

if TYPE_CHECKING:
    from .patterns import Run
    from .runspec import RunSpec
    from .result_types import Train

WAIT_SLICE_S = 0.1   # the compute loop's longest wait before it looks for a stop request again
# the step loop's wait for the node's others to be back at work before it adds the step before's
# record (run_steps): a wait in C that looks for no signal, so short, and never past the compute
RECORD_WAIT_NS = int(WAIT_SLICE_S * 1e9)



def buffer_size(shuffle: str, shuffle_size: int, samples_per_shard: int) -> int:
    """Samples held in the shuffle buffer: none without sample shuffling, and none for shards of
    one sample (there a sample order is a shard order: sample shuffling shuffles the shards)."""
    return shuffle_size if "sample" in shuffle and samples_per_shard > 1 else 0


_ONCE = np.ones(1, dtype=np.int32)   # a one-sample shard taken once (SampleStream.take_batch), shared
_ONCE.flags.writeable = False


class SampleStream:
    """A rank's endless stream of samples, from whole shards read sequentially.

    next_shard() gives (shard, epoch): the rank's share of each epoch, in order. take(n) returns
    the requests that deliver the next n samples: a shard is read in whole block_size requests
    from its start, as far as the last sample needed (to its end once its last sample is
    loaded), then the next shard begins. With a shuffle buffer of B samples (sample shuffling,
    as tf.data's shuffle(B) and DLIO's shuffle_size do), loading stays B samples ahead and each
    sample taken is drawn at random from what is loaded; the buffer empties at the end of an
    epoch's share before the next one's samples enter (shuffle before repeat), so every sample
    of a share is taken exactly once per epoch. Each finished share is checked for that.
    """

    CACHED_SHARDS = limits.CACHED_SHARDS

    def __init__(self, next_shard, sample_ends, sizes: np.ndarray, block_size: int, buffer: int = 0,
                 rng: np.random.Generator | list[int] | None = None, check: bool = True, records: bool = False,
                 npz_load: bool = False, batch_ends=None):
        self._next_shard, self._sample_ends, self._sizes, self._bs = next_shard, sample_ends, sizes, block_size
        # batch_ends(shards) -> (n, k) sample ends of a batch's shards in one look-up (a dataset's
        # tables read in one call); None: looked up a shard at a time
        self._batch_ends = batch_ends or (lambda shards: [sample_ends(s) for s in shards])
        self._records = records                           # tfrecord record by record (plan.record_plan)
        self._npz_load = npz_load                         # np.load's reads (plan.npz_load_plan)
        self._shard, self._ends, self._rows, self._sample, self._row = None, None, None, 0, 0
        self._layouts: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        # rng: the buffer's draws' Generator, or its seed (a list), the Generator then made at the
        # first draw: numpy.random's import is ~20 ms of a rank's CPU, and most runs never draw
        self._buffer_cap, self._rng, self._check = buffer, [0] if rng is None else rng, check
        self._buf_shard = np.empty(0, dtype=np.int64)     # loaded, not yet taken (shard, sample)
        self._buf_sample = np.empty(0, dtype=np.int64)
        self._buf_bytes = np.empty(0, dtype=np.int64)     # their sizes
        self._epoch = None                                # epoch being loaded
        self._drawn: deque[tuple[int, int]] = deque()     # (shard, epoch) drawn from next_shard, not begun
        self._taken: dict[int, np.ndarray] = {}           # this epoch's shards: times each sample was taken
        # take_batch's one-sample shards of this epoch, a list a batch, not yet in _taken: folded in
        # at once when _taken is looked at (_fold_once), one append a step until then
        self._once: list[list[int]] = []
        self.epochs_checked = 0                           # shares finished with every sample taken once
        self.epochs_wrong = 0                             # shares finished otherwise (a defect if ever > 0)
        self.trace: list | None = None                    # a list: take() appends (shards, samples) taken
        # shards read whole, one block_size request after the other, and no buffer: a shard of one
        # sample is then a whole step's worth of work in a few array operations (take_batch)
        self._whole_files = not (buffer or records or npz_load)
        self._lookahead_peek = getattr(next_shard, "peek", None)   # a ShardLookahead's (take_batch)

    def _peek(self) -> tuple[int, int]:
        """The next (shard, epoch), drawn but not begun (a next epoch's first shard waits there)."""
        if not self._drawn:
            self._drawn.append(self._next_shard())
        return self._drawn[0]

    def _layout(self, shard: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(sample end offsets, read plan, rows that complete each sample) of a shard, computed
        once while it stays in use."""
        layout = self._layouts.get(shard)
        if layout is None:
            if len(self._layouts) >= self.CACHED_SHARDS:
                self._layouts.pop(next(iter(self._layouts)))
            ends = np.asarray(self._sample_ends(shard))
            if self._records:
                layout = (ends, *plan.record_plan(ends, self._bs))
            elif self._npz_load:   # np.load reads the whole file for its first sample
                rows = plan.npz_load_plan(int(self._sizes[shard]), self._bs)
                layout = (ends, rows, np.full(len(ends), len(rows), dtype=np.int64))
            else:
                layout = (ends, plan.file_plan(self._sizes[shard], self._bs), -(-ends.astype(np.int64) // self._bs))
            self._layouts[shard] = layout
        return layout

    def _start_shard(self) -> bool:
        """Begin the next shard of this epoch's share; False at the share's end (the next
        epoch's first shard is held until the buffer is empty)."""
        shard, epoch = self._peek()
        if self._epoch is not None and epoch != self._epoch:
            if len(self._buf_shard):
                return False
            self._check_epoch()
        self._epoch = epoch
        self._drawn.popleft()
        self._shard = shard
        self._ends, self._rows, self._row_ends = self._layout(shard)
        self._sample = self._row = 0
        self._fold_once()
        if self._check and shard not in self._taken:
            self._taken[shard] = np.zeros(len(self._ends), dtype=np.int32)
        return True

    def finish(self) -> None:
        """The run took its last batch: check the last epoch's share too, when that batch ended
        it (the share is otherwise checked only as the next epoch's first shard begins, which a
        run that reads no batch past its last step never gets to). Looking at the next shard's
        epoch reads nothing."""
        if not self._check or self._shard is not None or len(self._buf_shard) or self._epoch is None:
            return
        if self._peek()[1] != self._epoch:
            self._check_epoch()

    def _check_epoch(self) -> None:
        self._fold_once()
        if self._taken:
            # _ONCE: a one-sample shard taken once (take_batch's), no array to look at
            ok = all(t is _ONCE or bool((t == 1).all()) for t in self._taken.values())
            self.epochs_checked += ok
            self.epochs_wrong += not ok
        self._taken = {}

    def _advance(self, n: int, out: list) -> tuple[int, int, int] | None:
        """Up to n more samples of the current epoch's share, in the order the shards hold them:
        appends their reads to out as (shard, rows, shard_finished) and returns (shard, first
        sample, count); None at the share's end."""
        while True:
            if self._shard is None and not self._start_shard():
                return None
            if len(self._ends):
                break
            self._shard = None                 # a shard without samples adds nothing
        shard, first = self._shard, self._sample
        k = min(n, len(self._ends) - first)
        self._sample += k
        done = self._sample == len(self._ends)
        upto = len(self._rows) if done else int(self._row_ends[self._sample - 1])
        out.append((shard, self._rows[self._row:upto], done))
        self._row = upto
        if done:
            self._shard = None
        return shard, first, k

    def left_in_shard(self) -> int:
        """Samples of the shard being read not yet loaded."""
        return len(self._ends) - self._sample if self._shard is not None else 0

    def end_epoch(self) -> list[int]:
        """Leave the rest of this epoch's share unread (an epoch of fewer steps than its data makes:
        DLIO's total_training_steps): the next take() begins the next epoch. Returns the shard left
        part-read, for its file to be closed. A share cut short is not checked."""
        left = [self._shard] if self._shard is not None else []
        self._shard = None
        self._buf_shard = self._buf_sample = self._buf_bytes = np.empty(0, dtype=np.int64)
        if self._epoch is not None:   # the share's other shards are passed over
            if not self._drawn and hasattr(self._next_shard, "pass_epoch"):
                self._next_shard.pass_epoch(self._epoch)
            else:
                while self._peek()[1] == self._epoch:
                    self._drawn.popleft()
        self._taken, self._once = {}, []
        return left

    def _taken_now(self, shard: int, samples: np.ndarray) -> None:
        """Count these samples of shard as taken (the order's own check), and trace them."""
        if self._check:
            self._fold_once()
            if self._taken[shard] is _ONCE:    # shared by take_batch's shards: counted on a copy
                self._taken[shard] = _ONCE.copy()
            np.add.at(self._taken[shard], samples, 1)
        if self.trace is not None:
            self.trace.append((np.full(len(samples), shard, dtype=np.int64), samples))

    def _fold_once(self) -> None:
        """take_batch's shards since the last look into _taken, all at once."""
        if self._once:
            pending, self._once = self._once, []
            self._taken_once([shard for shards in pending for shard in shards])

    def _taken_once(self, shards: list[int]) -> None:
        """Count one-sample shards as taken (take_batch's): each new one marked _ONCE, shared."""
        taken = self._taken
        fresh = dict.fromkeys(shards, _ONCE)
        if len(fresh) == len(shards) and taken.keys().isdisjoint(fresh):
            taken.update(fresh)   # the usual batch: shards not seen yet this epoch, none twice
            return
        for shard in shards:
            seen = taken.get(shard)
            taken[shard] = _ONCE if seen is None else seen + 1

    def take(self, n: int) -> tuple[list[tuple[int, np.ndarray, bool]], int]:
        """([(shard, rows, shard_finished)], bytes): the reads that make the next n samples
        available, and the bytes of those n samples (what the accelerator consumes)."""
        out: list = []
        consumed = 0
        if not self._buffer_cap:
            # no sample shuffling: the samples are taken as they are read (no buffer, a few
            # array operations per shard: this runs once per step on every rank)
            while n > 0:
                got = self._advance(n, out)
                if got is None:
                    continue                   # the next epoch begins (nothing is held back)
                shard, first, k = got
                ends = self._layout(shard)[0]
                consumed += int(ends[first + k - 1]) - (int(ends[first - 1]) if first else 0)
                self._taken_now(shard, np.arange(first, first + k))
                n -= k
            return out, consumed
        while n > 0:
            want = self._buffer_cap + n - len(self._buf_shard)
            while want > 0:                    # fill the buffer from this epoch's share
                got = self._advance(want, out)
                if got is None:
                    break
                shard, first, k = got
                ends = self._layout(shard)[0].astype(np.int64)
                self._buf_shard = np.concatenate([self._buf_shard, np.full(k, shard, dtype=np.int64)])
                self._buf_sample = np.concatenate([self._buf_sample, np.arange(first, first + k, dtype=np.int64)])
                self._buf_bytes = np.concatenate([self._buf_bytes, np.diff(ends[first:first + k],
                                                                           prepend=ends[first - 1] if first else 0)])
                want -= k
            have = len(self._buf_shard)
            if not have:                       # this epoch's share is used up: the next epoch begins
                if not self._start_shard():
                    raise RuntimeError("sample stream: an empty buffer could not start the next epoch")
                continue
            k = min(n, have)
            if isinstance(self._rng, list):
                self._rng = np.random.default_rng(self._rng)
            pick = np.sort(self._rng.choice(have, size=k, replace=False))
            shards, samples = self._buf_shard[pick], self._buf_sample[pick]
            for shard in np.unique(shards).tolist():
                self._taken_now(shard, samples[shards == shard])
            consumed += int(self._buf_bytes[pick].sum())
            keep = np.ones(have, dtype=bool)
            keep[pick] = False
            self._buf_shard, self._buf_sample, self._buf_bytes = (
                self._buf_shard[keep], self._buf_sample[keep], self._buf_bytes[keep])
            n -= k
        return out, consumed

    def _took_whole(self, shards: list[int], epochs) -> None:
        """Shards of one sample each, taken whole in this order (their epochs: a list, or an array
        looked at only when the batch crosses into another epoch): counted for the order's check,
        traced. Lists, not arrays: this runs every step, and a numpy scalar's comparison costs
        several times a Python int's, more so with the caches cold."""
        if shards:
            self._took_whole_ends(shards, epochs[0], epochs[-1], epochs)

    def _took_whole_ends(self, shards: list[int], first: int, last: int, epochs) -> None:
        """_took_whole of shards whose first and last epochs are these (ints)."""
        if first == last and self._epoch in (None, first):
            # one epoch, the one being read (epochs only grow along the stream): no check falls due
            self._epoch = first
            if self._check:
                self._once.append(shards)
        else:
            self._fold_once()
            for shard, epoch in zip(shards, np.asarray(epochs).tolist()):
                if self._epoch is not None and epoch != self._epoch:
                    self._check_epoch()
                self._epoch = epoch
                if self._check:
                    self._taken_once([shard])
        if self.trace is not None:
            self.trace.append((np.array(shards, dtype=np.int64), np.zeros(len(shards), dtype=np.int64)))

    def take_whole(self, n: int, ahead: int, files) -> tuple | None:
        """take_batch(n) of shards of one sample each, their opens started on files' open threads
        with the `ahead` shards after them (ShardLookahead.whole_batch): (shards, rows, bytes, open
        tickets), or None where the batch is not such (take_batch and ShardFiles then do it)."""
        if self._shard is not None or self._drawn or self._lookahead_peek is None:
            return None
        got = self._next_shard.whole_batch(n, ahead, files)
        if got is None:
            return None
        shards, epochs, ends, sizes, consumed, tickets = got
        first = ends[0]
        if first == ends[-1] and self._epoch == first and self._check and self.trace is None:
            self._once.append(shards)   # _took_whole's usual case, in place: this runs every step
        else:
            self._took_whole_ends(shards, first, ends[-1], epochs)
        return shards, np.frombuffer(_native.shard_plan(sizes, self._bs), dtype=plan.PLAN_DTYPE), consumed, tickets

    def take_batch(self, n: int) -> tuple[list[int], np.ndarray, list[bool], int]:
        """take(n) as one batch (as_batch). Shards of one sample each (retinanet, every JPEG
        dataset) take no Python per sample: the batch is the next n of a ShardLookahead's arrays,
        sizes and sample ends looked up as they were drawn (else drawn and looked up here, one
        call each: batch_ends, the size table's take_rows), its rows made at once
        (plan.shard_plan); the same reads in the same order as take()'s."""
        if not self._whole_files or self._shard is not None:
            return as_batch(*self.take(n))
        peek = self._lookahead_peek   # a ShardLookahead's arrays, tables looked up
        if peek is not None and not self._drawn:
            shards, epochs, sizes, ends = peek(n)
            if ends is not None and ends.shape[1] == 1:   # one sample each: the batch is these n
                self._next_shard.skip(n)
                listed = shards.tolist()
                self._took_whole(listed, epochs.tolist())
                return listed, plan.shard_plan(sizes, self._bs), [True] * n, sum(ends[:, 0].tolist())
        if len(self._drawn) < n:
            more = getattr(self._next_shard, "take", None)   # a ShardLookahead draws a batch's in one call
            if more:
                self._drawn.extend(more(n - len(self._drawn)))
            while len(self._drawn) < n:
                self._drawn.append(self._next_shard())
        drawn = list(itertools.islice(self._drawn, n))
        shards = [shard for shard, _epoch in drawn]
        ends = self._batch_ends(np.array(shards, dtype=np.int64))
        # k: the shards before the first of several samples (or none), where take() goes on
        if isinstance(ends, np.ndarray):      # (n, samples): every shard holds as many
            k = n if ends.shape[1] == 1 else 0
            consumed = int(ends[:k, 0].sum())
        else:
            one = [len(e) == 1 for e in ends]
            k = one.index(False) if not all(one) else n
            consumed = sum(int(e[0]) for e in ends[:k])
        shards = shards[:k]
        if k == len(self._drawn):
            self._drawn.clear()
        else:
            for _ in range(k):
                self._drawn.popleft()
        self._took_whole(shards, [epoch for _shard, epoch in drawn[:k]])
        rows = plan.shard_plan(take_rows(self._sizes, shards), self._bs)
        if k == n:
            return shards, rows, [True] * n, consumed
        # the rest as take() reads it
        more, rest_rows, rest_done, rest_bytes = as_batch(*self.take(n - k))
        both = np.concatenate([rows, rest_rows])   # a copy: rest_rows may be a shard's cached plan
        both["file"][len(rows):] += k
        return shards + more, both, [True] * k + rest_done, consumed + rest_bytes


def as_batch(segments: list[tuple[int, np.ndarray, bool]], consumed: int) -> tuple[list[int], np.ndarray, list[bool], int]:
    """A take()'s segments as one batch: (shards, rows, finished, bytes): rows are every segment's,
    their file column numbering the segment (its index in shards); finished[i]: shards[i] is read
    to its end."""
    shards = [shard for shard, _rows, _done in segments]
    done = [d for _shard, _rows, d in segments]
    if len(segments) == 1:
        rows = segments[0][1]            # one shard's plan: its file column is already 0
    elif segments:
        # one copy of every segment's rows, each numbered by its place in the batch (filled in
        # place: np.concatenate of structured arrays promotes their fields pair by pair)
        lengths = [len(part) for _shard, part, _done in segments]
        rows = plan.new_plan(sum(lengths))
        at = 0
        for (_shard, part, _done), n in zip(segments, lengths):
            rows[at:at + n] = part
            at += n
        rows["file"] = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    else:
        rows = plan.new_plan(0)
    return shards, rows, done, consumed


def sample_reads(start: int, end: int, block_size: int, align: int = 1) -> np.ndarray:
    """Rows (file column 0) that read bytes [start, end) of one file in block_size requests, from
    start rounded down to `align`: O_DIRECT reads need an aligned offset (the engine rounds a direct
    read's length up itself, and counts only the bytes asked for)."""
    start -= start % align
    n = -(-(end - start) // block_size)
    rows = plan.new_plan(n)
    rows["offset"] = start + np.arange(n, dtype=np.int64) * block_size
    rows["length"] = np.minimum(block_size, end - rows["offset"].astype(np.int64))
    return rows


class SampleAccessStream:
    """A rank's endless stream of samples read one at a time, each at its own offset: formats whose
    samples are found through an index (Format.reading "samples": indexed_binary), read as DLIO's index
    sampler and its indexed_binary reader read them (seek to the sample, read it, next sample).

    Each epoch lines up the mount's N samples shard by shard (shards in index order, or in the
    seeded permutation shard_source deals from when files are shuffled; samples in file order) and
    gives rank i of R the contiguous part [i*N//R, (i+1)*N//R), as DLIO splits its global sample
    indices: the samples of a single file are shared by the ranks. With sample shuffling the part
    is permuted whole, seeded per epoch and rank (DLIO shuffles a rank's whole part; no buffer, so
    shuffle_size plays no part). Across a mount's ranks every sample is thus taken exactly once per
    epoch; each rank checks its part (every sample of it once, none twice). With fewer samples than
    ranks, rank i takes sample i % N. A sample's reads are block_size requests over its extent; its
    file is opened for it and closed after, as DLIO's on-demand reader does. take(), finish(),
    epochs_checked, epochs_wrong and trace are SampleStream's.
    """

    CACHED_SHARDS = SampleStream.CACHED_SHARDS

    def __init__(self, cfg: RunSpec, sample_ends, n_shards: int, samples_per_shard: int, index_in_mount: int,
                 ranks_in_mount: int, rank: int, align: int = 1, check: bool = True):
        self._cfg, self._sample_ends, self._n, self._spf = cfg, sample_ends, n_shards, samples_per_shard
        self._i, self._r, self._align, self._check = index_in_mount, ranks_in_mount, align, check
        self._random = np.random.default_rng([cfg.seed, rank]) if cfg.sampling == "random" else None
        self._ends: dict[int, np.ndarray] = {}
        self._epoch, self._pos, self._unchecked = -1, 0, False   # _unchecked: a part begun, not yet checked
        self._shards = self._samples = np.empty(0, dtype=np.int64)
        self._taken: dict[int, np.ndarray] = {}
        self.epochs_checked = self.epochs_wrong = 0
        self.trace: list | None = None

    def _share(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(shards, samples) of this rank's part of an epoch, in the order it takes them."""
        cfg, total = self._cfg, self._n * self._spf
        if total < self._r:
            pos = np.array([self._i % total], dtype=np.int64)
        else:
            pos = np.arange(self._i * total // self._r, (self._i + 1) * total // self._r, dtype=np.int64)
        if "sample" in cfg.shuffle:
            pos = np.random.default_rng([cfg.seed, epoch, self._i, 2]).permutation(pos)
        order = epoch_order(self._n, cfg.seed, epoch) if "file" in cfg.shuffle else np.arange(self._n)
        return order[pos // self._spf].astype(np.int64), pos % self._spf

    def _next_epoch(self) -> None:
        self._check_epoch()
        self._epoch += 1
        self._shards, self._samples = self._share(self._epoch)
        self._pos, self._unchecked = 0, True

    def _check_epoch(self) -> None:
        """The finished part: no sample taken twice, and as many taken as the part holds (its size
        from its bounds, not from the order that was taken)."""
        if self._check and self._unchecked:
            total = self._n * self._spf
            want = 1 if total < self._r else (self._i + 1) * total // self._r - self._i * total // self._r
            counts = list(self._taken.values())
            ok = all(int(c.max()) <= 1 for c in counts) and sum(int(c.sum()) for c in counts) == want
            self.epochs_checked += ok
            self.epochs_wrong += not ok
        self._taken, self._unchecked = {}, False

    def finish(self) -> None:
        """The run took its last batch: check the epoch's part if that batch ended it."""
        if self._pos == len(self._shards):
            self._check_epoch()

    def left_in_shard(self) -> int:
        return 0                               # a sample's file is opened for it alone

    def end_epoch(self) -> list[int]:
        """Leave the rest of this epoch's part untaken (SampleStream.end_epoch); no file stays open."""
        if self._random is None and self._epoch >= 0:
            self._pos, self._taken, self._unchecked = self._part_len(), {}, False
        return []

    def _part_len(self) -> int:
        return len(self._shards)

    def _sample_ends_of(self, shard: int) -> np.ndarray:
        ends = self._ends.get(shard)
        if ends is None:
            if len(self._ends) >= self.CACHED_SHARDS:
                self._ends.pop(next(iter(self._ends)))
            ends = self._ends[shard] = np.asarray(self._sample_ends(shard), dtype=np.int64)
        return ends

    def take_batch(self, n: int) -> tuple[list[int], np.ndarray, list[bool], int]:
        """take(n) as one batch (as_batch)."""
        return as_batch(*self.take(n))

    def take(self, n: int) -> tuple[list[tuple[int, np.ndarray, bool]], int]:
        """([(shard, rows, True)] one per sample, bytes of the n samples taken)."""
        out: list = []
        consumed = 0
        while n > 0:
            if self._random is not None:      # --sampling random: any sample of the mount, no epochs
                pos = self._random.integers(self._n * self._spf, size=n)
                shards, samples = pos // self._spf, pos % self._spf
            else:
                if self._pos >= len(self._shards):
                    self._next_epoch()
                k = min(n, len(self._shards) - self._pos)
                shards = self._shards[self._pos:self._pos + k]
                samples = self._samples[self._pos:self._pos + k]
                self._pos += k
            for shard, j in zip(shards.tolist(), samples.tolist()):
                ends = self._sample_ends_of(shard)
                start, end = (int(ends[j - 1]) if j else 0), int(ends[j])
                out.append((shard, sample_reads(start, end, self._cfg.block_size, self._align), True))
                consumed += end - start
                if self._check and self._random is None:
                    self._taken.setdefault(shard, np.zeros(self._spf, dtype=np.int32))[j] += 1
            if self.trace is not None:
                self.trace.append((np.asarray(shards, dtype=np.int64), np.asarray(samples, dtype=np.int64)))
            n -= len(shards)
        return out, consumed


class ShardLookahead:
    """A next_shard source that can show what comes next: called, it gives (shard, epoch) in the
    source's own order (the stream's order and its once-per-epoch check are unchanged); ahead(n)
    draws the next n early and returns those of them no earlier ahead() returned, for the open
    threads to open before the stream reaches them.

    What is drawn is held as arrays, a chunk at a time (a source with draw(n), ShardShares, draws
    it in a few array operations): a batch of one-sample shards is then a few slices (peek, skip),
    no Python per shard. Given the dataset's tables (sizes, batch_ends), each chunk's file sizes
    and sample ends are looked up once as it is drawn (one call each), for the batch's plan and for
    the opens started ahead: a shard's rows are read once, not once per use."""

    CHUNK = 256   # positions drawn (and looked up) at a time

    def __init__(self, next_shard, sizes=None, batch_ends=None):
        self._next = next_shard
        self._draw_arrays = getattr(next_shard, "draw", None)
        self._sizes, self._batch_ends = sizes, batch_ends
        self._tables = sizes is not None and batch_ends is not None
        none = np.empty(0, dtype=np.int64)
        self._shards = self._epochs = none     # drawn, from position _pos on not yet handed to the stream
        self._size = none                      # with tables: their file sizes
        self._ends = None                      # with tables: their (n, k) sample ends, or None (they differ)
        self._pos = 0
        self._drawn = self._given = 0          # positions handed to the stream; given by ahead()
        # whole_batch's: the open threads' ticket of each position it gave them (-1: none), what it
        # made of the drawn positions once (_chunk), and the ShardFiles whose threads open them
        # (None until the first whole_batch)
        self._ticket = self._chunk = None
        self.opens = None

    def _fill(self, n: int) -> None:
        """At least n positions drawn and not yet handed on."""
        have = len(self._shards) - self._pos
        if have >= n:
            return
        want = max(n - have, self.CHUNK)
        if self._draw_arrays is not None:
            shards, epochs = self._draw_arrays(want)
        else:
            pairs = [self._next() for _ in range(want)]
            shards = np.array([s for s, _e in pairs], dtype=np.int64)
            epochs = np.array([e for _s, e in pairs], dtype=np.int64)
        keep = slice(self._pos, None)
        if self._tables:
            size = np.asarray(take_rows(self._sizes, shards), dtype=np.int64)
            ends = self._batch_ends(shards)
            ends = ends if isinstance(ends, np.ndarray) else None
            held = self._ends[keep] if self._ends is not None else None
            self._size = np.concatenate([self._size[keep], size])
            if self._pos == len(self._shards):   # nothing held: the new ones' alone
                self._ends = ends
            elif held is not None and ends is not None and held.shape[1:] == ends.shape[1:]:
                self._ends = np.concatenate([held, ends])
            else:
                self._ends = None
        if self._ticket is not None:
            self._ticket = np.concatenate([self._ticket[keep], np.full(len(shards), -1, dtype=np.int64)])
        self._shards = np.concatenate([self._shards[keep], shards])
        self._epochs = np.concatenate([self._epochs[keep], epochs])
        self._pos = 0
        self._chunk = None

    def __call__(self) -> tuple[int, int]:
        self._hand_over()
        self._fill(1)
        i = self._pos
        self.skip(1)
        return int(self._shards[i]), int(self._epochs[i])

    def take(self, n: int) -> list[tuple[int, int]]:
        """The next n calls' answers at once (a batch's shards)."""
        self._hand_over()
        self._fill(n)
        i = self._pos
        self.skip(n)
        return list(zip(self._shards[i:i + n].tolist(), self._epochs[i:i + n].tolist()))

    def peek(self, n: int):
        """(shards, epochs, sizes, ends) of the next n positions, not handed on (skip does that);
        sizes and ends None without tables, ends None where the shards' sample counts differ."""
        self._hand_over()
        self._fill(n)
        at = slice(self._pos, self._pos + n)
        return (self._shards[at], self._epochs[at], self._size[at] if self._tables else None,
                self._ends[at] if self._tables and self._ends is not None else None)

    def skip(self, n: int) -> None:
        """Hand the next n positions on (peek's) to the stream, which takes them other than by
        whole_batch: the opens whole_batch gave the threads for them are dropped (an epoch's rest
        passed over, pass_epoch), as no one will take them."""
        if self._ticket is not None:
            self.opens.drop_ahead(self._ticket[self._pos:self._pos + n])
        self._pos += n
        self._drawn += n

    def pass_epoch(self, epoch: int) -> None:
        """Hand on the rest of this epoch's positions, drawn or not (SampleStream.end_epoch): the
        next position is the next epoch's first."""
        while True:
            self._fill(1)
            rest = self._epochs[self._pos:]
            k = int(np.argmin(rest == epoch)) if rest[-1] != epoch else len(rest)
            self.skip(k)
            if k < len(rest):
                return

    def whole_batch(self, n: int, ahead: int, files) -> tuple | None:
        """The next n positions as a batch of one-sample shards read whole, their opens started:
        (shards, epochs, [first, last epoch], sizes, sample bytes, open tickets), handed on; and the `ahead`
        positions after them given to the open threads of files (ShardFiles) too, after the batch's
        own, in one submit. None where the tables say otherwise (no tables, shards of several samples)
        or ahead() gave positions other than through here (their opens are files' to claim).

        A batch is a few slices of the drawn arrays and one submit, whatever n: no Python per shard
        (the opens started ahead have consecutive positions, so what a batch submits is one range)."""
        if not self._tables or (self._given > self._drawn and self._ticket is None):
            return None
        self._fill(n + ahead)
        if self._ends is None or self._ends.shape[1] != 1:
            return None
        if self._ticket is None:
            self._ticket = np.full(len(self._shards), -1, dtype=np.int64)
            self.opens = files
        if self._chunk is None:
            # the drawn positions' sample bytes summed from the first, and their paths as the open
            # threads take them, made once for all of them: a batch's are then a few look-ups
            paths = joined_paths(files.paths, self._shards)
            ends = np.flatnonzero(np.frombuffer(paths, dtype=np.uint8) == 0) + 1
            self._chunk = ([0] + np.cumsum(self._ends[:, 0], dtype=np.int64).tolist(), memoryview(paths),
                           [0] + ends.tolist())
        cum, paths, at = self._chunk
        i = self._pos
        j = i + n
        g = i + self._given - self._drawn   # the first position not given to the threads
        lo, hi = max(i, g), max(g, j + ahead)
        if hi > lo:
            files.pool.submit(paths[at[lo]:at[hi]], self._size[lo:hi], self._ticket[lo:hi])
            self._given = self._drawn + hi - i
        self._pos = j
        self._drawn += n
        epochs = self._epochs[i:j]
        return (self._shards[i:j].tolist(), epochs, epochs[::max(n - 1, 1)].tolist(), self._size[i:j],
                cum[j] - cum[i], self._ticket[i:j])

    def _hand_over(self) -> None:
        """Leave whole_batch's way: the opens it started for positions not yet handed on become
        files' to claim (ShardFiles.adopt), as ahead()'s are, for the stream's other ways."""
        if self._ticket is None:
            return
        i, g = self._pos, self._pos + self._given - self._drawn
        if g > i:
            self.opens.adopt(self._shards[i:g].tolist(), self._ticket[i:g].tolist())
        self._ticket = None

    def ahead(self, n: int) -> list[int]:
        return self.ahead_sized(n)[0]

    def ahead_sized(self, n: int) -> tuple[list[int], np.ndarray | None]:
        """ahead(n), and those shards' file sizes when the tables are known (else None)."""
        self._hand_over()
        self._fill(n)
        first = max(self._given, self._drawn) - self._drawn
        self._given = max(self._given, self._drawn + n)
        at = slice(self._pos + first, self._pos + max(n, first))
        return self._shards[at].tolist(), self._size[at] if self._tables else None


class RowGroupStream(SampleAccessStream):
    """parquet (formats.Parquet): SampleAccessStream's epochs and parts, read by row group as DLIO's
    parquet readers read: the first sample of a row group the rank takes in an epoch reads that row
    group's `read` column chunks (cfg.reading.row_groups: the same ranges in every shard), its other samples
    read nothing more. The bytes a batch counts are the bytes it read. Without sample shuffling a
    part is walked as a range of positions, never held as an array (dlrm_b200 has 4.8 G rows); with
    it the part is permuted whole as SampleAccessStream does. --sampling random reads, per batch, the
    row groups its samples fall in."""

    def __init__(self, cfg: RunSpec, *args, **kw):
        super().__init__(cfg, None, *args, **kw)
        self._rpg, self._reads = cfg.reading.row_groups
        self._done: set = set()                # (shard, row group) read this epoch
        self._lo = self._hi = 0
        self._order = None

    def _next_epoch(self) -> None:
        self._done = set()
        if "sample" in self._cfg.shuffle:
            super()._next_epoch()
            self._lo, self._hi = 0, len(self._shards)
            return
        self._check_epoch()
        self._epoch += 1
        cfg, total = self._cfg, self._n * self._spf
        self._lo, self._hi = ((self._i % total, self._i % total + 1) if total < self._r
                              else (self._i * total // self._r, (self._i + 1) * total // self._r))
        self._order = epoch_order(self._n, cfg.seed, self._epoch) if "file" in cfg.shuffle else np.arange(self._n)
        self._pos, self._unchecked = 0, True

    def finish(self) -> None:
        if self._epoch >= 0 and self._pos == self._hi - self._lo:
            self._check_epoch()

    def _group_reads(self, shard: int, group: int) -> np.ndarray:
        ranges = self._reads[group]
        return np.concatenate([sample_reads(int(o), int(o) + int(n), self._cfg.block_size, self._align)
                               for o, n in ranges.tolist()])

    def take(self, n: int) -> tuple[list[tuple[int, np.ndarray, bool]], int]:
        """([(shard, rows, True)] one per row group read, bytes read)."""
        out: list = []
        consumed = 0
        while n > 0:
            if self._random is not None:
                pos = self._random.integers(self._n * self._spf, size=n)
                shards, rows = pos // self._spf, pos % self._spf
                self._done = set()
            else:
                if self._epoch < 0 or self._pos >= self._hi - self._lo:
                    self._next_epoch()
                if self._order is None or "sample" in self._cfg.shuffle:
                    k = min(n, self._hi - self._pos)
                    shards = self._shards[self._pos:self._pos + k]
                    rows = self._samples[self._pos:self._pos + k]
                else:
                    slot, row = divmod(self._lo + self._pos, self._spf)
                    k = min(n, self._spf - row, self._hi - self._lo - self._pos)
                    shards = np.full(k, int(self._order[slot]), dtype=np.int64)
                    rows = np.arange(row, row + k, dtype=np.int64)
                self._pos += k
            groups = self._n_groups()
            for key in dict.fromkeys((shards * groups + rows // self._rpg).tolist()):
                shard, g = divmod(key, groups)
                if (shard, g) not in self._done:
                    self._done.add((shard, g))
                    reads = self._group_reads(shard, g)
                    out.append((shard, reads, True))
                    consumed += int(reads["length"].sum())
            if self._check and self._random is None:
                for shard in np.unique(shards).tolist():
                    np.add.at(self._taken.setdefault(shard, np.zeros(self._spf, dtype=np.int32)),
                              rows[shards == shard], 1)
            if self.trace is not None:
                self.trace.append((np.asarray(shards, dtype=np.int64), np.asarray(rows, dtype=np.int64)))
            n -= len(shards)
        return out, consumed

    def _n_groups(self) -> int:
        return len(self._reads)

    def _part_len(self) -> int:
        return self._hi - self._lo


def shard_source(cfg: RunSpec, n_shards: int, index_in_mount: int, ranks_in_mount: int, rank: int,
                 buffer: int = 0):
    """next_shard() -> (shard, epoch) for this rank; buffer: the sample-shuffle buffer (buffer_size)."""
    if cfg.sampling == "random":
        rng = np.random.default_rng([cfg.seed, rank])
        return lambda: (int(rng.integers(n_shards)), 0)   # no epochs: one shuffle buffer throughout

    # epoch: one shard order per epoch shared by the mount's ranks (seeded permutation when files
    # are shuffled, index order when not; shards of one sample shuffle as samples do); rank i
    # takes every R-th. With more ranks than shards each rank still gets a whole shard.
    shuffled = "file" in cfg.shuffle or ("sample" in cfg.shuffle and not buffer)
    return ShardShares(n_shards, index_in_mount, ranks_in_mount, cfg.seed, shuffled)


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The mount's file order of an epoch when files are shuffled: a permutation of 0..n-1 drawn from
    (seed, epoch), the same on every rank, which each deals its share from (every stream's, so one
    seed gives one order whatever the format). Shuffled in C (_native.shuffled_range): numpy's
    shuffle of 1.17 M shards cost each rank ~0.08 s of CPU at start, this ~0.02. int32 below 2**31
    files: half the memory of int64 (1,000,000 shards: 4 MB a rank), the same order."""
    perm = np.empty(n, dtype=np.int32 if n <= 2**31 else np.int64)
    _native.shuffled_range(perm, seed, epoch)
    return perm


class ShardShares:
    """A rank's shards epoch after epoch (shard_source's with --sampling epoch): called, the next
    (shard, epoch); draw(n), the next n as two arrays, in a few array operations whatever n."""

    def __init__(self, n_shards: int, index: int, ranks: int, seed: int, shuffled: bool):
        self._n, self._index, self._ranks, self._seed, self._shuffled = n_shards, index, ranks, seed, shuffled
        self._epoch, self._share, self._at = -1, np.empty(0, dtype=np.int64), 0

    def _next_share(self) -> None:
        self._epoch += 1
        perm = (epoch_order(self._n, self._seed, self._epoch) if self._shuffled
                else np.arange(self._n, dtype=np.int32 if self._n <= 2**31 else np.int64))
        positions = np.arange(self._index, max(self._n, self._ranks), self._ranks, dtype=np.int64) % self._n
        self._share, self._at = perm[positions], 0   # the rank's share, in perm's dtype

    def draw(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        shards, epochs = [], []
        while n > 0:
            if self._at == len(self._share):
                self._next_share()
            k = min(n, len(self._share) - self._at)
            shards.append(self._share[self._at:self._at + k].astype(np.int64))
            epochs.append(np.full(k, self._epoch, dtype=np.int64))
            self._at += k
            n -= k
        if len(shards) == 1:
            return shards[0], epochs[0]
        return np.concatenate(shards), np.concatenate(epochs)

    def __call__(self) -> tuple[int, int]:
        shard, epoch = self.draw(1)
        return int(shard[0]), int(epoch[0])


class StepRecords:
    """A rank's steps as the step loop saw them, raw (add), made a row of STEP_FIELDS each at the end
    (array): the arithmetic of the rows is one array operation a column, not a dozen float
    operations a step in the loop (each run with the caches cold, after the barrier's sleep)."""

    def __init__(self, t0_ns: int, samples: int, steps_per_epoch: int):
        self.t0_ns, self.samples, self.steps_per_epoch = t0_ns, samples, steps_per_epoch
        self.raw: list[tuple] = []
        # the emulator's own cost, per step (docs/numbers.md "The emulator's own cost"): the kernel's
        # CPU clocks of this process and of the step loop's thread (add's caller), exact to the ns,
        # two syscalls a step
        self._clocks = (time.process_time_ns(), time.thread_time_ns())

    def add(self, start_ns: int, fetched_ns: int, computed_ns: int, end_ns: int, stalled_s: float, nbytes: int,
            cpu_ns: int, loop_cpu_ns: int) -> None:
        """A step: when it began, had its batch, finished computing and ended (the engine's clock),
        the seconds of it a checkpoint took, its batch's bytes, the process's and the step loop's CPU."""
        self.raw.append((start_ns, fetched_ns, computed_ns, end_ns, stalled_s, nbytes, cpu_ns, loop_cpu_ns))

    def add_timed(self, *step) -> None:
        """add() a step with the process's and this thread's CPU since the last add_timed (or since
        these records were made); run_steps adds a step in the next one's compute."""
        was = self._clocks
        self._clocks = now = (time.process_time_ns(), time.thread_time_ns())
        self.add(*step, now[0] - was[0], now[1] - was[1])

    def array(self) -> np.ndarray:
        out = np.zeros((len(self.raw), len(STEP_FIELDS)))
        if not self.raw:
            return out
        cols = list(zip(*self.raw))
        start, fetched, computed, end = (np.array(c, dtype=np.int64) - self.t0_ns for c in cols[:4])
        stalled, nbytes, cpu, loop_cpu = (np.array(c, dtype=float) for c in cols[4:])
        col = {name: out[:, i] for i, name in enumerate(STEP_FIELDS)}
        col["t_start"][:], col["t_end"][:] = start / 1e9, end / 1e9
        col["data_wait"][:] = (fetched - start) / 1e9
        col["compute"][:] = (computed - fetched) / 1e9
        col["barrier"][:] = (end - computed) / 1e9 - stalled
        col["bytes"][:], col["samples"][:], col["checkpoint"][:] = nbytes, self.samples, stalled
        col["epoch"][:] = np.arange(len(self.raw)) // self.steps_per_epoch
        col["cpu"][:], col["loop_cpu"][:] = cpu / 1e9, loop_cpu / 1e9
        return out


class _Reader(threading.Thread):
    """Fetches whole batches through the cursor, `prefetch` ahead of the compute loop. With open
    threads (files.ahead_cap > 0) each fetch also starts opening the shards that come after its
    batch (lookahead), so that the reader finds their fds ready, as a data loader's workers do."""

    def __init__(self, stream: SampleStream, files: ShardFiles, cfg: RunSpec, cursor: Cursor, batches: int = 0,
                 lookahead: ShardLookahead | None = None, cut_epochs: int = 0, samples_per_shard: int = 1,
                 quiet=None):
        super().__init__(daemon=True, name="iodl-reader")
        self.stream, self.files, self.cfg, self.cursor = stream, files, cfg, cursor
        # quiet(timeout_s) (comm.step_quiet): waits until the node's step loops are all computing
        # again after a barrier's release; None when there is no such barrier (yet)
        self.quiet = quiet
        self.lookahead = lookahead
        # > 0: an epoch ends after this many batches, before its data does (cfg.total_steps): the
        # rest of its share is not read, as DLIO's loader of that epoch is dropped
        self.cut_epochs, self.fetched = cut_epochs, 0
        self.samples_per_shard = max(1, samples_per_shard)
        # a run of a known number of steps reads that many batches and no more (as a data loader
        # whose epochs have an end does): reading ahead past the last step is I/O no step uses
        self.batches = batches
        # batches read, and a token for each batch there is room for: the reader takes a token
        # before it puts a batch, the step loop gives one back as it takes one (a bounded queue of
        # two C queues: queue.Queue's put and get are each a few dozen lines of Python, run once a
        # step each with the caches cold)
        self.out: queue.SimpleQueue = queue.SimpleQueue()
        self.room: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(max(cfg.prefetch, 1)):
            self.room.put(None)
        # the engine takes a batch's files from the open threads itself (Cursor.run_taking)
        self.taking = files.pool is not None and cursor.takes_files
        # ... and a batch of one-sample shards is drawn with its opens (SampleStream.take_whole)
        self.whole = self.taking and hasattr(stream, "take_whole") and lookahead is not None
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def _ahead(self) -> int:
        """Shards to start opening after this batch's: the open threads' share, none past the run's
        last batch (the shard being read holds some of it)."""
        ahead = self.files.ahead_cap
        if self.batches:
            left = (self.batches - self.fetched - 1) * self.cfg.batch_size - self.stream.left_in_shard()
            ahead = min(ahead, -(-max(left, 0) // self.samples_per_shard))
        return ahead

    def fetch(self) -> int:
        """Read what the next batch needs; returns the batch's bytes (its samples' sizes)."""
        files = self.files
        if self.whole:   # shards of one sample each: the batch and its opens in a few calls (take_whole)
            got = self.stream.take_whole(self.cfg.batch_size, self._ahead(), files)
            if got is not None:
                shards, rows, consumed, tickets = got
                if not self.cursor.run_taking(files, tickets, shards, rows):
                    # an open failed: the others' fds are files' now, the batch goes the usual way
                    self.cursor.run(files.open(shards), rows, files.names(shards), opened=files.opened)
                    files.close(shards)
                return self._fetched(consumed)
        shards, rows, done, consumed = self.stream.take_batch(self.cfg.batch_size)
        ahead = self._ahead()
        upcoming, sizes = self.lookahead.ahead_sized(ahead) if self.lookahead and ahead > 0 else ([], None)
        # a batch of whole files with open threads: taken, read, closed and counted in one C call
        tickets = files.claim_batch(shards, upcoming, sizes) if self.taking and all(done) else None
        if tickets is None:
            fds = files.open(shards, then=upcoming, then_sizes=sizes)
        elif self.cursor.run_taking(files, tickets, shards, rows):
            fds = None
        else:   # an open failed: the others' fds are files' now, the batch goes the usual way
            fds = files.open(shards)
        if fds is not None:
            self.cursor.run(fds, rows, files.names(shards), opened=files.opened)
            files.close([shard for shard, d in zip(shards, done) if d])
        return self._fetched(consumed)

    def _fetched(self, consumed: int) -> int:
        """A batch read: counted, and its epoch ended when the epoch stops there (cut_epochs)."""
        self.fetched += 1
        if self.cut_epochs and self.fetched % self.cut_epochs == 0:
            self.files.close(self.stream.end_epoch())
        return consumed

    def run(self) -> None:
        # SCHED_BATCH (this thread only): woken (the GIL, a queue's room, the quiet), the reader
        # does not preempt the thread on its CPU, often a step loop just released by the barrier
        # whose compute the next barrier waits for; it reads at the next tick or wait instead.
        # Where the policy is refused the reader stays as it is.
        with contextlib.suppress(AttributeError, OSError):
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        try:
            fetched = 0
            while not self.stop.is_set() and not (self.batches and fetched >= self.batches):
                item = self.fetch()
                fetched += 1
                while not self.stop.is_set() and not self._put(item):
                    pass
        except Cancelled:
            pass
        except BaseException as exc:  # the compute loop looks at it every slice of its wait
            self.error = exc

    def _put(self, item) -> bool:
        """Hand a batch to the step loop if there is room, else wait a slice for room: False if
        there is none yet. Room comes when the step loop takes a batch, just after a barrier has
        released the node's step loops all at once; on fewer cores than ranks they begin their
        compute one after the other, and the last, whom the next barrier waits for, is late by
        every CPU second spent meanwhile. So a reader ahead (its queue full) is not woken by the
        take: it waits until all the node's step loops are computing (quiet), then reads on, its
        batch needed a step later at the soonest."""
        room = self.room
        if not room.qsize():
            if self.quiet is None or self.quiet(WAIT_SLICE_S) is None:   # no barrier to wait for (yet)
                try:
                    room.get(timeout=WAIT_SLICE_S)
                except queue.Empty:
                    return False
                self.out.put(item)
                return True
            if not room.qsize():   # quiet, and still no room: the step loop is behind, look again
                return False
        room.get_nowait()   # room (only this thread takes tokens: it stays room)
        self.out.put(item)
        return True

    def get(self, stop_flag):
        """The next batch; waits in short slices so that a stop request or a dead reader is seen
        at once (a batch on slow storage can take many seconds)."""
        while True:
            try:
                item = self.out.get(timeout=WAIT_SLICE_S)
                self.room.put(None)
                return item
            except queue.Empty:
                pass
            # seen ended, the reader may have put its last batch (or its error) after the wait above
            # timed out: look once more before saying it left nothing (a CI run at its last step did)
            ended = not self.is_alive()
            if ended and self.out.qsize():
                continue
            if self.error is not None:
                raise self.error
            if stop_flag():
                raise KeyboardInterrupt
            if ended:
                raise RuntimeError("the reader thread ended without a batch or an error")

    def close(self) -> None:
        """Stop reading: the engine's cancel() ends a read in progress within ~100 ms (plus the
        bounded drain of what is in flight), so this never waits for slow storage."""
        self.stop.set()
        self.cursor.engine.cancel()
        self.join(timeout=5)
        if not self.is_alive():
            self.files.close_all()


def request_shape(wl) -> tuple[int, bool]:
    """(bytes per request, read record by record) of a workload: [read] transfer_size as DLIO's
    readers use it. Only DLIO's tfrecord reader does (TFRecordDataset(buffer_size=transfer_size),
    dlio_benchmark reader/tf_reader.py): its reads are transfer_size bytes each, and 0 is no buffer:
    each record's 12-byte header, then its data and CRC (plan.record_plan). DLIO's other readers
    never look at it (np.load, h5py, PIL, one readv with odirect): [read] block_size stands."""
    transfer = wl.read.transfer_size
    if wl.dataset is None or wl.dataset.format != "tfrecord" or transfer is None:
        return wl.read.block_size, False
    return (wl.read.block_size, True) if transfer == 0 else (transfer, False)


def planned_steps(cfg: RunSpec, n_samples: int, ranks_in_mount: int) -> tuple[int, int]:
    """(steps to run, 0 when only a duration bounds them; steps per epoch) for one rank. An epoch
    runs at most cfg.total_steps steps (DLIO's total_training_steps, which DLIO counts per epoch:
    its step counter starts again each epoch, main.py _train), and every epoch runs."""
    steps_per_epoch = max(1, -(-n_samples // (ranks_in_mount * cfg.batch_size)))
    if cfg.total_steps:
        steps_per_epoch = min(steps_per_epoch, cfg.total_steps)
    return cfg.steps or (0 if cfg.duration_s else steps_per_epoch * cfg.epochs), steps_per_epoch


def _shard_stream(cfg: RunSpec, sample_ends, sizes, total_samples: int, index_in_mount: int, ranks_in_mount: int,
                  rank: int, batch_ends=None):
    buffer = buffer_size(cfg.shuffle, cfg.shuffle_size, len(sample_ends(0)) if len(sizes) else 1)
    # shards read whole with their ends looked up a batch at a time: the look-ahead looks them up as drawn
    whole = batch_ends is not None and not (buffer or cfg.reading.records or cfg.reading.npz_load)
    next_shard = ShardLookahead(shard_source(cfg, len(sizes), index_in_mount, ranks_in_mount, rank, buffer),
                                *((sizes, batch_ends) if whole else ()))
    return SampleStream(next_shard, sample_ends, sizes, cfg.block_size, buffer,
                        rng=[cfg.seed, rank, 1], check=cfg.sampling == "epoch",
                        records=cfg.reading.records, npz_load=cfg.reading.npz_load, batch_ends=batch_ends), next_shard


def _sample_stream(cfg: RunSpec, sample_ends, sizes, total_samples: int, index_in_mount: int, ranks_in_mount: int,
                   rank: int, batch_ends=None):
    # every shard of a dataset holds as many samples (generate lays them out so)
    return SampleAccessStream(cfg, sample_ends, len(sizes), total_samples // max(1, len(sizes)), index_in_mount,
                              ranks_in_mount, rank, align=_native.ALIGN if cfg.direct else 1,
                              check=cfg.sampling == "epoch"), None


def _row_group_stream(cfg: RunSpec, sample_ends, sizes, total_samples: int, index_in_mount: int,
                      ranks_in_mount: int, rank: int, batch_ends=None):
    return RowGroupStream(cfg, len(sizes), total_samples // max(1, len(sizes)), index_in_mount, ranks_in_mount,
                          rank, align=_native.ALIGN if cfg.direct else 1, check=cfg.sampling == "epoch"), None


# a rank's sample stream for each formats.Reading kind: (stream, the shard order to open ahead of or None);
# batch_ends (Run.batch_ends) is for the streams that take a batch of whole shards at once
STREAMS = {"shards": _shard_stream, "samples": _sample_stream, "row_groups": _row_group_stream}


def run_steps(run: "Run") -> tuple[np.ndarray, bool]:
    """Run train-sync or infer-async on this rank: (step records array, partial), counted into
    run.result (its order check in result.epochs_checked / epochs_wrong).

    run.paths None with the null engine: no dataset, the shard layout comes from the workload spec.
    run.on_epoch(epoch): called between the last step of an epoch and the first of the next (after
    the barrier in train-sync). run.after_step(step, steps_per_epoch) -> seconds: train-sync's
    in-training checkpoint, run by every rank after a step's barrier and inside that step's time
    (the step waits for it, so AU shows its cost); what it took is the step's `checkpoint` field.
    """
    comm, cfg, paths, sample_ends, stop_flag = run.comm, run.spec, run.paths, run.sample_ends, run.stop
    result = run.result
    members = plan.ranks_of_mount(run.mount, run.n_mounts, comm.size)
    index_in_mount, ranks_in_mount = members.index(comm.rank), len(members)
    on_epoch, after_step, total_samples = run.on_epoch, run.after_step, run.total_samples
    sizes = int_rows(run.sizes)   # a dataset's table stays on disk: a row read per shard opened
    if total_samples is None:   # a dataset knows it; counted here for callers that do not pass it
        total_samples = sum(len(sample_ends(i)) for i in range(len(sizes)))
    # the format's reading (formats.Format.reading); next_shard: the shard order the open threads
    # open ahead of (None for per-sample and per-row-group reads)
    stream, next_shard = STREAMS[cfg.reading.kind](cfg, sample_ends, sizes, total_samples, index_in_mount,
                                                   ranks_in_mount, comm.rank, batch_ends=run.batch_ends)
    steps, steps_per_epoch = planned_steps(cfg, total_samples, ranks_in_mount)
    whole = planned_steps(dataclasses.replace(cfg, total_steps=0), total_samples, ranks_in_mount)[1]
    cut_epochs = steps_per_epoch if steps_per_epoch < whole and cfg.sampling == "epoch" else 0

    engine = open_reader(cfg, cache_check=not cfg.direct and paths is not None)
    sync = cfg.pattern == "train-sync"
    comm.barrier()
    t0 = _native.monotonic_ns()
    result.note_start()
    records = StepRecords(t0, cfg.batch_size, steps_per_epoch)
    now_ns = _native.monotonic_ns
    compute_ns = int(cfg.compute_time_s * 1e9)
    run_until = cfg.duration_s + (cfg.ramp_s if cfg.fixed_window else 0.0)
    if cfg.fixed_window:
        # reads count by their completion time inside the window, as storage-only's do
        result.window_ns = (t0 + int(cfg.ramp_s * 1e9), t0 + int(run_until * 1e9))
    files = ShardFiles(paths, sizes, cfg.direct, result, threads=cfg.read_threads)
    reader = _Reader(stream, files, cfg, Cursor(engine, result, t0), batches=steps, lookahead=next_shard,
                     samples_per_shard=len(sample_ends(0)) if len(sizes) else 1,
                     cut_epochs=cut_epochs, quiet=comm.step_quiet if sync else None)
    prefetching = cfg.prefetch > 0
    if prefetching:
        reader.start()
    partial = False
    # A step's record is added in the next step's compute, once the node's step loops are all back
    # at work: a release wakes them at once, and on fewer cores than ranks the last one back, whose
    # compute end the next barrier waits for, is late by every CPU second the others spend before
    # their compute (32 ranks on 2 cores: 60 us of it a rank cost 2 points of AU)
    done = None
    try:
        step = 0
        while True:
            start_ns = now_ns()
            try:
                if stop_flag():
                    raise KeyboardInterrupt   # a stop seen before this step began (e.g. during set-up)
                if prefetching:
                    nbytes = reader.get(stop_flag)
                else:
                    nbytes = reader.fetch()
                fetched_ns = now_ns()
                if sync:
                    # the compute is its end, handed to the barrier: the step loop sleeps once, to the
                    # barrier's release after the latest compute end (step_sync), not twice
                    computed_ns = fetched_ns + compute_ns
                    comm.step_resumed(min(compute_ns, RECORD_WAIT_NS) if done else 0)
                if done:
                    records.add_timed(*done)
                    done = None
                if not sync:
                    sleep_until(fetched_ns + compute_ns)
                    computed_ns = now_ns()
                step += 1
                want_stop = (steps and step >= steps) or (run_until and (computed_ns - t0) / 1e9 >= run_until)
                interrupted = stop_flag()
                if sync:
                    # the barrier stands in for the gradient all-reduce; it also agrees on stopping
                    flags = comm.step_sync(int(bool(want_stop)) | (2 if interrupted else 0), computed_ns)
                    want_stop, interrupted = bool(flags & 1), bool(flags & 2)
                stalled = after_step(step, steps_per_epoch) if after_step and not interrupted else 0.0
            except (KeyboardInterrupt, Cancelled):
                # a stop request seen mid-step (waiting for data, computing, at the barrier): every
                # rank got the signal too, so none waits for this one; the unfinished step is dropped
                partial = True
                break
            done = (start_ns, fetched_ns, computed_ns, now_ns(), stalled, nbytes)
            if result.live is not None:
                result.live[LIVE_STEPS] = step
            if interrupted:
                partial = True
                break
            if want_stop:
                break
            if on_epoch and step % steps_per_epoch == 0:
                on_epoch(step // steps_per_epoch)
    except (KeyboardInterrupt, Cancelled):
        partial = True   # the signal landed between two steps' waits
    finally:
        if done:
            records.add_timed(*done)
        if prefetching:
            reader.close()
        if not reader.is_alive():
            reader.files.close_all()
            engine.close()
            if not partial:
                stream.finish()
    result.epochs_checked, result.epochs_wrong = stream.epochs_checked, stream.epochs_wrong
    return records.array(), partial


def _col(a: np.ndarray, name: str) -> np.ndarray:
    return a[:, STEP_FIELDS.index(name)]


def _measured(a: np.ndarray) -> np.ndarray:
    """Mask of the steps that count for AU: all but the first step of each epoch."""
    epoch = _col(a, "epoch")
    first = np.ones(len(a), dtype=bool)
    first[1:] = epoch[1:] != epoch[:-1]
    return ~first


def counted_steps(per_rank: list[np.ndarray]) -> tuple[list[np.ndarray], str]:
    """Per rank, the mask of its steps that AU counts, and which steps were left out (in words):
    the first of each epoch, or none when that would leave no step at all."""
    masks = [_measured(a) for a in per_rank]
    if not any(m.any() for m in masks):   # a one-step epoch leaves nothing: use every step, say so
        return ([np.ones(len(a), dtype=bool) for a in per_rank],
                "none (too few steps to leave out the first of each epoch)")
    return masks, "first step of each epoch"


def in_window(a: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Per step, the share of it inside [lo, hi]: a step's samples are taken as consumed evenly
    over its time (a whole step inside counts 1, one straddling an edge its share)."""
    t0, t1 = _col(a, "t_start"), _col(a, "t_end")
    overlap = np.clip(np.minimum(t1, hi) - np.maximum(t0, lo), 0.0, None)
    length = t1 - t0
    return np.where(length > 0, overlap / np.where(length > 0, length, 1.0), ((t1 > lo) & (t1 <= hi)).astype(float))


def steps_window(rows: list[np.ndarray]) -> tuple[float, float]:
    """train-sync's window: from the first step's start to the last step's end over all ranks."""
    rows = [a for a in rows if len(a)]
    return (min(a[0, 0] for a in rows), max(a[-1, 1] for a in rows)) if rows else (0.0, 0.0)


def summarize_steps(per_rank: list[np.ndarray], pattern: str, au_threshold: float,
                    window: tuple[float, float]) -> "Train":
    """The train block of the result: steps, AU, samples/s, step times, where the time went.

    window: the run's measured window (seconds since the start barrier), the same one its
    bandwidth is taken over: samples/s is the samples consumed inside it / its length, and so is
    each rank's rate, so that the total is the sum of the ranks' rates."""
    rows = [a for a in per_rank if len(a)]
    allsteps = np.concatenate(rows) if rows else np.empty((0, len(STEP_FIELDS)))
    masks, excluded = counted_steps(rows)
    mask = np.concatenate(masks) if rows else np.empty(0, dtype=bool)
    m = allsteps[mask]
    step_time = _col(m, "t_end") - _col(m, "t_start")
    au = float(np.mean(_col(m, "compute") / step_time)) if len(m) else 0.0
    lo, hi = window
    span = max(hi - lo, 0.0)
    share = [in_window(a, lo, hi) for a in rows]
    samples_in = [float((_col(a, "samples") * w).sum()) for a, w in zip(rows, share)]
    consumed = float(sum((_col(a, "bytes") * w).sum() for a, w in zip(rows, share)))
    pct = (lambda q: float(np.percentile(step_time, q)) if len(step_time) else 0.0)
    out = {
        "steps": int(max((len(a) for a in rows), default=0)),
        "au": au,
        "au_threshold": au_threshold,
        "au_excluded_steps": excluded,
        "samples_per_s": reduce.rate(sum(samples_in), span),
        "samples": int(_col(allsteps, "samples").sum()),
        "samples_in_window": sum(samples_in),
        "window_s": span,
        "consumed_bytes": consumed,
        "consumed_MBps": reduce.mbps(consumed, span),
        "step_time_s": {"p50": pct(50), "p90": pct(90), "p99": pct(99), "max": float(step_time.max()) if len(step_time) else 0.0},
        "data_wait_s_per_step": float(_col(m, "data_wait").mean()) if len(m) else 0.0,
        "barrier_wait_s_per_step": float(_col(m, "barrier").mean()) if len(m) else 0.0,
        "compute_s_per_step": float(_col(m, "compute").mean()) if len(m) else 0.0,
        "checkpoint_s_per_step": float(_col(m, "checkpoint").mean()) if len(m) else 0.0,
    }
    if pattern == "infer-async" and rows:
        rates = np.array([reduce.rate(x, span) for x in samples_in])
        out["per_rank_samples_per_s"] = {"min": float(rates.min()), "median": float(np.median(rates)),
                                         "max": float(rates.max()), "sum": float(rates.sum())}
    return out


def data_wait_share(rows: list[np.ndarray]) -> float | None:
    """Share of the counted steps' time that these ranks spent waiting for data (None: no steps)."""
    rows = [a[_measured(a)] if _measured(a).any() else a for a in rows if len(a)]
    if not rows:
        return None
    steps = np.concatenate(rows)
    total = float((_col(steps, "t_end") - _col(steps, "t_start")).sum())
    return float(_col(steps, "data_wait").sum()) / total if total > 0 else 0.0

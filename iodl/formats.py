"""Shard formats: how samples are laid out in a file, and where each sample's bytes sit.

A format only decides the layout; reading is the engines' business (docs/design.md). Sample bytes come
from Content (incompressible, no two 4 KiB blocks alike). tfrecord and raw shards are streamed in
pieces of about 8 MiB of whole records from two reused buffers (npy and indexed_binary in pieces of
8 MiB, records cut where they fall); npz and hdf5 shards are built whole
and written by numpy / h5py. Each format reports the extent (offset, length) of every sample's
record in the file:

- tfrecord: the record with its framing (8-byte length, masked CRC32C of the length, data, masked
  CRC32C of the data); consecutive extents tile the file.
- raw:      the sample bytes; samples are concatenated, extents tile the file.
- npz:      np.savez, one member "sample_NNNNNN.npy" per sample; the extent is the whole zip member
            (local header, npy header, array bytes), read back from the written file. The zip's
            central directory at the end is in no extent.
- hdf5:     one contiguous 1-D uint8 dataset "data" holding the samples back to back, with
            "offsets" and "lengths" datasets indexing it; the extent is the sample's bytes inside
            "data" (located with get_offset() on the written file). Headers and the index are in
            no extent.
- npy:      one .npy (numpy's 1.0 header) of a 1-D uint8 array of the samples back to back, streamed
            like raw; the extent is the sample's bytes inside the array.
- indexed_binary: DLIO's indexed binary: the data file holds the samples back to back (as raw), and
            two index files beside it, NAME.off.idx and NAME.sz.idx, hold each sample's offset and
            size as little-endian uint64 (numpy "<u8", DLIO's struct 'Q'), one per sample; extents tile
            the data file. Read sample by sample at those offsets (Reading "samples").
- jpeg/png: one sample per file, a real image of exactly the sample's size (raised to the smallest
            valid file): a tiny Pillow-encoded image plus filler segments (JPEG COM after SOI, PNG
            private `ioDL` chunks before IEND) carrying the random content; the extent is the file,
            recorded from the written file (iodl-extents.npy) since it may exceed the drawn size.
"""
from __future__ import annotations

import io
import os
import struct
import zlib

import numpy as np
from numpy.lib import format as npy

from .records import record

# ---------------------------------------------------------------- CRC32C (Castagnoli) --------

_MASK_DELTA = 0xA282EAD8


def crc32c_version() -> str:
    """What computes TFRecord's CRCs (recorded with generation benchmarks)."""
    # the package's own attribute: importlib.metadata would cost every rank 3 MB for one string
    return f"crc32c {_crc().__version__}"


def _crc():
    """The crc32c package (SSE4.2 / ARMv8 CRC instructions), imported when a CRC is first needed:
    importing it (it loads importlib.metadata) added ~2 MB to every reading rank, which never
    computes one (72 ranks of a null-engine run: median peak RSS 59.5 -> 57.4 MB)."""
    import crc32c

    return crc32c


def crc32c_records(buf: np.ndarray, offsets, lengths) -> np.ndarray:
    """CRC32C of every record buf[offset:offset+length] (uint32 array)."""
    crc = _crc().crc32c
    mv = memoryview(buf).cast("B")
    return np.fromiter((crc(mv[o:o + n]) for o, n in zip(np.asarray(offsets).tolist(),
                                                          np.asarray(lengths).tolist())),
                       dtype=np.uint32, count=len(lengths))


def crc32c(data) -> int:
    """CRC32C of one bytes-like object."""
    return _crc().crc32c(data)


def masked_crc(crc):
    """TFRecord's mask: rotate right by 15 and add a constant, mod 2^32 (works on ints and arrays)."""
    if isinstance(crc, np.ndarray):
        c = crc.astype(np.uint64)
        return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + _MASK_DELTA & 0xFFFFFFFF).astype(np.uint32)
    crc &= 0xFFFFFFFF
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def _length_crcs(sizes: np.ndarray) -> np.ndarray:
    """CRC32C of each record's 8-byte little-endian length."""
    lengths = sizes.astype("<u8").view(np.uint8)
    return crc32c_records(lengths, np.arange(0, len(lengths), 8), np.full(len(sizes), 8))


# ---------------------------------------------------------------- random content -------------

BLOCK = 4096                 # content unit: every 4 KiB block of every shard is distinct
_POOL_BLOCKS = 8192          # a 32 MiB pool of random blocks per seed
_pools: dict[int, np.ndarray] = {}


def _pool(seed: int) -> np.ndarray:
    if seed not in _pools:
        bits = np.random.SFC64(np.random.SeedSequence([seed, 0x9001]))
        _pools[seed] = bits.random_raw(_POOL_BLOCKS * BLOCK // 8).reshape(_POOL_BLOCKS, BLOCK // 8)
    return _pools[seed]


def content_buffer(nbytes: int) -> np.ndarray:
    """A uint8 buffer random_bytes can fill with nbytes (rounded up to whole blocks, 8-byte aligned)."""
    return np.empty(-(-nbytes // BLOCK) * BLOCK, dtype=np.uint8)


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser over a uint64 array (wrapping arithmetic): a bijection that spreads
    every input bit over the output; counter-based, so any block's word is computed alone."""
    with np.errstate(over="ignore"):   # 0-d arrays warn of the wrap-around the hash relies on
        z = np.asarray(x, dtype=np.uint64) + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def key_hash(key: tuple) -> np.ndarray:
    """The 64-bit hash of a content key (seed, copy, file); its last part may be an array of files."""
    h = np.zeros(np.shape(key[-1]), dtype=np.uint64)
    for part in key:
        h = _mix(h ^ np.asarray(part, dtype=np.uint64))
    return h


def _start_of(h: np.ndarray) -> np.ndarray:
    """First pool block of the content whose key hashes to h."""
    return _mix(h ^ np.uint64(0x5A3E_C0DE_5EED_0001)) % np.uint64(_POOL_BLOCKS)


def _words(h: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """The 64-bit word XORed over block j of the content whose key hashes to h."""
    with np.errstate(over="ignore"):
        return _mix(h + (blocks.astype(np.uint64) + np.uint64(1)) * _GOLDEN)


class Content:
    """A shard's bytes, addressable by range: block j is pool block (start + j) XOR a 64-bit word
    repeated over the block. The pool (32 MiB per seed) comes from numpy's SFC64; the start and
    the per-block words from a counter-based hash (splitmix64) of the key (seed, copy, file) and
    the block's index, so the blocks of many small files are built in one numpy pass
    (content_batch). Every 4 KiB block is thus uniformly random to a compressor and distinct from
    every other block (a 2^-64 chance of a repeat), at one XOR pass (~5 GB/s) instead of one
    generator call per byte: on 2 cores the CPU left for the kernel's write path is what keeps
    generation near dd's speed. Any range can be built alone, so a shard is written in pieces from
    small reused buffers (fresh pages cost a fault per 4 KiB).
    """

    def __init__(self, key: tuple[int, ...], nbytes: int):
        self.nbytes = nbytes
        self.pool = _pool(key[0])
        nblocks = -(-nbytes // BLOCK)
        h = key_hash(tuple(key))
        self.start = int(_start_of(h))
        self.words = _words(h, np.arange(nblocks))

    def fill(self, a: int, b: int, buf: np.ndarray) -> np.ndarray:
        """Bytes [a, b) built in buf (len >= b - a + 2 * BLOCK); returns the view of them."""
        j0, j1 = a // BLOCK, -(-b // BLOCK)
        if len(buf) < (j1 - j0) * BLOCK:
            raise ValueError("content buffer too small")
        blocks = buf[:(j1 - j0) * BLOCK].view(np.uint64).reshape(j1 - j0, BLOCK // 8)
        done = 0
        while done < j1 - j0:
            p = (self.start + j0 + done) % _POOL_BLOCKS
            n = min(j1 - j0 - done, _POOL_BLOCKS - p)
            np.bitwise_xor(self.pool[p:p + n], self.words[j0 + done:j0 + done + n, None], out=blocks[done:done + n])
            done += n
        return buf[a - j0 * BLOCK:a - j0 * BLOCK + (b - a)]


def random_bytes(nbytes: int, key: tuple[int, ...], out: np.ndarray | None = None) -> np.ndarray:
    """A whole shard's content (see Content), in out if it is big enough (from content_buffer())."""
    if out is None or len(out) < -(-nbytes // BLOCK) * BLOCK:
        out = content_buffer(nbytes)
    return Content(key, nbytes).fill(0, nbytes, out)


def content_batch(seed: int, copy: int, files: np.ndarray, nbytes: np.ndarray, out: np.ndarray | None = None):
    """The contents of many files at once, each from a block boundary of one buffer: (buffer,
    int64 offsets). File f's bytes are buffer[offsets[f]:offsets[f] + nbytes[f]], the same bytes
    Content((seed, copy, files[f]), nbytes[f]) builds alone."""
    nbytes = np.asarray(nbytes, dtype=np.int64)
    nblocks = np.maximum(1, -(-nbytes // BLOCK))
    first = np.concatenate(([0], np.cumsum(nblocks)[:-1])).astype(np.int64)
    total = int(nblocks.sum())
    if out is None or len(out) < total * BLOCK:
        out = content_buffer(total * BLOCK)
    h = key_hash((seed, copy, np.asarray(files, dtype=np.uint64)))
    owner = np.repeat(np.arange(len(nbytes)), nblocks)
    j = np.arange(total, dtype=np.int64) - first[owner]
    pool = _pool(seed)
    rows = (_start_of(h)[owner] + j.astype(np.uint64)) % np.uint64(_POOL_BLOCKS)
    blocks = out[:total * BLOCK].view(np.uint64).reshape(total, BLOCK // 8)
    np.bitwise_xor(pool[rows.astype(np.int64)], _words(h[owner], j)[:, None], out=blocks)
    return out, first * BLOCK


def _put(buf: np.ndarray, offsets: np.ndarray, values: np.ndarray, width: int) -> None:
    """Store little-endian `width`-byte values at arbitrary (unaligned) byte offsets."""
    dtype = {4: "<u4", 8: "<u8"}[width]
    cols = values.astype(dtype).view(np.uint8).reshape(-1, width)
    buf[offsets[:, None] + np.arange(width)] = cols


# ---------------------------------------------------------------- formats --------------------

@record(frozen=True)
class Reading:
    """How the step patterns read a format's shards, as DLIO's reader of that format reads them."""
    # shards: whole shards, each sequentially (training.SampleStream); samples: sample by sample, each
    # at its own offset in an order of its own (indexed_binary, as DLIO's reader seeks to each sample:
    # training.SampleAccessStream); row_groups: by row group (parquet: training.RowGroupStream)
    kind: str = "shards"
    records: bool = False          # tfrecord record by record: header, data, footer (TFRecordDataset without a buffer)
    npz_load: bool = False         # npz shards read as np.load reads them (plan.npz_load_plan)
    # parquet: (rows per row group, [(n, 2) [offset, length] reads of each row group]), the same in every shard
    row_groups: tuple | None = None


class Format:
    name = ""
    suffix = ""
    tiles = False  # whether consecutive extents cover the whole file
    index_suffixes: tuple[str, ...] = ()   # what index_files() adds to the shard's name

    def index_files(self, sizes: np.ndarray) -> dict[str, np.ndarray]:
        """Files written beside the shard, by the suffix added to its name: their bytes (none here)."""
        return {}

    def size_of(self, sizes: np.ndarray) -> int | None:
        """The file size for these sample sizes, when it follows from them alone."""
        return None

    def extents(self, sizes: np.ndarray) -> np.ndarray | None:
        """Extents computable from the sample sizes alone (else None: read them from the file)."""
        return None

    streams = False  # True: written as pieces(), else prepare() then write()
    PIECE = 8 << 20  # bytes per piece of a streamed shard (at least one whole record)

    def pieces(self, sizes: np.ndarray, key: tuple[int, ...], buffer):
        """Yield the shard's bytes in order, as views into buffer(nbytes) arrays (streamed formats)."""
        raise NotImplementedError

    def prepare(self, sizes: np.ndarray, key: tuple[int, ...], out: np.ndarray | None = None):
        """Build the shard's content in memory, in out if given (runs on the generating thread)."""
        raise NotImplementedError

    def write(self, prepared, fd: int) -> None:
        """Write prepared content into fd, a new empty file opened read-write (runs on the writer thread).
        Never by name: the file was created exclusively, and a name can be swapped for a link."""
        raise NotImplementedError

    def extents_from_file(self, path: str, samples: int) -> np.ndarray:
        raise NotImplementedError

    def reading(self, ds, read, direct: bool, block_given: bool) -> Reading:
        """How a dataset of this format (workload.DatasetSpec) is read under [read] (workload.ReadSpec),
        with O_DIRECT or not, with a --block-size given or not."""
        return Reading()

    def check_file(self, path: str, sizes: np.ndarray) -> bool:
        """Whether an existing shard is complete and has these samples (for re-runs)."""
        expected = self.size_of(sizes)
        try:
            return os.path.getsize(path) == expected
        except OSError:
            return False


def _tile(lengths: np.ndarray) -> np.ndarray:
    ext = np.empty((len(lengths), 2), dtype=np.uint64)
    ext[:, 1] = lengths
    ext[:, 0] = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.uint64)
    return ext


def _groups(record_bytes: np.ndarray, piece: int):
    """(first, stop) record ranges of about `piece` bytes each, at least one record per group."""
    ends = np.cumsum(record_bytes)
    i, n = 0, len(record_bytes)
    while i < n:
        base = int(ends[i - 1]) if i else 0
        j = max(int(np.searchsorted(ends, base + piece, side="right")), i + 1)
        yield i, min(j, n)
        i = j


class Stream(Format):
    streams, tiles = True, True
    overhead = 0  # framing bytes per record

    def size_of(self, sizes):
        return int(sizes.sum()) + self.overhead * len(sizes)

    def extents(self, sizes):
        return _tile(sizes.astype(np.uint64) + self.overhead)

    def pieces(self, sizes, key, buffer):
        sizes = sizes.astype(np.int64)
        ext = self.extents(sizes).astype(np.int64)
        content = Content(key, self.size_of(sizes))
        for i, j in _groups(ext[:, 1], self.PIECE):
            a, b = int(ext[i, 0]), int(ext[j - 1].sum())
            view = content.fill(a, b, buffer(b - a + 2 * BLOCK))
            self.frame(view, ext[i:j, 0] - a, sizes[i:j])
            yield view

    def frame(self, view, starts, sizes) -> None:
        pass

    def prepare(self, sizes, key, out=None):
        """The whole shard in one buffer (tests; generation streams pieces())."""
        return np.concatenate([p.copy() for p in self.pieces(sizes, key, content_buffer)])


class TFRecord(Stream):
    name, suffix, overhead = "tfrecord", "tfrecord", 16

    def reading(self, ds, read, direct, block_given):
        # transfer_size 0: TFRecordDataset without a buffer (training.request_shape); a block size given stands
        return Reading(records=read.transfer_size == 0 and not block_given)

    def frame(self, view, starts, sizes):
        data = starts + 12
        _put(view, starts, sizes, 8)
        _put(view, starts + 8, masked_crc(_length_crcs(sizes)), 4)
        _put(view, data + sizes, masked_crc(crc32c_records(view, data, sizes)), 4)


class Raw(Stream):
    name, suffix = "raw", "bin"


class IndexedBinary(Raw):
    """DLIO's indexed_binary (dlio_benchmark data_generator/indexed_binary_generator.py): the samples
    back to back in the data file, NAME.off.idx and NAME.sz.idx beside it with every sample's offset
    and size as uint64, which DLIO's readers (reader/indexed_binary_reader.py, ..._mmap_reader.py)
    open with numpy and seek by. DLIO's generator writes all samples of one size; iodl's index holds
    each drawn size, so a size spread reads as well."""
    name, suffix = "indexed_binary", "indexed_binary"

    def reading(self, ds, read, direct, block_given):
        return Reading("samples")
    index_suffixes = (".off.idx", ".sz.idx")

    def pieces(self, sizes, key, buffer):
        """raw's bytes in pieces of PIECE bytes whatever the sample size: with no framing a piece need
        not hold whole records, so dlrm's 640 MiB samples take no 640 MiB buffers to write."""
        total = self.size_of(np.asarray(sizes))
        content = Content(key, total)
        for a in range(0, total, self.PIECE):
            b = min(a + self.PIECE, total)
            yield content.fill(a, b, buffer(b - a + 2 * BLOCK))

    def index_files(self, sizes):
        ext = self.extents(np.asarray(sizes)).astype("<u8")
        return {".off.idx": ext[:, 0].copy(), ".sz.idx": ext[:, 1].copy()}

    def check_file(self, path, sizes):
        """Complete when the data file has its size and both index files hold what they should."""
        if not super().check_file(path, sizes):
            return False
        for suffix, want in self.index_files(sizes).items():
            try:
                with open(path + suffix, "rb") as f:
                    if f.read(want.nbytes + 1) != want.tobytes():
                        return False
            except OSError:
                return False
        return True


_ZIP_LOCAL = struct.Struct("<4sHHHHHIIIHH")


class Npz(Format):
    name, suffix = "npz", "npz"

    def reading(self, ds, read, direct, block_given):
        # np.load's own reads; O_DIRECT and a given block size read the shard in whole blocks instead
        return Reading(npz_load=read.access == "np.load" and not direct and not block_given)

    def prepare(self, sizes, key, out=None):
        return random_bytes(int(sizes.sum()), key, out), sizes

    def write(self, prepared, fd):
        buf, sizes = prepared
        ends = np.cumsum(sizes).tolist()
        starts = [0] + ends[:-1]
        arrays = {f"sample_{j:06d}": buf[s:e] for j, (s, e) in enumerate(zip(starts, ends))}
        with os.fdopen(fd, "r+b", closefd=False) as f:
            np.savez(f, **arrays)

    def extents_from_file(self, path, samples):
        import zipfile   # here: npz shards only (every rank imports this module)

        ext = np.empty((samples, 2), dtype=np.uint64)
        with open(path, "rb") as f, zipfile.ZipFile(f) as z:
            infos = z.infolist()
            if len(infos) != samples:
                raise ValueError(f"{path}: {len(infos)} members, expected {samples}")
            for j, info in enumerate(infos):
                f.seek(info.header_offset)
                fields = _ZIP_LOCAL.unpack(f.read(_ZIP_LOCAL.size))
                data_start = info.header_offset + _ZIP_LOCAL.size + fields[-2] + fields[-1]
                ext[j] = (info.header_offset, data_start + info.compress_size - info.header_offset)
        return ext

    def check_file(self, path, sizes):
        import zipfile

        try:
            with zipfile.ZipFile(path) as z:
                infos = z.infolist()
            return len(infos) == len(sizes) and all(
                i.file_size > int(n) for i, n in zip(infos, sizes.tolist()))
        except (OSError, zipfile.BadZipFile, ValueError):
            return False


class Hdf5(Format):
    name, suffix = "hdf5", "h5"

    def prepare(self, sizes, key, out=None):
        return random_bytes(int(sizes.sum()), key, out), sizes

    def write(self, prepared, fd):
        import h5py

        buf, sizes = prepared
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.uint64)
        with os.fdopen(fd, "r+b", closefd=False) as fobj, h5py.File(fobj, "w") as f:
            f.create_dataset("data", data=buf)  # contiguous: the samples' bytes sit at known offsets
            f.create_dataset("offsets", data=offsets)
            f.create_dataset("lengths", data=sizes.astype(np.uint64))
            f.attrs["samples"] = len(sizes)

    def extents_from_file(self, path, samples):
        import h5py

        with h5py.File(path, "r") as f:
            base = f["data"].id.get_offset()
            offsets = f["offsets"][()]
            lengths = f["lengths"][()]
        if base is None or len(lengths) != samples:
            raise ValueError(f"{path}: not an iodl hdf5 shard with {samples} samples")
        ext = np.empty((samples, 2), dtype=np.uint64)
        ext[:, 0] = offsets + np.uint64(base)
        ext[:, 1] = lengths
        return ext

    def check_file(self, path, sizes):
        import h5py

        try:
            with h5py.File(path, "r") as f:
                return bool(np.array_equal(f["lengths"][()], sizes.astype(np.uint64)))
        except (OSError, KeyError, ValueError):
            return False


class Npy(Format):
    """One .npy file: a 1-D uint8 array of the samples back to back, streamed like raw after a
    header written by numpy's own writer (format version 1.0, padded to 64 bytes)."""
    name, suffix, streams = "npy", "npy", True

    @staticmethod
    def header(nbytes: int) -> bytes:
        out = io.BytesIO()
        npy.write_array_header_1_0(out, {"descr": "|u1", "fortran_order": False, "shape": (int(nbytes),)})
        return out.getvalue()

    def size_of(self, sizes):
        total = int(sizes.sum())
        return len(self.header(total)) + total

    def extents(self, sizes):
        ext = _tile(sizes.astype(np.uint64))
        ext[:, 0] += np.uint64(len(self.header(int(sizes.sum()))))
        return ext

    def pieces(self, sizes, key, buffer):
        head = np.frombuffer(self.header(int(sizes.sum())), dtype=np.uint8)
        total = len(head) + int(sizes.sum())
        content = Content(key, total)
        for a in range(0, total, self.PIECE):
            b = min(a + self.PIECE, total)
            view = content.fill(a, b, buffer(b - a + 2 * BLOCK))
            if a < len(head):
                n = min(len(head), b) - a
                view[:n] = head[a:a + n]
            yield view

    def prepare(self, sizes, key, out=None):
        """The whole shard in one buffer (tests; generation streams pieces())."""
        return np.concatenate([p.copy() for p in self.pieces(sizes, key, content_buffer)])


class _Image(Format):
    """One sample per file, a real image file of exactly the sample's size (raised to `minimum`
    when smaller): a small image encoded by Pillow plus format-legal filler segments whose
    payload is the shard's random content. The extent is the whole file."""
    _bases: dict = {}
    # a sample at least this large is its file's size without a look at the image: minimum() encodes
    # one with Pillow, ~15 ms of every rank's start-up with the import (72 ranks on 2 cores: 0.5 s),
    # for samples that are never near it (base() refuses an image that would make this untrue)
    LARGE = 1 << 16

    def minimum(self) -> int:
        raise NotImplementedError

    def file_size(self, size: int) -> int:
        """The file a sample of this planned size becomes."""
        size = int(size)
        return size if size >= self.LARGE else max(size, self.minimum())

    @classmethod
    def _keep_base(cls, name: str, image: bytes) -> bytes:
        if len(image) + 4096 > cls.LARGE:   # the framing and first payload are far below 4 KiB
            raise ValueError(f"Pillow encoded a {len(image):,}-byte {name} base image: file_size needs it small")
        cls._bases[name] = image
        return image

    def size_of(self, sizes):
        if len(sizes) != 1:
            raise ValueError(f"a {self.name} file holds one sample, got {len(sizes)}")
        return self.file_size(sizes[0])

    # extents() stays None: the file may be larger than the planned sample (see minimum()), so the
    # extent, the whole file, is recorded from the file (iodl-extents.npy) rather than from sizes.
    def extents_from_file(self, path, samples):
        if samples != 1:
            raise ValueError(f"{path}: a {self.name} file holds one sample, not {samples}")
        return np.array([[0, os.path.getsize(path)]], dtype=np.uint64)

    def prepare(self, sizes, key, out=None):
        total = self.size_of(sizes)
        view = random_bytes(total, key, out)   # the filler's payload: incompressible, unique per shard
        self.lay_out(view, key)
        return view

    def write(self, prepared, fd):
        mv = memoryview(prepared).cast("B")
        pos = 0
        while pos < len(mv):
            pos += os.write(fd, mv[pos:])

    def check_file(self, path, sizes):
        try:
            with open(path, "rb") as f:
                magic = f.read(len(self.MAGIC))
            return magic == self.MAGIC and os.path.getsize(path) == self.size_of(sizes)
        except (OSError, ValueError):
            return False


def _encode(array: np.ndarray, fmt: str, **options) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(array).save(out, fmt, **options)
    return out.getvalue()


def _spread(total: int, most: int) -> list[int]:
    """total split into as few nearly equal parts as keep each at most `most`."""
    n = max(1, -(-total // most))
    return [total // n + (1 if j < total % n else 0) for j in range(n)]


class Jpeg(_Image):
    """SOI, then COM segments (FF FE, 2-byte length, random payload) making up the size, then the
    rest of an 8x8 grayscale noise JPEG (the same in every file, encoded once per process by
    Pillow). The first COM segment always carries at least FIRST random bytes, so that no two
    files are alike even at the minimum size."""
    name, suffix, MAGIC = "jpeg", "jpg", b"\xff\xd8"
    FIRST = 16
    SEGMENT = 4 + 65533   # a COM segment: marker, length, at most 65,533 payload bytes

    def base(self) -> bytes:
        if "jpeg" not in self._bases:
            noise = np.random.default_rng(0x10D1).integers(0, 256, (8, 8), dtype=np.uint8)
            self._keep_base("jpeg", _encode(noise, "JPEG", quality=75))
        return self._bases["jpeg"]

    def minimum(self):
        return len(self.base()) + 4 + self.FIRST

    def lay_out(self, view, key):
        base = self.base()
        filler = len(view) - len(base)          # >= 4 + FIRST
        view[:2] = (0xFF, 0xD8)                 # SOI
        pos = 2
        for seg in _spread(filler, self.SEGMENT):  # each part >= 4 + FIRST (one part) or >= 32,768
            view[pos:pos + 4] = (0xFF, 0xFE, (seg - 2) >> 8, (seg - 2) & 0xFF)
            pos += seg
        view[pos:] = np.frombuffer(base, dtype=np.uint8)[2:]


class Png(_Image):
    """A 4x4 RGB noise PNG (the same in every file, encoded once per process by Pillow, stored with
    zlib level 0) up to its IDAT, then private ancillary `ioDL` chunks of random payload making up
    the size (the first always carries at least FIRST bytes), then IEND."""
    name, suffix, MAGIC = "png", "png", b"\x89PNG\r\n\x1a\n"
    FIRST = 16
    CHUNK = 1 << 30       # payload bytes per ioDL chunk (PNG allows 2^31 - 1)
    TYPE = b"ioDL"        # ancillary (i), private (o), reserved bit clear (D), unsafe to copy (L)

    def base(self) -> bytes:
        if "png" not in self._bases:
            noise = np.random.default_rng(0x10D1).integers(0, 256, (4, 4, 3), dtype=np.uint8)
            image = _encode(noise, "PNG", compress_level=0)
            if not image.endswith(b"\x00\x00\x00\x00IEND\xaeB`\x82"):
                raise ValueError("Pillow wrote a PNG that does not end in IEND")
            self._keep_base("png", image)
        return self._bases["png"]

    def minimum(self):
        return len(self.base()) + 12 + self.FIRST   # one ioDL chunk: 12 bytes of framing, FIRST of payload

    def lay_out(self, view, key):
        image = self.base()
        head = len(image) - 12
        view[:head] = np.frombuffer(image, dtype=np.uint8)[:head]
        pos = head
        for seg in _spread(len(view) - len(image), self.CHUNK + 12):
            n = seg - 12
            view[pos:pos + 8] = np.frombuffer(struct.pack(">I4s", n, self.TYPE), dtype=np.uint8)
            crc = zlib.crc32(memoryview(view[pos + 4:pos + 8 + n]))
            view[pos + 8 + n:pos + 12 + n] = np.frombuffer(struct.pack(">I", crc), dtype=np.uint8)
            pos += seg
        view[pos:] = np.frombuffer(image, dtype=np.uint8)[head:]




# ---------------------------------------------------------------- parquet --------------------

# Thrift compact protocol (the encoding of parquet's page headers and footer), write side only:
# a struct is a list of (field id, type, value); lists are (element type, [values]).
_T_TRUE, _T_FALSE, _T_I32, _T_I64, _T_BINARY, _T_LIST, _T_STRUCT = 1, 2, 5, 6, 8, 9, 12


def _varint(n: int, out: bytearray) -> None:
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _thrift_value(kind: int, value, out: bytearray) -> None:
    if kind in (_T_I32, _T_I64):
        _varint(_zigzag(value), out)
    elif kind == _T_BINARY:
        data = value.encode() if isinstance(value, str) else value
        _varint(len(data), out)
        out += data
    elif kind == _T_LIST:
        elem, items = value
        out.append(len(items) << 4 | elem if len(items) < 15 else 0xF0 | elem)
        if len(items) >= 15:
            _varint(len(items), out)
        for item in items:
            _thrift_value(elem, item, out)
    elif kind == _T_STRUCT:
        _thrift_struct(value, out)
    else:
        raise ValueError(f"thrift type {kind}")


def _thrift_struct(fields, out: bytearray) -> bytearray:
    last = 0
    for fid, kind, value in fields:
        if kind in (_T_TRUE, _T_FALSE):
            kind = _T_TRUE if value else _T_FALSE
        if 0 < fid - last <= 15:
            out.append((fid - last) << 4 | kind)
        else:
            out.append(kind)
            _varint(_zigzag(fid), out)
        if kind not in (_T_TRUE, _T_FALSE):
            _thrift_value(kind, value, out)
        last = fid
    out.append(0)   # stop
    return out


# dtype -> (physical type, bytes per value in the file, converted type or None, numpy dtype of the value).
# Parquet has no 8/16-bit integers: they are INT32 with a converted type (4 bytes each), as pyarrow
# writes them; float16 is a 2-byte FIXED_LEN_BYTE_ARRAY with the FLOAT16 logical type.
_INT32, _INT64, _FLOAT, _DOUBLE, _FLBA = 1, 2, 4, 5, 7
PARQUET_DTYPES = {
    "uint8": (_INT32, 4, 11, 1), "uint16": (_INT32, 4, 12, 2), "uint32": (_INT32, 4, 13, 4),
    "uint64": (_INT64, 8, 14, 8), "int8": (_INT32, 4, 15, 1), "int16": (_INT32, 4, 16, 2),
    "int32": (_INT32, 4, None, 4), "int64": (_INT64, 8, None, 8),
    "float16": (_FLBA, 2, None, 2), "float32": (_FLOAT, 4, None, 4), "float64": (_DOUBLE, 8, None, 8),
}


def parquet_record_bytes(columns) -> int:
    """A row's bytes as DLIO counts them (record_length): each column's dtype size times its size."""
    return sum(PARQUET_DTYPES[c["dtype"]][3] * c.get("size", 1) for c in columns)


class Parquet(Format):
    """Apache Parquet, written without pyarrow (which reads it back in tests): "PAR1", then row group
    after row group, each holding one column chunk per column in schema order, each chunk a single
    DATA_PAGE v1 (a Thrift page header, then the values, PLAIN, UNCOMPRESSED; every field REQUIRED,
    so no definition or repetition levels), then the FileMetaData footer (Thrift compact), its 4-byte
    length and "PAR1". Values are the shard's random content (a float may be a NaN: nothing decodes it).

    Columns are DLIO's (dataset.parquet.columns): name, dtype, size (values per row), read. A column
    of size 1 is a scalar column; of size n > 1 a FIXED_LEN_BYTE_ARRAY of n values' bytes (pyarrow:
    fixed_size_binary), where DLIO's pyarrow writes a fixed-size list: the same value bytes without
    the list's repetition and definition levels. No columns: DLIO's legacy single column `data` of
    sample_size uint8 values per row.

    Reading (Reading "row_groups", training.RowGroupStream) goes by row group, as DLIO's parquet readers
    do: the first sample of a row group a rank takes in an epoch reads the column chunks of its
    `read` columns (adjacent ones in one range), the rest of its samples read nothing more.
    row_group_reads() is that table; extents() gives each row its record_length bytes in its row
    group's data (a bound for the dataset checks: a row's values are spread over the chunks).
    """
    name, suffix, streams = "parquet", "parquet", True

    def reading(self, ds, read, direct, block_given):
        sizes = np.full(ds.samples_per_file, ds.sample_size, dtype=np.int64)
        return Reading("row_groups", row_groups=self.row_group_reads(sizes))
    MAX_PAGE = (1 << 31) - 1    # a page's size is a Thrift i32

    def __init__(self, columns=(), row_group_size: int = 1024):
        self.columns = [dict(name=c["name"], dtype=c["dtype"], size=int(c.get("size", 1)), read=bool(c.get("read", True)))
                        for c in columns]
        self.row_group_size = int(row_group_size)
        self._layouts: dict[int, tuple] = {}

    def _columns_for(self, sizes: np.ndarray) -> list[dict]:
        return self.columns or [dict(name="data", dtype="uint8", size=int(sizes[0]), read=True)]

    def _width(self, col: dict) -> int:
        """Bytes of one row of this column in the file."""
        phys, nbytes, _conv, item = PARQUET_DTYPES[col["dtype"]]
        return nbytes if col["size"] == 1 else item * col["size"]

    @staticmethod
    def _page_header(values: int, nbytes: int) -> bytes:
        dph = [(1, _T_I32, values), (2, _T_I32, 0), (3, _T_I32, 3), (4, _T_I32, 3)]   # PLAIN values, RLE levels
        return bytes(_thrift_struct([(1, _T_I32, 0), (2, _T_I32, nbytes), (3, _T_I32, nbytes), (5, _T_STRUCT, dph)],
                                    bytearray()))

    def layout(self, sizes: np.ndarray) -> np.ndarray:
        """The column chunks of a shard of len(sizes) rows: int64 (row groups, columns, 4) of
        [chunk start, page header bytes, value bytes, rows]. The same for every shard of a dataset."""
        rows = len(sizes)
        cols = self._columns_for(sizes)
        key = (rows, cols[0]["size"] if not self.columns else 0)
        if key not in self._layouts:
            widths = [self._width(c) for c in cols]
            groups = [min(self.row_group_size, rows - a) for a in range(0, rows, self.row_group_size)]
            chunks = np.empty((len(groups), len(cols), 4), dtype=np.int64)
            for c, w in enumerate(widths):
                if groups[0] * w > self.MAX_PAGE:
                    raise ValueError(f"parquet: a column chunk of {groups[0]} rows x {w} bytes ({cols[c]['name']}) "
                                     "is over 2 GiB, a page's limit: lower row_group_size")
            # a page header's length depends on its rows and bytes only: at most two kinds of row group
            heads = {n: [len(self._page_header(n, n * w)) for w in widths] for n in set(groups)}
            n_rows = np.array(groups, dtype=np.int64)[:, None]
            chunks[:, :, 1] = [heads[n] for n in groups]
            chunks[:, :, 2] = n_rows * np.array(widths, dtype=np.int64)
            chunks[:, :, 3] = n_rows
            sizes_ = (chunks[:, :, 1] + chunks[:, :, 2]).ravel()
            chunks[:, :, 0] = (4 + np.concatenate(([0], np.cumsum(sizes_)[:-1]))).reshape(len(groups), len(cols))
            self._layouts[key] = chunks
        return self._layouts[key]

    def footer(self, sizes: np.ndarray) -> bytes:
        key = ("footer", len(sizes), 0 if self.columns else int(sizes[0]))
        if key not in self._layouts:
            self._layouts[key] = self._footer(self._columns_for(sizes), self.layout(sizes), len(sizes))
        return self._layouts[key]

    def _footer(self, cols, chunks, rows) -> bytes:
        schema = [[(4, _T_BINARY, "schema"), (5, _T_I32, len(cols))]]
        for c in cols:
            phys, _n, conv, item = PARQUET_DTYPES[c["dtype"]]
            el = [(1, _T_I32, phys if c["size"] == 1 else _FLBA)]
            if c["size"] > 1 or phys == _FLBA:
                el.append((2, _T_I32, item * c["size"]))
            el += [(3, _T_I32, 0), (4, _T_BINARY, c["name"])]
            if c["size"] == 1 and conv is not None:
                el.append((6, _T_I32, conv))
            if c["size"] == 1 and c["dtype"] == "float16":
                el.append((10, _T_STRUCT, [(15, _T_STRUCT, [])]))    # LogicalType FLOAT16
            schema.append(el)
        groups = []
        for g in range(chunks.shape[0]):
            cc = []
            for c, col in enumerate(cols):
                start, head, data, n = (int(x) for x in chunks[g, c])
                phys = PARQUET_DTYPES[col["dtype"]][0] if col["size"] == 1 else _FLBA
                meta = [(1, _T_I32, phys), (2, _T_LIST, (_T_I32, [0])), (3, _T_LIST, (_T_BINARY, [col["name"]])),
                        (4, _T_I32, 0), (5, _T_I64, n), (6, _T_I64, head + data), (7, _T_I64, head + data),
                        (9, _T_I64, start)]
                cc.append([(2, _T_I64, start), (3, _T_STRUCT, meta)])
            total = int((chunks[g, :, 1] + chunks[g, :, 2]).sum())
            groups.append([(1, _T_LIST, (_T_STRUCT, cc)), (2, _T_I64, total), (3, _T_I64, int(chunks[g, 0, 3]))])
        meta = [(1, _T_I32, 1), (2, _T_LIST, (_T_STRUCT, schema)), (3, _T_I64, rows),
                (4, _T_LIST, (_T_STRUCT, groups)), (6, _T_BINARY, "iodl")]
        return bytes(_thrift_struct(meta, bytearray()))

    def size_of(self, sizes):
        sizes = np.asarray(sizes)
        chunks = self.layout(sizes)
        return int(chunks[-1, -1, 0] + chunks[-1, -1, 1] + chunks[-1, -1, 2]) + len(self.footer(sizes)) + 8

    def extents(self, sizes):
        """Row j: record_length bytes from its row group's first chunk, at its place among the group's
        rows (a bound, see the class docstring: the row's values lie in every chunk of the group)."""
        sizes = np.asarray(sizes)
        chunks = self.layout(sizes)
        rows = np.arange(len(sizes))
        g = rows // self.row_group_size
        ext = np.empty((len(sizes), 2), dtype=np.uint64)
        ext[:, 0] = chunks[g, 0, 0] + (rows - g * self.row_group_size) * sizes.astype(np.int64)
        ext[:, 1] = sizes
        return ext

    def row_group_reads(self, sizes: np.ndarray) -> tuple[int, list[np.ndarray]]:
        """(rows per row group, [(n, 2) int64 [offset, length] per row group]): the byte ranges a
        row group's read takes, its `read` columns' chunks (page header and values, as DLIO's
        readers take a chunk: from its page offset for its total size), adjacent chunks merged."""
        chunks = self.layout(np.asarray(sizes))
        want = [c for c, col in enumerate(self._columns_for(sizes)) if col["read"]]
        out = []
        for g in range(chunks.shape[0]):
            start = chunks[g, want, 0]
            end = start + chunks[g, want, 1] + chunks[g, want, 2]
            new = np.concatenate(([True], start[1:] != end[:-1]))     # a range begins where the last one did not end
            first = np.flatnonzero(new)
            last = np.append(first[1:], len(start)) - 1
            out.append(np.stack([start[first], end[last] - start[first]], axis=1))
        return self.row_group_size, out

    def _patches(self, sizes):
        """(file offsets, bytes) of everything not random content: magics, page headers, footer."""
        chunks, footer, total = self.layout(sizes), self.footer(sizes), self.size_of(sizes)
        parts, where = [b"PAR1"], [0]
        headers: dict = {}
        for g in range(chunks.shape[0]):
            for c in range(chunks.shape[1]):
                start, head, data, n = (int(x) for x in chunks[g, c])
                parts.append(headers.setdefault((n, data), self._page_header(n, data)))
                where.append(start)
        parts.append(footer + struct.pack("<I", len(footer)) + b"PAR1")
        where.append(total - len(parts[-1]))
        pos = np.concatenate([w + np.arange(len(p), dtype=np.int64) for w, p in zip(where, parts)])
        return pos, np.frombuffer(b"".join(parts), dtype=np.uint8)

    def pieces(self, sizes, key, buffer):
        sizes = np.asarray(sizes)
        total = self.size_of(sizes)
        pos, values = self._patches(sizes)
        content = Content(key, total)
        for a in range(0, total, self.PIECE):
            b = min(a + self.PIECE, total)
            view = content.fill(a, b, buffer(b - a + 2 * BLOCK))
            lo, hi = np.searchsorted(pos, [a, b])
            view[pos[lo:hi] - a] = values[lo:hi]
            yield view

    def prepare(self, sizes, key, out=None):
        """The whole shard in one buffer (tests; generation streams pieces())."""
        return np.concatenate([p.copy() for p in self.pieces(sizes, key, content_buffer)])


def format_for(ds) -> Format:
    """The format of a dataset spec (workload.DatasetSpec, or its dict in a manifest): parquet's
    layout depends on its columns and row groups."""
    get = ds.get if isinstance(ds, dict) else (lambda key, default=None: getattr(ds, key, default))
    if get("format") == "parquet":
        return Parquet(get("columns") or (), get("row_group_size") or 1024)
    return FORMATS[get("format")]


# parquet's instance here is DLIO's legacy layout (one uint8 column); a workload's columns: format_for()
FORMATS: dict[str, Format] = {f.name: f for f in (TFRecord(), Hdf5(), Npz(), Raw(), Npy(), Jpeg(), Png(),
                                                  IndexedBinary(), Parquet())}

"""Compiled inner loops: hop log entries, walk v2 records into Arrow's buffers, find where to resync.

These are the only per-record loops in the decoder. They run under numba over a uint8 array
and emit flat numpy columns, binary ones as Arrow's own buffers (offsets and data), so no
Python object is made per record. Every read is bounds-checked against the area it belongs to; a malformed
batch stops at the first bad byte and reports where and why.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import os
import tempfile
from types import ModuleType

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

# Module-level integers are compile-time constants to numba: the kernels read bytes at the
# layout's names. Only the modules of CACHE_KEY_MODULES may be imported from (the cache is keyed
# on them, below).
from decoders.constants import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    BASE_SEQUENCE_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    COMPRESSION_LZ4,
    COMPRESSION_SNAPPY,
    CRC32C_POLYNOMIAL_REFLECTED,
    CRC_OFFSET,
    CURRENT_MAGIC_VALUE,
    HEADER_SIZE_UP_TO_MAGIC,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    LZ4_BD_SIZE_SHIFT,
    LZ4_FLG_INDEPENDENT_BLOCKS,
    LZ4_FRAME_MAGIC,
    LZ4_LAST_LITERALS,
    LZ4_MATCH_FROM_END,
    LZ4_MIN_MATCH,
    LZ4_UNCOMPRESSED_BLOCK_FLAG,
    MAGIC_OFFSET,
    MAGIC_VALUE_V2,
    MAX_TIMESTAMP_OFFSET,
    MIN_BATCH_LENGTH_V2,
    MIN_LEGACY_ENTRY_SIZE,
    PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    SIZE_OFFSET,
    SNAPPY_XERIAL_HEADER_SIZE,
    SNAPPY_XERIAL_MAGIC,
)
from decoders.numba_cache import cached_signatures
from decoders.numba_cache import install as install_cache

# The modules numba's on-disk cache depends on: a change to any of them is a new cache
# (numba_cache.py: where the cache lives and how it is found).
CACHE_KEY_MODULES = ("kernels.py", "constants.py", "numba_cache.py")


def _cache_dir() -> str | None:
    """Where numba keeps the compiled kernels: a per-user directory, never the package's own.

    The package directory may be read-only (a system or container install), and numba's cache
    keys on this file only: constants the kernels take from other modules would be baked in
    stale. So the directory is named for a hash of every module the kernels depend on, under
    ``$NUMBA_CACHE_DIR`` if set, else the user's cache directory, else the temp directory;
    None (compile in memory) when none of them is writable.
    """
    digest = hashlib.sha256()
    for name in CACHE_KEY_MODULES:
        # through the package's loader: the package may be imported from a zip (--py-files)
        digest.update(importlib.resources.files("decoders").joinpath(name).read_bytes())
    tag = f"logreplay-{digest.hexdigest()[:16]}"
    user = os.environ.get("NUMBA_CACHE_DIR")
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    candidates = [os.path.join(user, tag)] if user else []
    candidates += [
        os.path.join(cache_home, "logreplay", "numba", tag),
        os.path.join(tempfile.gettempdir(), f"logreplay-{os.getuid()}", "numba", tag),
    ]
    for d in candidates:
        try:
            os.makedirs(d, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=d):
                pass
        except OSError:
            continue
        return d
    return None


_CACHE_DIR = _cache_dir()
if _CACHE_DIR is not None:  # before the kernels below are decorated: numba reads it then
    install_cache(_CACHE_DIR)
_CACHE = _CACHE_DIR is not None
NUMBA_CACHE = _CACHE  # for other modules' kernels (replay.crosslog)

# hop_entries stop reasons
HOP_END = 0  # reached the end of the range exactly
HOP_PARTIAL = 1  # the next entry does not fit in the range (or its head up to magic does not)
HOP_BAD_SIZE = 2  # size field smaller than the format's minimum or larger than allowed
HOP_BAD_MAGIC = 3  # magic byte is not 0, 1 or 2

# per-batch record walk status (walk_records)
REC_OK = 0
REC_BAD_LENGTH = 1  # a record's length is negative or runs past the records area
REC_FIELD_OVERRUN = 2  # a field runs past the end of its record
REC_TOO_FEW = 3  # the area ended before recordsCount records were read
REC_LEFTOVER = 4  # bytes remain after recordsCount records
REC_BAD_FIELD_LENGTH = 5  # negative key/value/header length other than -1, or bad header count
REC_BAD_VARINT = 6  # a varint is longer than its type allows
REC_SIZE_MISMATCH = 7  # bytes consumed by a record differ from its length field

REC_REASONS = {
    REC_BAD_LENGTH: "record length is negative or runs past the records area",
    REC_FIELD_OVERRUN: "record field runs past the end of its record",
    REC_TOO_FEW: "records area ended before recordsCount records",
    REC_LEFTOVER: "bytes left over after recordsCount records",
    REC_BAD_FIELD_LENGTH: "invalid key, value or header length",
    REC_BAD_VARINT: "varint longer than its type allows",
    REC_SIZE_MISMATCH: "record length disagrees with its fields",
}

MIN_V2_RECORD_SIZE = 7


@njit(cache=_CACHE, nogil=True)
def _be32(b, p):
    return np.int32(
        (np.int64(b[p]) << 24)
        | (np.int64(b[p + 1]) << 16)
        | (np.int64(b[p + 2]) << 8)
        | np.int64(b[p + 3])
    )


@njit(cache=_CACHE, nogil=True, inline="always")
def _be(b, p, width):
    """The big-endian unsigned integer of ``width`` bytes at p."""
    v = np.uint64(0)
    for k in range(width):
        v = (v << np.uint64(8)) | np.uint64(b[p + k])
    return v


@njit(cache=_CACHE, nogil=True)
def v2_header_fields(buf, positions, base_offset, leader_epoch, crc, attributes, last_delta,
                     base_ts, max_ts, producer_id, producer_epoch, base_seq, count):  # fmt: skip
    """The fixed header fields of the v2 batches at ``positions`` (each with its
    RECORD_BATCH_OVERHEAD bytes in ``buf``: the caller checks), into the arrays given, each of
    its field's type: one pass over the headers, where a numpy gather made an index per byte."""
    for i in range(positions.shape[0]):
        p = positions[i]
        base_offset[i] = np.int64(_be(buf, p + BASE_OFFSET_OFFSET, 8))
        leader_epoch[i] = np.int32(_be(buf, p + PARTITION_LEADER_EPOCH_OFFSET, 4))
        crc[i] = np.uint32(_be(buf, p + CRC_OFFSET, 4))
        attributes[i] = np.int16(_be(buf, p + ATTRIBUTES_OFFSET, 2))
        last_delta[i] = np.int32(_be(buf, p + LAST_OFFSET_DELTA_OFFSET, 4))
        base_ts[i] = np.int64(_be(buf, p + BASE_TIMESTAMP_OFFSET, 8))
        max_ts[i] = np.int64(_be(buf, p + MAX_TIMESTAMP_OFFSET, 8))
        producer_id[i] = np.int64(_be(buf, p + PRODUCER_ID_OFFSET, 8))
        producer_epoch[i] = np.int16(_be(buf, p + PRODUCER_EPOCH_OFFSET, 2))
        base_seq[i] = np.int32(_be(buf, p + BASE_SEQUENCE_OFFSET, 4))
        count[i] = np.int32(_be(buf, p + RECORDS_COUNT_OFFSET, 4))


@njit(cache=_CACHE, nogil=True)
def _grow(a, n, cap):
    """A copy of a[:n] in a larger array of capacity cap."""
    b = np.empty(cap, a.dtype)
    b[:n] = a[:n]
    return b


@intrinsic
def _copy(typingctx, dst, dst_at, src, src_at, n):
    """``dst[dst_at:dst_at + n] = src[src_at:src_at + n]`` as one ``llvm.memcpy``: a slice
    assignment builds two array views per call, eight times the cost of the copy for the short
    keys and values of a record (the caller has checked both ranges)."""
    sig = types.void(dst, types.intp, src, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        d, d_at, s, s_at, count = args
        d_arr = context.make_array(signature.args[0])(context, builder, d)
        s_arr = context.make_array(signature.args[2])(context, builder, s)
        cgutils.raw_memcpy(
            builder, builder.gep(d_arr.data, [d_at]), builder.gep(s_arr.data, [s_at]), count, 1
        )
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=_CACHE, nogil=True)
def hop_entries(buf, start, end, max_entry):
    """Follow `12 + size` from `start` while whole, well-formed entries fit before `end`.

    Returns (positions, sizes, magics, count, stop_position, stop_reason).
    """
    cap = max(16, (end - start) // RECORD_BATCH_OVERHEAD + 1)
    pos = np.empty(cap, np.int64)
    size = np.empty(cap, np.int32)
    magic = np.empty(cap, np.int8)
    n = 0
    p = start
    reason = HOP_END
    while True:
        if p == end:
            reason = HOP_END
            break
        if end - p < HEADER_SIZE_UP_TO_MAGIC:
            reason = HOP_PARTIAL
            break
        s = _be32(buf, p + SIZE_OFFSET)
        m = np.int8(buf[p + MAGIC_OFFSET])
        if m < 0 or m > CURRENT_MAGIC_VALUE:
            reason = HOP_BAD_MAGIC
            break
        if (
            s < MIN_LEGACY_ENTRY_SIZE
            or (m == MAGIC_VALUE_V2 and s < MIN_BATCH_LENGTH_V2)
            or s > max_entry
        ):
            reason = HOP_BAD_SIZE
            break
        if p + LOG_OVERHEAD + s > end:
            reason = HOP_PARTIAL
            break
        if n == cap:
            cap *= 2
            pos, size, magic = _grow(pos, n, cap), _grow(size, n, cap), _grow(magic, n, cap)
        pos[n] = p
        size[n] = s
        magic[n] = m
        n += 1
        p += LOG_OVERHEAD + s
    return pos[:n], size[:n], magic[:n], n, p, reason


# The varint readers are inlined into the walk: a call per field returning a tuple cost four
# times the walk itself. A length or delta of a small record is one byte, read first.
@njit(cache=_CACHE, nogil=True, inline="always")
def _uvarint(b, p, end, max_bytes):
    """Unsigned LEB128 -> (value, next position, ok)."""
    res = np.int64(0)
    shift = 0
    for _ in range(max_bytes):
        if p >= end:
            return res, p, False
        x = np.int64(b[p])
        p += 1
        res |= (x & 0x7F) << shift
        if x < 0x80:
            return res, p, True
        shift += 7
    return res, p, False


@njit(cache=_CACHE, nogil=True, inline="always")
def _varint(b, p, end):
    """A zigzag varint of at most 5 bytes (ByteUtils.readVarint) -> (value, next, ok)."""
    if p < end and b[p] < 0x80:
        x = np.int64(b[p])
        return (x >> 1) ^ -(x & 1), p + 1, True
    u, p, ok = _uvarint(b, p, end, 5)
    u &= 0xFFFFFFFF
    v = (u >> 1) ^ -(u & 1)
    return v, p, ok


@njit(cache=_CACHE, nogil=True, inline="always")
def _varlong(b, p, end):
    """A zigzag varlong of at most 10 bytes (ByteUtils.readVarlong) -> (value, next, ok)."""
    if p < end and b[p] < 0x80:
        x = np.int64(b[p])
        return (x >> 1) ^ -(x & 1), p + 1, True
    u, p, ok = _uvarint(b, p, end, 10)
    v = (u >> 1) ^ -(u & 1)
    return v, p, ok


# One compiled loop over every record of every batch: split, its state would cross calls.
# It writes into arrays the caller allocates: numba's own allocations are fresh pages each call
# (a page fault per 4 KiB written), numpy's and Arrow's pools reuse theirs.
@njit(cache=_CACHE, nogil=True)
def walk_records(
    buf,
    starts,
    ends,
    counts,
    base_offsets,
    base_timestamps,
    fixed_timestamps,
    offset,
    timestamp,
    key_pos,
    key_len,
    value_pos,
    value_len,
    header_pos,
    header_count,
):
    """Walk the records areas of v2 batches (DefaultRecord.readFrom's layout) into columns.

    buf: uint8 array holding every records area; starts/ends: the area of batch i;
    counts: recordsCount; fixed_timestamps[i] >= -1 replaces every record's timestamp
    (LogAppendTime -> maxTimestamp), or is -2 to use baseTimestamp + delta.

    Fills, per record (arrays of at least :func:`record_capacity` entries): its offset,
    timestamp, key and value position and length (-1: null), where its headers start
    and how many it has. Headers are validated here and copied by :func:`copy_headers`.

    A record is taken whole or not at all: a batch stops at its first bad record, whose status
    and position are the batch's; the records taken are in batch order, ``decoded[i]`` of
    batch i. Returns (records, per batch (status, records decoded, error
    position), headers, key bytes, value bytes, header key bytes, header value bytes).
    """
    nb = starts.shape[0]
    cap = offset.shape[0]
    status = np.zeros(nb, np.int8)
    decoded = np.zeros(nb, np.int32)
    errpos = np.full(nb, -1, np.int64)
    k = 0  # records taken
    h = 0  # headers taken
    kb = 0  # bytes of keys, values, header keys, header values
    vb = 0
    hkb = 0
    hvb = 0
    for i in range(nb):
        p = starts[i]
        area_end = ends[i]
        st = REC_OK
        j = 0
        c = counts[i]
        while j < c:
            if p >= area_end:
                st = REC_TOO_FEW
                break
            rstart = p
            ln, p, ok = _varint(buf, p, area_end)
            if not ok:
                st = REC_BAD_VARINT
                p = rstart
                break
            if ln < 0 or p + ln > area_end:
                st = REC_BAD_LENGTH
                p = rstart
                break
            rend = p + ln
            if k >= cap:  # cannot happen for well-formed data; guards the preallocation
                st = REC_BAD_LENGTH
                p = rstart
                break
            p += 1  # attributes
            tsd, p, ok1 = _varlong(buf, p, rend)
            od, p, ok2 = _varint(buf, p, rend)
            kl, p, ok3 = _varint(buf, p, rend)
            if not (ok1 and ok2 and ok3) or p > rend:
                st = REC_FIELD_OVERRUN
                p = rstart
                break
            if kl < -1:
                st = REC_BAD_FIELD_LENGTH
                p = rstart
                break
            kp = p
            if kl > 0:
                p += kl
            vl, p, ok4 = _varint(buf, p, rend)
            if not ok4 or p > rend or vl < -1:
                st = REC_FIELD_OVERRUN if vl >= -1 else REC_BAD_FIELD_LENGTH
                p = rstart
                break
            vp = p
            if vl > 0:
                p += vl
            hc, p, ok5 = _varint(buf, p, rend)
            if not ok5 or p > rend:
                st = REC_FIELD_OVERRUN
                p = rstart
                break
            if hc < 0 or hc > rend - p:
                st = REC_BAD_FIELD_LENGTH
                p = rstart
                break
            hp = p
            bad = REC_OK
            hk_bytes = 0
            hv_bytes = 0
            for _ in range(hc):
                hkl, p, okh = _varint(buf, p, rend)
                if not okh or hkl < 0 or p + hkl > rend:
                    bad = REC_BAD_FIELD_LENGTH if okh and hkl < 0 else REC_FIELD_OVERRUN
                    break
                p += hkl
                hk_bytes += hkl
                hvl, p, okv = _varint(buf, p, rend)
                if not okv or hvl < -1 or p + max(hvl, 0) > rend:
                    bad = REC_BAD_FIELD_LENGTH if okv and hvl < -1 else REC_FIELD_OVERRUN
                    break
                if hvl > 0:
                    p += hvl
                    hv_bytes += hvl
            if bad == REC_OK and p != rend:
                bad = REC_SIZE_MISMATCH
            if bad != REC_OK:
                st = bad
                p = rstart
                break
            offset[k] = base_offsets[i] + od
            if fixed_timestamps[i] >= -1:
                timestamp[k] = fixed_timestamps[i]
            else:
                timestamp[k] = base_timestamps[i] + tsd
            key_pos[k] = kp
            key_len[k] = kl
            value_pos[k] = vp
            value_len[k] = vl
            header_pos[k] = hp
            header_count[k] = hc
            kb += max(kl, 0)
            vb += max(vl, 0)
            h += hc
            hkb += hk_bytes
            hvb += hv_bytes
            k += 1
            j += 1
        if st == REC_OK and p != area_end:
            st = REC_LEFTOVER
        status[i] = st
        decoded[i] = j
        if st != REC_OK:
            errpos[i] = p
    return k, status, decoded, errpos, h, kb, vb, hkb, hvb


@njit(cache=_CACHE, nogil=True)
def record_capacity(starts, ends, counts):
    """How many records walk_records can take from these areas: recordsCount, bounded by what
    the area can hold (a header may declare any count)."""
    cap = 0
    for i in range(starts.shape[0]):
        room = (ends[i] - starts[i]) // MIN_V2_RECORD_SIZE
        cap += max(0, min(counts[i], room))
    return cap


@njit(cache=_CACHE, nogil=True)
def copy_slices(buf, pos, lens, offsets, data):
    """Copy ``buf[pos[i]:pos[i] + lens[i]]`` one after another into ``data`` and write their
    int32 Arrow ``offsets`` (n + 1 entries); a negative length (null) is empty."""
    o = 0
    offsets[0] = 0
    for i in range(pos.shape[0]):
        ln = lens[i]
        if ln > 0:
            _copy(data, o, buf, pos[i], ln)
            o += ln
        offsets[i + 1] = o


@njit(cache=_CACHE, nogil=True)
def copy_headers(
    buf,
    header_pos,
    header_count,
    lists,
    key_offsets,
    key_data,
    value_offsets,
    value_data,
    value_len,
):
    """Copy the headers walk_records validated (its header_pos and header_count per record)
    into Arrow buffers: the records' list offsets, and the headers' keys and values (a value's
    length -1 is null)."""
    h = 0
    ko = 0
    vo = 0
    lists[0] = 0
    key_offsets[0] = 0
    value_offsets[0] = 0
    for r in range(header_pos.shape[0]):
        p = header_pos[r]
        end = buf.shape[0]
        for _ in range(header_count[r]):
            hkl, p, _ok = _varint(buf, p, end)
            _copy(key_data, ko, buf, p, hkl)
            ko += hkl
            p += hkl
            hvl, p, _ok = _varint(buf, p, end)
            if hvl > 0:
                _copy(value_data, vo, buf, p, hvl)
                vo += hvl
                p += hvl
            value_len[h] = hvl
            h += 1
            key_offsets[h] = ko
            value_offsets[h] = vo
        lists[r + 1] = h


# -- CRC-32C of small batches ------------------------------------------------------------------
# The crc32c package checksums at ~12 GB/s, but a call into it from Python's loop costs ~0.7 us:
# a batch of a few records (~250 bytes) pays that for 20 ns of work. So small entries are
# checksummed here, all of a window's in one call, larger ones by the package
# (framing.entry_crcs). Two kernels, one chosen per process (small_batch_crcs):
# - with the CPU's CRC-32C instruction (SSE 4.2's crc32, x86-64: 7-10 GB/s here), entries up to
#   INSTRUCTION_ENTRY_BYTES, about where one call into the package costs what it saves;
# - else slicing-by-8 tables (~1.7 GB/s here), entries up to SMALL_ENTRY_BYTES.
# Measured on this project's benchmark machine (docs/benchmarks.md, "CRC-32C by instruction").
SMALL_ENTRY_BYTES = 2048
INSTRUCTION_ENTRY_BYTES = 16384


def crc32c_instruction() -> bool:
    """Whether numba compiles this process's kernels for a CPU with the CRC-32C instruction:
    an x86-64 host with SSE 4.2, numba targeting the host itself. A target named through
    ``NUMBA_CPU_NAME`` or ``NUMBA_CPU_FEATURES`` (a cache shared by unlike machines) gets the
    tables: code using an instruction its target may lack would not compile, or not run."""
    import platform

    import llvmlite.binding as llvm
    from numba.core import config

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    if config.CPU_NAME not in (None, "host") or config.CPU_FEATURES:
        return False
    try:
        return bool(llvm.get_host_cpu_features().get("sse4.2"))
    except Exception:  # noqa: BLE001 - features unknown: the portable kernel
        return False


CRC32C_INSTRUCTION = crc32c_instruction()


def crc32c_tables() -> np.ndarray:
    """The 8 x 256 tables of slicing-by-8 CRC-32C: table k maps a byte to its CRC k bytes on."""
    t = np.zeros((8, 256), np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ CRC32C_POLYNOMIAL_REFLECTED if c & 1 else c >> 1
        t[0, i] = c
    for k in range(1, 8):
        t[k] = (t[k - 1] >> 8) ^ t[0, t[k - 1] & 0xFF]
    return t


@njit(cache=_CACHE, nogil=True, inline="always")
def _le32(b, p):
    """The little-endian uint32 at p (LZ4 block sizes, CRC-32C words), as an int64."""
    return (
        np.int64(b[p])
        | (np.int64(b[p + 1]) << 8)
        | (np.int64(b[p + 2]) << 16)
        | (np.int64(b[p + 3]) << 24)
    )


@njit(cache=_CACHE, nogil=True, inline="always")
def _crc32c(b, p, end, t):
    c = np.uint32(0xFFFFFFFF)
    while end - p >= 8:
        lo = c ^ np.uint32(_le32(b, p))
        hi = np.uint32(_le32(b, p + 4))
        c = (
            t[7, lo & 0xFF] ^ t[6, (lo >> 8) & 0xFF] ^ t[5, (lo >> 16) & 0xFF] ^ t[4, lo >> 24]
            ^ t[3, hi & 0xFF] ^ t[2, (hi >> 8) & 0xFF] ^ t[1, (hi >> 16) & 0xFF] ^ t[0, hi >> 24]
        )  # fmt: skip
        p += 8
    while p < end:
        c = t[0, (c ^ np.uint32(b[p])) & 0xFF] ^ (c >> 8)
        p += 1
    return c ^ np.uint32(0xFFFFFFFF)


@njit(cache=_CACHE, nogil=True, inline="always")
def _small_v2_entry(positions, sizes, magics, i, limit):
    """(start, end) of entry ``i`` if it is a v2 batch of at most ``limit`` bytes, which a
    kernel below checksums; else start -1 (left to the crc32c package)."""
    p = positions[i]
    end = p + LOG_OVERHEAD + sizes[i]
    if magics[i] != MAGIC_VALUE_V2 or end - p > limit:
        return -1, end
    return p, end


@njit(cache=_CACHE, nogil=True)
def small_batch_crcs_tables(buf, positions, sizes, magics, tables, computed, stored, done):
    """CRC-32C of each v2 entry of at most SMALL_ENTRY_BYTES (attributes to its end, as
    DefaultRecordBatch.isValid checks it) and the CRC it stores; done[i] marks the ones
    checksummed here."""
    for i in range(positions.shape[0]):
        p, end = _small_v2_entry(positions, sizes, magics, i, SMALL_ENTRY_BYTES)
        done[i] = p >= 0
        if p >= 0:
            computed[i] = _crc32c(buf, p + ATTRIBUTES_OFFSET, end, tables)
            stored[i] = np.uint32(_be32(buf, p + CRC_OFFSET))


def _x86_call(builder, name: str, ret, args_types, args):
    """A call of the LLVM intrinsic ``name`` (an x86 instruction) in the code being built."""
    fnty = ir.FunctionType(ret, args_types)
    return builder.call(cgutils.get_or_insert_function(builder.module, fnty, name), args)


@intrinsic
def _crc32c_word(typingctx, crc, word):
    """SSE 4.2's crc32 over 8 bytes (a little-endian word): the reflected CRC-32C step."""
    sig = types.uint64(types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        return _x86_call(builder, "llvm.x86.sse42.crc32.64.64", i64, [i64, i64], args)

    return sig, codegen


@intrinsic
def _crc32c_byte(typingctx, crc, byte):
    """SSE 4.2's crc32 over one byte."""
    sig = types.uint32(types.uint32, types.uint8)

    def codegen(context, builder, signature, args):
        i32, i8 = ir.IntType(32), ir.IntType(8)
        return _x86_call(builder, "llvm.x86.sse42.crc32.32.8", i32, [i32, i8], args)

    return sig, codegen


@intrinsic
def _word_at(typingctx, buf, at):
    """The 8 bytes of ``buf`` at ``at`` as one unaligned load: a little-endian word on x86-64,
    the only target of the instruction's kernel (the caller checks the range)."""
    sig = types.uint64(buf, types.intp)

    def codegen(context, builder, signature, args):
        arr = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.bitcast(builder.gep(arr.data, [args[1]]), ir.IntType(64).as_pointer())
        return builder.load(ptr, align=1)

    return sig, codegen


@njit(cache=_CACHE, nogil=True, inline="always")
def _crc32c_instructed(b, p, end):
    c = np.uint64(0xFFFFFFFF)
    while end - p >= 8:
        c = _crc32c_word(c, _word_at(b, p))
        p += 8
    c32 = np.uint32(c)
    while p < end:
        c32 = _crc32c_byte(c32, b[p])
        p += 1
    return c32 ^ np.uint32(0xFFFFFFFF)


if CRC32C_INSTRUCTION:  # defined only where it compiles: load_cached loads what is defined

    @njit(cache=_CACHE, nogil=True)
    def small_batch_crcs_instructed(buf, positions, sizes, magics, tables, computed, stored,
                                    done):  # fmt: skip
        """small_batch_crcs_tables by the CPU's instruction, for entries of at most
        INSTRUCTION_ENTRY_BYTES (``tables`` unused: one signature for both)."""
        for i in range(positions.shape[0]):
            p, end = _small_v2_entry(positions, sizes, magics, i, INSTRUCTION_ENTRY_BYTES)
            done[i] = p >= 0
            if p >= 0:
                computed[i] = _crc32c_instructed(buf, p + ATTRIBUTES_OFFSET, end)
                stored[i] = np.uint32(_be32(buf, p + CRC_OFFSET))

    small_batch_crcs = small_batch_crcs_instructed
else:
    small_batch_crcs = small_batch_crcs_tables


# -- LZ4 frames, as Kafka's producers write them ---------------------------------------------
# A compressed batch of a few records is a payload of ~200 bytes: cramjam decompresses it in
# ~0.3 us, but a call into it from Python costs ~2 us, and the loop around it as much again
# (4.6 M such batches in 1 GB of lz4). So runs of LZ4 batches are decompressed here, in one call
# each; anything this path does not take (other frame features, any fault) is left to cramjam,
# whose verdict stays the decoder's.
LZ4_MAGIC_LE = int.from_bytes(LZ4_FRAME_MAGIC, "little")
LZ4_FRAME_HEAD = 7  # magic, FLG, BD, HC: the frames taken here have no optional fields
LZ4_BLOCK_SIZE_MASK = LZ4_UNCOMPRESSED_BLOCK_FLAG - 1


@njit(cache=_CACHE, nogil=True, inline="always")
def _lz4_more(src, ip, iend, n):
    """A length's extra bytes (each added, until one is not 255) -> (length, next, ok)."""
    while True:
        if ip >= iend:
            return n, ip, False
        x = np.int64(src[ip])
        ip += 1
        n += x
        if x != 255:
            return n, ip, True


WILD_COPY = 16  # bytes one fixed-size copy moves (two 8-byte loads and stores once compiled)


@njit(cache=_CACHE, nogil=True, inline="always")
def _copy_short(dst, o, src, p, n):
    """``dst[o:o + n] = src[p:p + n]`` for the short copies of LZ4 sequences: in fixed 16-byte
    steps where both arrays have room past the end (the bytes written past it are garbage the
    next sequence overwrites, and nothing has been written there yet), else one memcpy of n
    (so a copy within one array is the caller's to make only where the ranges do not overlap).
    LZ4's own decoder does the same ("wild copy"): a memcpy call per few bytes costs more than
    the bytes."""
    if n <= 0:
        return
    if o + n + WILD_COPY <= dst.shape[0] and p + n + WILD_COPY <= src.shape[0]:
        k = 0
        while k < n:
            _copy(dst, o + k, src, p + k, WILD_COPY)
            k += WILD_COPY
    else:
        _copy(dst, o, src, p, n)


@njit(cache=_CACHE, nogil=True, inline="always")
def _copy_back(dst, op, offset, length):
    """Copy ``length`` bytes from ``offset`` bytes back (an LZ4 match, a snappy copy) to op;
    the new end. A copy longer than its offset repeats its period (copied doubling); a far one
    goes in 16-byte steps, each final before it is read."""
    m = op - offset
    if offset >= WILD_COPY and op + length + WILD_COPY <= dst.shape[0]:
        _copy_short(dst, op, dst, m, length)
        return op + length
    while length > 0:
        n = min(op - m, length)
        _copy(dst, op, dst, m, n)
        op += n
        length -= n
    return op


@njit(cache=_CACHE, nogil=True)
def _lz4_block(src, ip, iend, dst, op, oend, low):
    """Decode one LZ4 block src[ip:iend] into dst[op:oend]; matches may reach back to ``low``.
    The end of the output, or -1 for a block that breaks the format, its end rules included
    (it ends with literals; its last match starts 12 bytes or more before its end and ends 5 or
    more before it), so that nothing is taken that lz4's own decoder would refuse."""
    match_start = -1
    match_end = -1
    while True:
        if ip >= iend:
            return -1
        token = np.int64(src[ip])
        ip += 1
        lit = token >> 4
        if lit == 15:
            lit, ip, ok = _lz4_more(src, ip, iend, lit)
            if not ok:
                return -1
        if iend - ip < lit or oend - op < lit:
            return -1
        _copy_short(dst, op, src, ip, lit)
        ip += lit
        op += lit
        if ip == iend:  # the last sequence: literals only
            if match_start >= 0 and (
                op - match_start < LZ4_MATCH_FROM_END or op - match_end < LZ4_LAST_LITERALS
            ):
                return -1
            return op
        if iend - ip < 2:
            return -1
        offset = np.int64(src[ip]) | (np.int64(src[ip + 1]) << 8)
        ip += 2
        if offset == 0 or op - offset < low:
            return -1
        length = token & 15
        if length == 15:
            length, ip, ok = _lz4_more(src, ip, iend, length)
            if not ok:
                return -1
        length += LZ4_MIN_MATCH
        if oend - op < length:
            return -1
        match_start = op
        op = _copy_back(dst, op, offset, length)
        match_end = op


@njit(cache=_CACHE, nogil=True)
def _lz4_frame(src, p, end, dst, o, cap, header_checksums):
    """Decompress the LZ4 frame src[p:end] into dst[o:cap]: the bytes written, or -1 when the
    frame is not one taken here (FLG and BD without checksums, content size or dictionary,
    whose header checksum ``header_checksums[FLG, BD]`` holds, -1 for any other; nothing after
    the end mark) or breaks the format anywhere."""
    if end - p < LZ4_FRAME_HEAD or _le32(src, p) != LZ4_MAGIC_LE:
        return -1
    flg = src[p + 4]
    bd = src[p + 5]
    if header_checksums[flg, bd] != src[p + 6]:
        return -1
    block_max = np.int64(1) << (8 + 2 * ((bd >> LZ4_BD_SIZE_SHIFT) & 7))
    first = o
    q = p + LZ4_FRAME_HEAD
    while True:
        if end - q < 4:
            return -1
        size = _le32(src, q)
        q += 4
        if size == 0:  # the end mark
            break
        stored = size & LZ4_UNCOMPRESSED_BLOCK_FLAG
        size &= LZ4_BLOCK_SIZE_MASK
        if size > block_max or end - q < size:
            return -1
        if stored:
            if cap - o < size:
                return -1
            _copy(dst, o, src, q, size)
            o += size
        else:
            low = o if flg & LZ4_FLG_INDEPENDENT_BLOCKS else first
            o = _lz4_block(src, q, q + size, dst, o, min(cap, o + block_max), low)
            if o < 0:
                return -1
        q += size
    if q != end:
        return -1
    return o - first


# -- snappy, raw blocks and snappy-java's stream ------------------------------------------------
# the magic as two big-endian int32s, as _be32 reads them; the first also marks a concatenated
# stream where a block length is expected
XERIAL_MAGIC_HI = int.from_bytes(SNAPPY_XERIAL_MAGIC[:4], "big", signed=True)
XERIAL_MAGIC_LO = int.from_bytes(SNAPPY_XERIAL_MAGIC[4:], "big", signed=True)


@njit(cache=_CACHE, nogil=True)
def _snappy_block(src, ip, iend, dst, op, oend):
    """Decode the raw snappy block src[ip:iend] (its length, then literals and copies) into
    dst[op:oend]: the end of the output, or -1 for a block that breaks the format (the length
    it declares not met exactly, a copy from before the block or at offset 0) or does not fit."""
    n, ip, ok = _uvarint(src, ip, iend, 5)
    if not ok or n > 0xFFFFFFFF or oend - op < n:
        return -1
    first = op
    end = op + n
    while ip < iend:
        tag = np.int64(src[ip])
        ip += 1
        kind = tag & 3
        if kind == 0:  # literal: length - 1 in the tag, or in the 1-4 bytes after it
            length = tag >> 2
            if length >= 60:
                extra = length - 59
                if iend - ip < extra:
                    return -1
                length = 0
                for k in range(extra):
                    length |= np.int64(src[ip + k]) << (8 * k)
                ip += extra
            length += 1
            if iend - ip < length or end - op < length:
                return -1
            _copy_short(dst, op, src, ip, length)
            ip += length
            op += length
            continue
        if kind == 1:  # copy, 1-byte offset: length 4-11, offset's high 3 bits in the tag
            if iend - ip < 1:
                return -1
            length = 4 + ((tag >> 2) & 7)
            offset = ((tag >> 5) << 8) | np.int64(src[ip])
            ip += 1
        elif kind == 2:  # copy, 2-byte little-endian offset
            if iend - ip < 2:
                return -1
            length = 1 + (tag >> 2)
            offset = np.int64(src[ip]) | (np.int64(src[ip + 1]) << 8)
            ip += 2
        else:  # copy, 4-byte little-endian offset
            if iend - ip < 4:
                return -1
            length = 1 + (tag >> 2)
            offset = _le32(src, ip)
            ip += 4
        if offset == 0 or offset > op - first or end - op < length:
            return -1
        op = _copy_back(dst, op, offset, length)
    if op != end:
        return -1
    return op


@njit(cache=_CACHE, nogil=True)
def _snappy_payload(src, p, end, dst, o, cap):
    """Decompress a batch's snappy payload src[p:end] into dst[o:cap]: a snappy-java stream
    (one header; a concatenated stream is left to cramjam) or one raw block. The bytes written,
    or -1 when it is not taken here (see _snappy_block)."""
    first = o
    if (
        end - p >= SNAPPY_XERIAL_HEADER_SIZE
        and _be32(src, p) == XERIAL_MAGIC_HI
        and _be32(src, p + 4) == XERIAL_MAGIC_LO
    ):
        q = p + SNAPPY_XERIAL_HEADER_SIZE
        while q < end:
            if end - q < 4:
                return -1
            length = np.int64(_be32(src, q))
            q += 4
            if length <= 0 or length == XERIAL_MAGIC_HI or end - q < length:
                return -1
            o = _snappy_block(src, q, q + length, dst, o, cap)
            if o < 0:
                return -1
            q += length
        return o - first
    o = _snappy_block(src, p, end, dst, o, cap)
    return -1 if o < 0 else o - first


# -- runs of small compressed batches ---------------------------------------------------------
@njit(cache=_CACHE, nogil=True)
def inflate_batches(
    src, starts, ends, views, counts, codecs, i, dst, w, fill, room, header_checksums, got
):
    """Decompress batches i, i + 1, ... (payloads src[starts[j]:ends[j]], LZ4 or snappy) one
    after another into dst from w, each given ``views[j]`` bytes, while the chunk has room: it
    stops before a batch that would not fit its view in dst, once ``fill`` bytes are written,
    before the records would pass ``room``, and at a batch it does not take (another codec, or
    a payload _lz4_frame or _snappy_payload leaves). got[j]: the bytes batch j decompressed to.
    Returns (the batch it stopped at, w, records taken)."""
    held = 0
    n = starts.shape[0]
    cap = dst.shape[0]
    while i < n:
        need = views[i]
        if cap - w < need or w >= fill or held + counts[i] > room:
            break
        if codecs[i] == COMPRESSION_LZ4:
            k = _lz4_frame(src, starts[i], ends[i], dst, w, w + need, header_checksums)
        elif codecs[i] == COMPRESSION_SNAPPY:
            k = _snappy_payload(src, starts[i], ends[i], dst, w, w + need)
        else:
            k = -1
        if k < 0:
            break
        got[i] = k
        w += k
        held += counts[i]
        i += 1
    return i, w, held


@njit(cache=_CACHE, nogil=True)
def find_resync(buf, start, end, file_remaining_from_start, max_entry):
    """First position >= start whose head (up to its magic) looks like a log entry that fits
    the file.

    The caller confirms a candidate by its CRC; this only filters cheaply.
    """
    p = start
    while p + HEADER_SIZE_UP_TO_MAGIC <= end:
        m = buf[p + MAGIC_OFFSET]
        if m <= CURRENT_MAGIC_VALUE:
            s = _be32(buf, p + SIZE_OFFSET)
            fits = (p - start) + LOG_OVERHEAD + s <= file_remaining_from_start
            if (
                s >= MIN_LEGACY_ENTRY_SIZE
                and s <= max_entry
                and (m != MAGIC_VALUE_V2 or s >= MIN_BATCH_LENGTH_V2)
                and fits
            ):
                return p
        p += 1
    return -1


def load_cached(*modules: ModuleType) -> int:
    """Load every compiled kernel of ``modules`` found in numba's on-disk cache now, rather
    than at each kernel's first call: a process that forks workers (jobs.daemon) does it once
    for all of them. Reads numba's cache index (decoders.numba_cache.cached_signatures, not a
    public API): a kernel whose index cannot be read is left to its first call. The number of
    kernels loaded."""
    from numba.core.registry import CPUDispatcher

    loaded = 0
    for module in modules:
        for kernel in vars(module).values():
            if not isinstance(kernel, CPUDispatcher):
                continue
            try:
                for sig in cached_signatures(kernel):
                    kernel.compile(sig)
                    loaded += 1
            except Exception:  # noqa: S112 (an unreadable index: compiled on first call)
                continue
    return loaded

"""The four codecs of a v2 record batch's records, with Kafka's framings (docs/storage.md).

A compressed batch keeps its 61-byte header as it is and compresses only what follows it,
the records, as one stream; the codec is attribute bits 0-2. Kafka's clients frame each
codec their own way, and a reader must take all of them:

======  ============================================================================
gzip    RFC 1952 members (Java's ``GZIPOutputStream``); concatenated members are one
        stream
snappy  snappy-java's framing (``SnappyOutputStream``): the 16-byte header
        ``\\x82SNAPPY\\x00``, version 1, compatible version 1, then blocks of a 4-byte
        big-endian length and a raw snappy block each. librdkafka writes one raw snappy
        block with no framing, which snappy-java and librdkafka also read
lz4     the LZ4 frame format (KIP-57: the header checksum over the descriptor only);
        Kafka's Java writer uses independent 64 KiB blocks without content size
zstd    zstd frames
======  ============================================================================

:func:`compress` writes what Kafka's Java producer writes (snappy-java's framing, lz4
frames of independent 64 KiB blocks; gzip level 6, zstd level 3 as Kafka 2.8's defaults),
which every client reads.

Decompression is bounded: a payload is never inflated past ``limit`` bytes (a
decompression bomb of a few KiB that would fill gigabytes is refused after writing at most
``limit``), and anything a codec cannot decode raises :class:`CompressedRecordsError`
(CORRUPT_MESSAGE) naming the codec and what it said.

Libraries: ``cramjam`` (snappy, whose raw blocks state their length; gzip and zstd
decompressed into a buffer of fixed size, twice as fast as the standard library's zlib),
``zlib`` for gzip compression (faster than cramjam's at the same level) and ``lz4``
(python-lz4, whose frame compressor has the block options Kafka's framing needs and whose
decompressor takes a maximum output length).
bench/RESULTS.md ("Record codecs") has the measurements behind the choice.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from enum import IntEnum
from typing import Any

import cramjam
import lz4.frame

from proto.records.corruption import CorruptRecordError

__all__ = [
    "CODEC_NAMES",
    "Codec",
    "CompressedRecordsError",
    "DecompressedTooLargeError",
    "codec_named",
    "compress",
    "decompress",
]


class Codec(IntEnum):
    """Kafka's compression codec ids (attribute bits 0-2 of a batch)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


CODEC_NAMES = {c.value: c.name.lower() for c in Codec}
"""Codec id -> its ``compression.type`` name."""
_BY_NAME = {name: Codec(value) for value, name in CODEC_NAMES.items()}


def codec_named(name: str) -> Codec:
    """The codec of a ``compression.type`` value (``none``, ``gzip``, ``snappy``, ``lz4``,
    ``zstd``; ``uncompressed`` is ``none``), or ValueError naming the valid ones."""
    key = name.strip().lower()
    if key == "uncompressed":
        return Codec.NONE
    try:
        return _BY_NAME[key]
    except KeyError:
        raise ValueError(
            f"unknown compression type {name!r}: one of {', '.join(_BY_NAME)}"
        ) from None


class CompressedRecordsError(CorruptRecordError):
    """A compressed payload its codec cannot decode (Kafka's CORRUPT_MESSAGE)."""


class DecompressedTooLargeError(CompressedRecordsError):
    """A payload that inflates past the limit: refused, never inflated further."""


GZIP_LEVEL = 6
ZSTD_LEVEL = 3
SNAPPY_BLOCK_BYTES = 32 * 1024
"""snappy-java's default block size: the uncompressed bytes of each framed block."""

XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
_BLOCK_LENGTH = struct.Struct(">i")

_SMALL_OUTPUT = 256 * 1024
"""Below this a first attempt decompresses into a plain buffer of this size; only a payload
that does not fit there pays for a buffer of the whole limit (an anonymous mapping, whose
pages cost nothing until they are written)."""


def compress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    """``data`` (a batch's records) compressed as Kafka's Java producer writes it."""
    if codec == Codec.GZIP:
        deflate = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # 31: a gzip member
        return deflate.compress(data) + deflate.flush()
    if codec == Codec.SNAPPY:
        return _xerial_snappy(bytes(data))
    if codec == Codec.LZ4:
        framed: bytes = lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
        return framed
    if codec == Codec.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=ZSTD_LEVEL))
    raise ValueError(f"compression codec id {codec} is not a compressing codec (1-4)")


def _xerial_snappy(data: bytes) -> bytes:
    parts = [XERIAL_HEADER]
    for start in range(0, len(data), SNAPPY_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + SNAPPY_BLOCK_BYTES]))
        parts += (_BLOCK_LENGTH.pack(len(block)), block)
    return b"".join(parts)


def decompress(
    codec: int, payload: bytes | bytearray | memoryview, limit: int
) -> bytes | bytearray:
    """The records compressed in ``payload`` with ``codec``, at most ``limit`` bytes of them
    (a bytearray where that saves copying a large output).

    Raises :class:`DecompressedTooLargeError` for a payload that holds more than ``limit``
    bytes, and :class:`CompressedRecordsError` for one the codec cannot decode.
    """
    name = CODEC_NAMES.get(codec, str(codec))
    try:
        if codec == Codec.GZIP:
            return _gzip(payload, limit)
        if codec == Codec.SNAPPY:
            return _snappy(bytes(payload), limit)
        if codec == Codec.LZ4:
            return _lz4(payload, limit)
        if codec == Codec.ZSTD:
            return _zstd(payload, limit)
    except CompressedRecordsError:
        raise
    except Exception as e:  # each library has its own errors; all mean "not decodable"
        raise CompressedRecordsError(
            f"{name} payload of {len(payload)} bytes does not decompress: {_said(e)}"
        ) from None
    raise ValueError(f"compression codec id {codec} is not a compressing codec (1-4)")


def _too_large(codec: str, compressed: int, limit: int) -> DecompressedTooLargeError:
    return DecompressedTooLargeError(
        f"{codec} payload of {compressed} bytes decompresses to more than {limit} bytes, "
        "the limit for one batch's records"
    )


def _gzip(payload: bytes | bytearray | memoryview, limit: int) -> bytes | bytearray:
    """gzip members through cramjam, with the last member's ISIZE (its length modulo 2**32,
    RFC 1952) as the hint for the first buffer."""
    stated = int.from_bytes(payload[-4:], "little") if len(payload) >= 18 else None
    return _bounded(cramjam.gzip.decompress_into, "gzip", payload, limit, stated)


_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_FCS_BYTES = (0, 2, 4, 8)
_DID_BYTES = (0, 1, 2, 4)


def zstd_content_size(payload: bytes | bytearray | memoryview) -> int | None:
    """The Frame_Content_Size of the zstd frame ``payload`` begins with (RFC 8878 3.1.1.1),
    or None where the frame does not state it. Only a hint for the output buffer's size:
    the decoder is still bounded by the buffer, whatever the header claims."""
    if len(payload) < 6 or bytes(payload[:4]) != _ZSTD_MAGIC:
        return None
    fhd = payload[4]
    single_segment = fhd >> 5 & 1
    fcs_bytes = _FCS_BYTES[fhd >> 6] or single_segment
    if not fcs_bytes:
        return None
    pos = 5 + (0 if single_segment else 1) + _DID_BYTES[fhd & 3]
    field = bytes(payload[pos : pos + fcs_bytes])
    if len(field) != fcs_bytes:
        return None
    size = int.from_bytes(field, "little")
    return size + 256 if fcs_bytes == 2 else size


def _zstd(payload: bytes | bytearray | memoryview, limit: int) -> bytes | bytearray:
    stated = zstd_content_size(payload)
    if stated is not None and stated > limit:
        raise _too_large("zstd", len(payload), limit)
    return _bounded(cramjam.zstd.decompress_into, "zstd", payload, limit, stated)


def _bounded(
    decompress_into: Any,
    codec: str,
    payload: bytes | bytearray | memoryview,
    limit: int,
    stated: int | None,
) -> bytes | bytearray:
    """Decompress with a cramjam ``decompress_into``, which fails (having written only its
    buffer) when the output does not fit. The first buffer is the size the payload states
    (or a small one); a payload that does not fit there gets one of ``limit + 1`` bytes (an
    anonymous mapping, whose pages cost nothing until written), so that exactly ``limit``
    bytes fit and one more is refused. What a header states is only a hint: the buffer is
    the bound."""
    first = min(limit, stated if stated is not None else _SMALL_OUTPUT) + 1
    small = bytearray(first)
    n = _fits(decompress_into, payload, small)
    if n is not None:
        del small[n:]  # in place: a copy of a large output costs as much as inflating it
        return small
    if first > limit:
        raise _too_large(codec, len(payload), limit)
    with mmap.mmap(-1, limit + 1) as big:
        n = _fits(decompress_into, payload, big)
        if n is None:
            raise _too_large(codec, len(payload), limit)
        return big[:n]


def _fits(
    decompress_into: Any, payload: bytes | bytearray | memoryview, out: bytearray | mmap.mmap
) -> int | None:
    """Bytes written, or None when the output did not fit ``out`` (filled to its end)."""
    try:
        n = int(decompress_into(payload, out))
    except cramjam.DecompressionError as e:
        if "failed to write whole buffer" in str(e):
            return None
        raise
    return None if n >= len(out) else n


def _snappy(payload: bytes, limit: int) -> bytes | bytearray:
    if not payload.startswith(XERIAL_HEADER[:8]):
        block = _raw_snappy(payload, limit)
        if block is None:
            raise _too_large("snappy", len(payload), limit)
        return block
    if len(payload) < len(XERIAL_HEADER):
        raise CompressedRecordsError(
            f"snappy payload of {len(payload)} bytes ends inside snappy-java's header"
        )
    parts, total, pos = [], 0, len(XERIAL_HEADER)
    while pos < len(payload):
        if pos + 4 > len(payload):
            raise CompressedRecordsError(
                f"snappy-java block at byte {pos}: its length runs past the payload's end"
            )
        (size,) = _BLOCK_LENGTH.unpack_from(payload, pos)
        pos += 4
        if size < 0 or pos + size > len(payload):
            raise CompressedRecordsError(
                f"snappy-java block at byte {pos - 4}: length {size} with "
                f"{len(payload) - pos} bytes left"
            )
        block = _raw_snappy(payload[pos : pos + size], limit - total)
        if block is None:
            raise _too_large("snappy", len(payload), limit)
        parts.append(block)
        total += len(block)
        pos += size
    return b"".join(parts)


def _raw_snappy(block: bytes, room: int) -> bytearray | None:
    """One raw snappy block, or None when it holds more than ``room`` bytes: its preamble
    states its uncompressed length, checked before anything is inflated."""
    size = int(cramjam.snappy.decompress_raw_len(block))
    if size > room:
        return None
    out = bytearray(size)
    n = int(cramjam.snappy.decompress_raw_into(block, out))
    if n != size:
        raise CompressedRecordsError(
            f"snappy block of {len(block)} bytes gave {n} bytes where its preamble says {size}"
        )
    return out


def _lz4(payload: bytes | bytearray | memoryview, limit: int) -> bytes:
    """LZ4 frames, one after another, inflated at most ``limit + 1`` bytes in all."""
    data, out, total = bytes(payload), [], 0
    while data:
        decoder = lz4.frame.LZ4FrameDecompressor()
        chunk = decoder.decompress(data, max_length=limit - total + 1)
        total += len(chunk)
        out.append(chunk)
        if total > limit:
            raise _too_large("lz4", len(payload), limit)
        if not decoder.eof:
            if decoder.needs_input:
                raise CompressedRecordsError(
                    f"lz4 payload of {len(payload)} bytes ends inside a frame"
                )
            raise _too_large("lz4", len(payload), limit)
        data = decoder.unused_data
    return b"".join(out)


def _said(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text if len(text) <= 200 else text[:200] + "..."

"""Build zip archives byte by byte, hostile ones included, for the artifact unpacker."""

from __future__ import annotations

import io
import struct
import warnings
import zipfile


def raw_zip(entries: list[tuple[zipfile.ZipInfo | str, bytes]]) -> bytes:
    """Zip entries exactly as given (duplicates allowed), deflated unless the info says."""
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns on a duplicate name
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
            for info, data in entries:
                zf.writestr(info, data)
    return buf.getvalue()


def with_mode(name: str, mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3  # Unix
    info.external_attr = mode << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def set_declared_size(archive: bytes, size: int) -> bytes:
    """Rewrite every entry's uncompressed size, in the local and the central headers."""
    data = bytearray(archive)
    for sig, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = data.find(sig)
        while at >= 0:
            struct.pack_into("<I", data, at + offset, size)
            at = data.find(sig, at + 4)
    return bytes(data)


def set_flag_bits(archive: bytes, bits: int) -> bytes:
    """Set general-purpose flag bits in every local and central header."""
    data = bytearray(archive)
    for sig, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.find(sig)
        while at >= 0:
            (flags,) = struct.unpack_from("<H", data, at + offset)
            struct.pack_into("<H", data, at + offset, flags | bits)
            at = data.find(sig, at + 4)
    return bytes(data)

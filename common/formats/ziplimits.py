"""Bounds on what an uploaded archive may inflate to, checked from its directory before any member is read.

A zip declares each member's compressed and uncompressed size, and Python's zipfile never inflates past the declared
uncompressed size (a member that lies fails its CRC check), so these checks bound what reading costs: no member and no
archive may inflate past a total, and no large member may inflate by more than MAX_RATIO (model weights and measured
arrays barely compress; a decompression bomb inflates a thousand-fold). The ratio is only as true as the claimed
compressed size, so every claim is first held against the bytes the archive really has (check_claims): a directory
that claims 20 MB of compressed data in a 1 MB file lies, and is refused. The leader applies these to every upload it
opens and the follower again to every archive it unpacks, each with its own total.
"""

from __future__ import annotations

import zipfile

# A member may inflate to at most this many times its compressed size, once it is larger than RATIO_FLOOR bytes.
MAX_RATIO = 100
RATIO_FLOOR = 1024 * 1024


class ArchiveTooLarge(ValueError):
    """An archive (or one member) inflates past a bound; the message names the member and the figures."""


def check_member(info: zipfile.ZipInfo, limit: int) -> None:
    """One member within `limit` bytes inflated and the ratio bound."""
    if info.file_size > limit:
        raise ArchiveTooLarge(f"member {info.filename!r} inflates to {info.file_size:,} bytes, over the limit of {limit:,}")
    check_ratio(info)


def check_ratio(info: zipfile.ZipInfo) -> None:
    """One member within the ratio bound."""
    if info.file_size > RATIO_FLOOR and info.file_size > MAX_RATIO * max(info.compress_size, 1):
        raise ArchiveTooLarge(
            f"member {info.filename!r} inflates {info.file_size / max(info.compress_size, 1):,.0f}-fold "
            f"({info.compress_size:,} to {info.file_size:,} bytes): at most {MAX_RATIO}-fold is "
            "accepted (a decompression bomb?)"
        )


def check_claims(archive: zipfile.ZipFile) -> None:
    """Every member's claimed compressed bytes lie inside the archive, and all of them together fit in it: the ratio
    bound then holds on the bytes really there, not on what the directory says."""
    fp = archive.fp
    assert fp is not None, "an open archive"
    here = fp.tell()
    size = fp.seek(0, 2)
    fp.seek(here)
    claimed = 0
    for info in archive.infolist():
        claimed += info.compress_size
        if info.header_offset + info.compress_size > size or claimed > size:
            raise ArchiveTooLarge(
                f"member {info.filename!r} claims {info.compress_size:,} compressed bytes that the archive "
                f"({size:,} bytes) does not hold: its directory lies (a decompression bomb?)"
            )


def check_archive(archive: zipfile.ZipFile, total_limit: int, member_limit: int | None = None) -> int:
    """Every member within the bounds and all of them within `total_limit` bytes inflated; the total."""
    check_claims(archive)
    total = 0
    for info in archive.infolist():
        check_member(info, member_limit if member_limit is not None else total_limit)
        total += info.file_size
        if total > total_limit:
            raise ArchiveTooLarge(f"the archive inflates past {total_limit:,} bytes (at member {info.filename!r})")
    return total

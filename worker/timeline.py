"""The memory timeline stored with a report: samples over time, downsampled
to a few thousand points keeping each bucket's maximum, so peaks survive."""
from __future__ import annotations

MAX_POINTS = 2000
SAMPLED = ("host_rss", "device_used", "process_used")
ALLOCATOR = ("allocated", "reserved")


def downsample(rows: list[dict], columns: tuple[str, ...], limit: int = MAX_POINTS) -> list[list]:
    """Rows as [t, *columns]; with more than `limit` rows, each bucket of rows
    becomes one row: the bucket's first time and each column's maximum."""
    table = [[r["t"], *(r.get(c) for c in columns)] for r in rows]
    if len(table) <= limit:
        return table
    size = -(-len(table) // limit)  # ceil
    out = []
    for i in range(0, len(table), size):
        bucket = table[i:i + size]
        out.append([bucket[0][0], *(max((row[j] for row in bucket if row[j] is not None),
                                        default=None) for j in range(1, len(columns) + 1))])
    return out


def build(sampled: list[dict], allocator: list[dict]) -> dict:
    return {
        "sampled": {"columns": ["t", *SAMPLED], "rows": downsample(sampled, SAMPLED),
                    "method": "worker-side sampling at ~100 Hz (host RSS of the child tree; "
                              "NVML device and per-process used)"},
        "allocator": {"columns": ["t", *ALLOCATOR], "rows": downsample(allocator, ALLOCATOR),
                      "method": "torch.cuda.memory_allocated/reserved sampled at ~100 Hz "
                                "inside the trial process (CUDA only)"},
    }

"""How much one file's decoding may read, expand and hold at once (the decode.* settings).

Defaults of the segment decoder; the jobs pass the configured values.
"""

from __future__ import annotations

DEFAULT_WINDOW_BYTES = 8 * 1024 * 1024
# A batch larger than this is treated as corrupt rather than read (message.max.bytes is ~1 MiB
# by default; clusters raise it, rarely past tens of MiB).
DEFAULT_MAX_BATCH_BYTES = 128 * 1024 * 1024
# Decompressed bytes held at once, and the most one batch may expand to.
DEFAULT_MAX_DECOMPRESSED = 32 * 1024 * 1024
DEFAULT_MAX_BATCH_DECOMPRESSED = 32 * 1024 * 1024
# What decoding one file may hold at once (decode.memory_budget_mb): sized for an executor of
# 2 cores and 8 GB, i.e. about 4 GB per task, less what Spark, Arrow and Python keep.
DEFAULT_MEMORY_BUDGET = 1024 * 1024 * 1024

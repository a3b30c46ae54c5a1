"""Bytes per element of the dtypes the indexer's buffers hold: the one place each is written."""

BOOL_BYTES = 1
BF16_BYTES = 2
INT32_BYTES = 4
FP32_BYTES = 4
INT64_BYTES = 8

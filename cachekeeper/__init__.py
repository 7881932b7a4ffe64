"""The cachekeeper: a disk-backed store of KV-cache states, found by token prefix."""

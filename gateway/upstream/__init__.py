"""The gateway's round trips: the dispatcher client and the answer cache at the cachekeeper."""

"""`reame bench`: reame measured side by side with llama-cpp-python's server (see cli.py, BENCHMARKS.md)."""

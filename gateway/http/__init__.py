"""HTTP in and out: the gunicorn worker, limits, auth, errors, request logs, SSE, the web page, metrics."""

"""The HTTP gateway: the OpenAI API under gunicorn, forwarding generation to the dispatcher."""

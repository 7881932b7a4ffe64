"""The dispatcher: a ZeroMQ load-balancing broker between gateways and workers."""

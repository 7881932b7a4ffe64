"""Code every reame process shares: the wire protocol, configuration, logging."""

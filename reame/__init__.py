"""reame: an OpenAI-compatible LLM server for small CPU machines that reads each document once.

The code lives in the top-level folders of the repository (``gateway/``, ``worker/``,
``cachekeeper/``, ``dispatcher/``, ``supervisor/``, ``shared/``); the links in this
folder make them the ``reame.*`` packages, so that nothing is installed or imported
under a name another distribution may own (``supervisor``, ``shared``, ``worker``).
"""

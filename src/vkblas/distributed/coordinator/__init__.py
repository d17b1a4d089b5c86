"""The coordinator of a distributed run (``vkblas distributed serve``): an ASGI app (FastAPI under uvicorn) over a
SQL database (SQLite or PostgreSQL, Alembic migrations) and a content-addressed store of shards.

* :mod:`.config`: the run's spec and the process settings. :mod:`.models`, :mod:`.db`, ``migrations/``: the state.
* :mod:`.store`, :mod:`.checkpoints`: files by content hash; model versions in them.
* :mod:`.runs`, :mod:`.crud`: creating the run; what each request does to the state (keyword-only functions taking
  a session).
* :mod:`.applier`: the one job that changes the model (record -> apply -> checkpoint), run by one process at a
  time; also expiry of leases, evaluation, garbage collection of the store.
* :mod:`.app`, ``api/``: the HTTP routes. :mod:`.serve`: the command.
"""

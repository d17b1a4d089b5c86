"""The HTTP routes of the coordinator, one module per resource, all under ``/v1``."""

"""The coordinator and worker of distributed training (a package, so its conftest does not shadow the root one)."""

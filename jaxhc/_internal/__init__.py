"""Internal helpers shared across jaxhc (not public API): input validation, dtypes,
progress bars, the chain driver and the worker pool."""

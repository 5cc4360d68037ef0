import foo_backend  # noqa: F401  (registers the foo device even with autoload disabled)

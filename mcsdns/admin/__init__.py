"""The admin side: the admin HTTP server, /imports and /explain, the CLI client, orphans, the metrics doc."""

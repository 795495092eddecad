"""`--workers N`: the supervisor, the updates it sends its workers, the compiled answers laid out to share."""

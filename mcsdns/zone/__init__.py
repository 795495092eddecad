"""Objects -> compiled answers, with no I/O: the vocabulary, names, the compiler, reverse zones,
DNS-SD, the fast path, wire rendering and the table."""

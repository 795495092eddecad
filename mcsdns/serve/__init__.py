"""The DNS server: packets in (UDP, TCP), the resolver, replies out; the event loop and the query log."""

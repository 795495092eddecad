"""Names outside the zones, to upstreams: the forwarder and the checks of their replies."""

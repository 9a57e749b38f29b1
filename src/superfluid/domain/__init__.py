"""The pure core: rules and maths with no I/O, no clocks, no threads (stdlib + numpy only)."""

"""Table services, each its own module on one lifecycle (``lifecycle``): rollback, restore and
savepoint, clean, recovery of dead instants, markers, validate. Never imports an engine or
the commit envelope."""

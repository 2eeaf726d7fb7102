pytest_plugins = ["orca.core.testing.fixtures"]


def report_and_wait(server, event, wait_s=10.0):
    """Send ``event`` to ``server`` (a ProgressServer) as a real reporter does, then wait (polling,
    up to ``wait_s``) until the server holds an event."""
    import time

    from orca.core.engine.progress import Reporter

    reporter = Reporter(server.endpoint)
    reporter(event)
    reporter.close()
    deadline = time.monotonic() + wait_s
    while not server.events and time.monotonic() < deadline:
        time.sleep(0.02)

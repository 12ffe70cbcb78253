"""A fake Compute Engine v1 REST API for tests: a real HTTP server on 127.0.0.1 (random port) in a thread.

    with FakeCompute() as compute:                       # compute.cloud: the FakeCloud it serves
        client_options = {"api_endpoint": compute.url}   # with google.auth.credentials.AnonymousCredentials()

It speaks zones, machine types (zonal and aggregated), instances (insert with requestId, get, delete, list,
aggregated list, simulateMaintenanceEvent) and zone operations (get, wait, list), with GCE's list filters
`FIELD = "VALUE"`, `FIELD != "VALUE"` and `FIELD:*`, paging, and GCE's error format. Knobs on `FakeCloud`:
`fail_next(...)` (an HTTP error reply), `fail_next_insert_operation(OperationError(...))` (an accepted insert whose
operation fails, e.g. ZONE_RESOURCE_POOL_EXHAUSTED), `preempt(zone, name)`, `stop(zone, name)`,
`forget_request_ids()`, `operation_polls`, `page_size`, `deletes_at_once`, and `requests` (every request with its
JSON body). `loopback_only()` makes any attempt to reach another host fail, and lists them.

Tests run with --import-mode=importlib, so a conftest that wants this package puts tests/ on sys.path:

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/
    from fakes_gcp import FakeCompute
"""

from .cloud import ApiError, FakeCloud, OperationError, RecordedRequest
from .network_guard import loopback_only
from .server import FakeCompute

__all__ = ["ApiError", "FakeCloud", "FakeCompute", "OperationError", "RecordedRequest", "loopback_only"]

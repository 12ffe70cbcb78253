"""Fake cloud metadata services for tests: real HTTP servers on 127.0.0.1 (random port) in a thread.

- `FakeImds` — AWS EC2 IMDSv2 (spot instance-action, rebalance recommendation; session tokens required)
- `FakeGceMetadata` — GCE metadata server (instance/preempted, instance/maintenance-event; long-polls)
- `FakeAzureEvents` — Azure Scheduled Events
- `FakeAwsPricing` — the AWS Price List Query API (GetProducts), for boto3's `pricing` client

Each is a context manager; `url` is the root that replaces the real service's address (give it to the agent as
SPOTRUN_AWS_METADATA_URL / SPOTRUN_GCE_METADATA_URL / SPOTRUN_AZURE_METADATA_URL). Common to all of them:
`requests`, `request_count(path, method)`, and the breakers `fail_with_status(500)`, `drop_connections()`,
`answer_garbage()`, `repair()`, `close()`.

Tests run with --import-mode=importlib, so `tests/` is not on sys.path by itself; a conftest that wants these
fakes adds it:

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/
    from fakes import FakeImds
"""

from .fake_aws_pricing import FakeAwsPricing, ec2_product
from .fake_azure_events import FakeAzureEvents, ScheduledEvent
from .fake_gce_metadata import FakeGceMetadata
from .fake_imds import FakeImds
from .metadata_server import Breakage, FakeMetadataServer, Reply, ServedRequest

__all__ = [
    "Breakage",
    "FakeAwsPricing",
    "FakeAzureEvents",
    "FakeGceMetadata",
    "FakeImds",
    "FakeMetadataServer",
    "Reply",
    "ScheduledEvent",
    "ServedRequest",
    "ec2_product",
]

"""A fake Azure Resource Manager (Microsoft.Compute VMs, operations, SKUs) for tests: a real HTTP server on
127.0.0.1, reached by azure-mgmt-compute through `LoopbackTransport`, with `FakeCredential` as the identity.

Tests run with --import-mode=importlib, so `tests/` is not on sys.path by itself; a conftest that wants this
package adds it:

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/
    from fakes_azure import FakeArm, FakeCredential, LoopbackTransport

    with FakeArm(subscription_id, "eastus") as arm:
        client_options = {"transport": LoopbackTransport(arm.url)}
"""

from .arm import FakeArm, FakeVm, Failure, Operation, ServedRequest
from .retail_prices import FakeRetailPrices, vm_meter
from .skus import disk_sku, vm_sku
from .transport import ARM_HOST, FAKE_TOKEN, FakeCredential, LoopbackTransport

__all__ = [
    "ARM_HOST",
    "FAKE_TOKEN",
    "Failure",
    "FakeArm",
    "FakeRetailPrices",
    "FakeCredential",
    "FakeVm",
    "LoopbackTransport",
    "Operation",
    "ServedRequest",
    "disk_sku",
    "vm_meter",
    "vm_sku",
]

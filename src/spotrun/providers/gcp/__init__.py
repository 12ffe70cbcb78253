"""Google Compute Engine provider: `GcpProvider(**options)` (options: the fields of `GcpSettings`, else SPOTRUN_GCP_* variables)."""

from spotrun.providers.gcp.errors import GcpApiError
from spotrun.providers.gcp.provider import GcpProvider
from spotrun.providers.gcp.settings import PREEMPTIBLE_MAX_LIFETIME_SECONDS, GcpSettings
from spotrun.providers.gcp.startup import render_startup_script

__all__ = ["GcpApiError", "GcpProvider", "GcpSettings", "PREEMPTIBLE_MAX_LIFETIME_SECONDS", "render_startup_script"]

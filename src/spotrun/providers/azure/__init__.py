"""Azure VM provider: `AzureProvider(**options)` (options: the fields of `AzureSettings`, else SPOTRUN_AZURE_* variables)."""

from spotrun.providers.azure.errors import AzureApiError
from spotrun.providers.azure.provider import AzureProvider
from spotrun.providers.azure.settings import AzureSettings
from spotrun.providers.azure.startup import render_startup_script

__all__ = ["AzureApiError", "AzureProvider", "AzureSettings", "render_startup_script"]

"""AWS EC2 provider: `AwsProvider(**options)` (options: the fields of `AwsSettings`, else SPOTRUN_AWS_* variables)."""

from spotrun.providers.aws.errors import AwsApiError
from spotrun.providers.aws.provider import AwsProvider, PreemptUnsupported
from spotrun.providers.aws.settings import AwsSettings
from spotrun.providers.aws.startup import render_startup_script

__all__ = ["AwsApiError", "AwsProvider", "AwsSettings", "PreemptUnsupported", "render_startup_script"]

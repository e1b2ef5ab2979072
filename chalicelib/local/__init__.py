"""Local runtime: the Chalice app's handlers on moto, wired the way AWS wires them (see runtime.py)."""

from chalicelib.local.moto_server import MotoServer, shared_moto_server
from chalicelib.local.pollers import BatchResult, LambdaContext, SqsPoller
from chalicelib.local.provision import ProvisionedResource, ProvisionedResources, TemplateError, provision
from chalicelib.local.runtime import LocalRuntime
from chalicelib.local.scheduler import Scheduler, parse_schedule

__all__ = [
    "BatchResult",
    "LambdaContext",
    "LocalRuntime",
    "MotoServer",
    "ProvisionedResource",
    "ProvisionedResources",
    "Scheduler",
    "SqsPoller",
    "TemplateError",
    "parse_schedule",
    "provision",
    "shared_moto_server",
]

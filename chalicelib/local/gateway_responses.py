"""API Gateway's own answers, locally as on AWS.

On AWS a request no route matches (an unknown path, or a method a path does not take) never reaches the
function: API Gateway answers it with its MISSING_AUTHENTICATION_TOKEN response, which the stack's
template (`infra/template.json`, `AWS::ApiGateway::GatewayResponse`) rewrites into the API's envelope.
`chalice local`'s gateway (the local server and the test client) answers it with API Gateway's stock 403
instead; this module gives it the template's response, read from the same template, so the rule is
written once and the local stack answers as the deployed one.

Chalice's gateway is a public class used as its API documents it; only `handle_request` is wrapped."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: what chalice.local's gateway answers when no route matches (API Gateway's stock body)
_NO_ROUTE_BODY = b"Missing Authentication Token"


@dataclass(frozen=True)
class GatewayResponse:
    status: int
    body: str
    headers: Mapping[str, str]


def template_responses(template: Mapping[str, Any]) -> dict[str, GatewayResponse]:
    """The template's gateway responses by response type (`MISSING_AUTHENTICATION_TOKEN`, ...)."""
    found: dict[str, GatewayResponse] = {}
    for resource in template.get("Resources", {}).values():
        if resource.get("Type") != "AWS::ApiGateway::GatewayResponse":
            continue
        properties = resource["Properties"]
        headers = {
            name.removeprefix("gatewayresponse.header."): value.strip("'")
            for name, value in properties.get("ResponseParameters", {}).items()
        }
        if "StatusCode" in properties:  # a default response without one keeps the status it rewrites
            found[properties["ResponseType"]] = GatewayResponse(
                int(properties["StatusCode"]), properties["ResponseTemplates"]["application/json"], headers
            )
    return found


#: the unmatched-request response of the template the latest local runtime was built from
_no_route: list[GatewayResponse | None] = [None]


def install(template_path: str | Path) -> None:
    """From now on, chalice.local's gateway answers an unmatched request as this template says (or with
    API Gateway's stock 403 if it says nothing): the latest runtime's template counts."""
    from chalice.local import ForbiddenError, LocalGateway

    responses = template_responses(json.loads(Path(template_path).read_text()))
    _no_route[0] = responses.get("MISSING_AUTHENTICATION_TOKEN")
    if hasattr(LocalGateway.handle_request, "__wrapped__"):
        return  # wrapped by an earlier runtime
    original = LocalGateway.handle_request

    @functools.wraps(original)
    def handle_request(self: Any, method: str, path: str, headers: Any, body: Any) -> dict[str, Any]:
        try:
            return original(self, method, path, headers, body)
        except ForbiddenError as refused:
            no_route = _no_route[0]
            if no_route is None or _NO_ROUTE_BODY not in (refused.body or b""):
                raise
            return {
                "statusCode": no_route.status,
                "headers": dict(no_route.headers),
                "multiValueHeaders": {},
                "body": no_route.body,
            }

    LocalGateway.handle_request = handle_request  # type: ignore[method-assign]

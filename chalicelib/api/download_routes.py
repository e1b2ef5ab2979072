"""`GET /r/{token}`: a download link followed. No API key: the token (a grant on one file of the resource
catalog, services/resources.py) is the credential; it never reaches a log."""

from __future__ import annotations

from chalice import Response
from chalice.app import Request

from chalicelib.api.registry import operation, present_request
from chalicelib.ports import Dependencies
from chalicelib.services import resources


@operation(
    "Follow a download link: a redirect to a short-lived signed GET of the file (the token is the credential)",
    "knowledge",
    status=302,
    auth=False,
    errors=((410, "the link has expired (grant_expired) or its file was deleted (resource_deleted)"),),
)
def redeem_download(deps: Dependencies, request: Request | None, token: str) -> Response:
    present_request(request)
    target = resources.redeem(deps, token)
    return Response(
        body="", status_code=302, headers={"Location": target.location, "Cache-Control": "no-store"}
    )

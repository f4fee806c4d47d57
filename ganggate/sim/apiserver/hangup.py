"""A client that hangs up in the middle of a request: one DEBUG line, not an ERROR traceback.

A client may close its connection before the API server has read the body (a controller that
stops, a timed-out kubectl): aiohttp then raises ConnectionResetError from `request.read()`.
kube-apiserver treats this as routine: Go's net/http cancels the request's context when its
client's connection closes (net/http Request.Context: "the context is canceled when the
client's connection closes"), and the handler returns without an error log. kubesim does the
same: it says so at DEBUG and answers a response nobody reads (so aiohttp does not log the
reset as a handler failure).
"""

from __future__ import annotations

import logging

from aiohttp import web

log = logging.getLogger("ganggate.sim.apiserver")


class ClientGone(Exception):
    """The client closed its connection before its request's body was read."""


async def read_body(request: web.Request) -> bytes:
    """The request's body; ClientGone when the client hangs up meanwhile (only here: a reset
    while a response streams, a watch's say, is its handler's to deal with)."""
    try:
        return await request.read()
    except ConnectionResetError as exc:
        raise ClientGone(str(exc) or "connection lost") from exc


def client_hung_up(request: web.Request, exc: BaseException) -> web.Response:
    """Log that the client of `request` went away (one line), and the response to give aiohttp."""
    log.debug("client %s hung up during %s %s: %s", request.remote or "?", request.method, request.path_qs,
              exc or "connection lost")
    return web.Response(status=499, text="client closed the request")

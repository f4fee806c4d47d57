"""A bare aiohttp server answering each AdmissionReview with bytes given in advance: the floor
bench_webhook.py measures `ganggate webhook` against (the same TLS, the same bodies in and out;
no parsing, no decision, no metrics).

    python bench/bare_webhook.py --cert-file tls.crt --key-file tls.key --port 8443 --answers answers.json

answers.json: a JSON list of [request body, response body] pairs (strings).
"""

from __future__ import annotations

import argparse
import json
import ssl

from aiohttp import web


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--cert-file", required=True)
    parser.add_argument("--key-file", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--answers", required=True, help="JSON list of [request, response] body pairs")
    args = parser.parse_args()
    with open(args.answers, encoding="utf-8") as f:
        answers = {request.encode(): response.encode() for request, response in json.load(f)}

    async def mutate(request: web.Request) -> web.Response:
        return web.Response(body=answers[await request.read()], content_type="application/json")

    async def readyz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=8 * 1024 * 1024)
    app.router.add_post("/mutate", mutate)
    app.router.add_get("/readyz", readyz)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(args.cert_file, args.key_file)
    web.run_app(app, host=args.host, port=args.port, ssl_context=context, access_log=None, print=None)


if __name__ == "__main__":
    main()

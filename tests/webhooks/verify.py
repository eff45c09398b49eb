"""Deliveries of a real keygate verified with the Standard Webhooks reference library
(standardwebhooks, unchanged): run by run.sh, which starts the server."""

import json
import os
import queue
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

URL = os.environ["KEYGATE_URL"]
ROOT = os.environ["KEYGATE_ROOT_KEY"]
got = queue.Queue()


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        got.put(({k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def call(op, body):
    req = urllib.request.Request(
        f"{URL}/v2/{op}",
        data=json.dumps(body).encode(),
        headers={"authorization": f"Bearer {ROOT}", "content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)["data"]


def next_delivery():
    try:
        return got.get(timeout=10)
    except queue.Empty:
        raise SystemExit("FAIL: no delivery within 10 s")


def verified(secret, delivery):
    headers, body = delivery
    return Webhook(secret).verify(body, headers)


def refused(secret, delivery):
    try:
        verified(secret, delivery)
    except WebhookVerificationError:
        return True
    return False


server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
threading.Thread(target=server.serve_forever, daemon=True).start()
hook_url = f"http://127.0.0.1:{server.server_address[1]}/hook"

first = call("webhooks.createEndpoint", {"url": hook_url, "events": ["*"]})
secret = first["secret"]
api = call("apis.createApi", {"name": "webhooks-reference"})["apiId"]
created = call("keys.createKey", {"apiId": api, "name": "ref", "permissions": ["docs.read"]})

delivery = next_delivery()
payload = verified(secret, delivery)
assert payload["type"] == "key.created", payload
assert payload["data"]["keyId"] == created["keyId"], payload
assert created["key"] not in delivery[1].decode(), "no plaintext in a payload"
assert delivery[0]["webhook-id"].startswith("msg_"), delivery[0]
assert refused("whsec_" + "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE=", delivery), "a wrong secret must not verify"
print("key.created: verified by standardwebhooks")

rotated = call("webhooks.rotateSecret", {"endpointId": first["endpointId"]})["secret"]
call("keys.updateKey", {"keyId": created["keyId"], "name": "renamed"})
delivery = next_delivery()
assert len(delivery[0]["webhook-signature"].split(" ")) == 2, delivery[0]
for s in (secret, rotated):
    payload = verified(s, delivery)
    assert payload["type"] == "key.updated" and payload["data"]["name"] == "renamed", payload
print("key.updated during a rotation: both secrets verify")

rerolled = call("keys.rerollKey", {"keyId": created["keyId"], "expiration": 0})
payload = verified(rotated, next_delivery())
assert payload["type"] == "key.rerolled" and payload["data"]["previousKeyId"] == created["keyId"], payload
call("keys.deleteKey", {"keyId": rerolled["keyId"]})
payload = verified(rotated, next_delivery())
assert payload["type"] == "key.deleted" and payload["data"]["keyId"] == rerolled["keyId"], payload
print("key.rerolled, key.deleted: verified")
server.shutdown()

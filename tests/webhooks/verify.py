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


def next_delivery(timeout=10):
    try:
        return got.get(timeout=timeout)
    except queue.Empty:
        raise SystemExit(f"FAIL: no delivery within {timeout} s")


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

# expiration 0 ends the old key at once, so the expiry sweep's key.expired for it may come
# at any point among the next deliveries: it must verify too, and is seen exactly once.
expired = []


def next_except_expiry(secret):
    while True:
        payload = verified(secret, next_delivery())
        if payload["type"] != "key.expired":
            return payload
        assert payload["data"]["keyId"] == created["keyId"] and not expired, payload
        expired.append(payload)


rerolled = call("keys.rerollKey", {"keyId": created["keyId"], "expiration": 0})
payload = next_except_expiry(rotated)
assert payload["type"] == "key.rerolled" and payload["data"]["previousKeyId"] == created["keyId"], payload
call("keys.deleteKey", {"keyId": rerolled["keyId"]})
payload = next_except_expiry(rotated)
assert payload["type"] == "key.deleted" and payload["data"]["keyId"] == rerolled["keyId"], payload
print("key.rerolled, key.deleted: verified")
if not expired:
    # The expiry scan runs every 30 s on each instance.
    payload = verified(rotated, next_delivery(timeout=40))
    assert payload["type"] == "key.expired" and payload["data"]["keyId"] == created["keyId"], payload
print("key.expired of the rerolled key: verified")
server.shutdown()

"""The usage export of a real keygate read with the CloudEvents Python SDK (cloudevents,
unchanged): run by run.sh, which starts the server with the export pointed at SINK_PORT."""

import json
import os
import queue
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cloudevents.http import from_json

URL = os.environ["KEYGATE_URL"]
ROOT = os.environ["KEYGATE_ROOT_KEY"]
got = queue.Queue()


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        got.put((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(204)
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


server = ThreadingHTTPServer(("127.0.0.1", int(os.environ["SINK_PORT"])), Receiver)
threading.Thread(target=server.serve_forever, daemon=True).start()

identity = call("identities.createIdentity", {"externalId": "acme-corp"})["identityId"]
api = call("apis.createApi", {"name": "metered"})["apiId"]
key = call("keys.createKey", {"apiId": api, "externalId": "acme-corp", "credits": {"remaining": 100}})["key"]
for cost in (7, 7, 500):
    call("keys.verifyKey", {"key": key, "credits": {"cost": cost}})

# A period closes at the end of its minute and goes out 15 s later (rounds every 5 s).
try:
    path, headers, body = got.get(timeout=90)
except queue.Empty:
    raise SystemExit("FAIL: no usage batch within 90 s")
assert path == "/api/v1/events", path
assert headers["content-type"] == "application/cloudevents-batch+json", headers
assert headers["authorization"] == "Bearer om_metering_token", headers
batch = json.loads(body)
assert isinstance(batch, list) and len(batch) == 1, batch
event = from_json(json.dumps(batch[0]))
assert event["specversion"] == "1.0", event
assert event["type"] == "keygate.usage", event
assert event["subject"] == "acme-corp", event
assert event["source"].startswith("keygate/ws_"), event
assert event["id"].startswith(identity + "-"), event
assert event.data == {"credits": 14, "verifications": 3}, event.data
print("usage batch: read by the CloudEvents SDK, 14 credits in 3 verifications")
server.shutdown()

"""Verifies one webhook with the reference library, as an oracle for Herald's signer.

Reads a JSON object on stdin: {"secret": "whsec_...", "headers": {name: value}, "body_base64": "..."}.
Exits 0 when standardwebhooks.Webhook(secret).verify(body, headers) succeeds, 1 otherwise (reason on
stderr). Run by WebhookSignatureTests with the venv of scripts/webhook-venv.sh.
"""

import base64
import json
import sys

from standardwebhooks.webhooks import Webhook


def main() -> int:
    request = json.load(sys.stdin)
    body = base64.b64decode(request["body_base64"]).decode("utf-8")
    try:
        Webhook(request["secret"]).verify(body, request["headers"], json_parse=False)
    except Exception as error:  # the library's verification errors and malformed input alike
        print(f"verification failed: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

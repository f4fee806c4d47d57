# ganggate: one image for the webhook, the controller and the CLI.
#   docker build -t ghcr.io/ganggate/ganggate:0.1.0 .

# --- builder: build the wheel (and the wheels of its dependencies) -----------------------------
FROM python:3.11-slim AS builder
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY ganggate ./ganggate
RUN pip wheel --wheel-dir /wheels .

# --- runtime: the wheel installed into a slim image, run as a non-root user --------------------
FROM python:3.11-slim AS runtime
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=builder /wheels /wheels
RUN pip install --no-index --find-links=/wheels ganggate \
    && rm -rf /wheels \
    && groupadd --gid 65532 nonroot \
    && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin nonroot
USER 65532:65532
# 8443: webhook HTTPS; 8081: webhook metrics; 8080: controller metrics
EXPOSE 8443 8081 8080
ENTRYPOINT ["ganggate"]
CMD ["--help"]

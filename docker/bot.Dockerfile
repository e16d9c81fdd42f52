# The trialbot bot: the Slack app, the worker API, /healthz and /metrics. It
# needs no GPU; its SQLite file lives on a volume at /data (compose.yml).
#   docker build -f docker/bot.Dockerfile -t trialbot-bot .
FROM python:3.12-slim

WORKDIR /opt/trialbot
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY worker ./worker

# The base install is the worker's and asks for torch: the CPU build, since
# plain PyPI's CUDA build is gigabytes the bot never uses.
RUN pip install --no-cache-dir torch --index-url https://download.pytorch.org/whl/cpu \
    && pip install --no-cache-dir '.[bot]'

ENV TRIALBOT_DB=/data/trialbot.db
VOLUME /data
EXPOSE 3000
# docker stop's signal, said here: serve finishes the Slack calls in flight,
# marks them sent and exits 0 (docs/operations.md, "Stopping the bot").
STOPSIGNAL SIGTERM
CMD ["trialbot", "serve"]
